// One HTTP request's engine requests (n choices; prompts x n for completions) and their decoders. Polls
// the request streams, hands out choice frames in arrival order, records each request's timings in the
// metrics when it finishes, and cancels whatever has not finished when it is destroyed (a client that went
// away, a shutdown).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/choice_decoder.h"
#include "server/serving_context.h"

namespace rill::server {

struct JobFrame {
  int choice = 0;  // index into the job's choices
  ChoiceFrame frame;
};

class GenerationJob {
 public:
  using Clock = std::chrono::steady_clock;

  GenerationJob(ServingContext& ctx, Clock::time_point arrival)
      : ctx_(ctx), arrival_(arrival), guard_(ctx.track_request()) {}
  ~GenerationJob();
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // Submits one engine request; on failure the caller returns the error (the destructor cancels the rest).
  std::optional<ApiError> submit(engine::Request request, ChoiceDecoder decoder);

  int size() const { return int(choices_.size()); }
  ChoiceDecoder& decoder(int i) { return choices_[size_t(i)].decoder; }
  bool done() const { return n_finished_ == int(choices_.size()); }
  // Frames that became ready within `timeout` (empty on timeout). After a shutdown stopped the engine,
  // unfinished choices are finished here as server_interrupted.
  std::vector<JobFrame> poll(std::chrono::milliseconds timeout);
  // `wake` runs whenever one of the choices gets an event (see engine::RequestStream::set_on_push).
  void wake_on_event(const std::function<void()>& wake);
  // Cancels every unfinished engine request now.
  void cancel();
  // The response id the request log names (chatcmpl-..., cmpl-...), with the HTTP method, path and client.
  void set_request_id(std::string id, std::string method = "", std::string path = "", std::string client = "") {
    request_id_ = std::move(id);
    method_ = std::move(method);
    path_ = std::move(path);
    client_ = std::move(client);
  }

 private:
  struct Choice {
    std::shared_ptr<engine::RequestStream> stream;
    ChoiceDecoder decoder;
    int64_t prompt_tokens = 0;    // what usage will report, known at submit (an abort records it too)
    int64_t tokens_received = 0;  // generated ids seen so far
    double first_token_s = -1, last_token_s = -1;  // seconds from arrival, as events arrived here
    bool cancelled = false;
  };
  void take(int i, const engine::StreamEvent& event, std::vector<JobFrame>* out);

  ServingContext& ctx_;
  Clock::time_point arrival_;
  std::shared_ptr<void> guard_;
  std::vector<Choice> choices_;
  int n_finished_ = 0;
  size_t next_ = 0;  // round-robin start for n > 1
  std::string request_id_, method_, path_, client_;
};

}  // namespace rill::server
