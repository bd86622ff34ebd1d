// What `rill bench serve` measures of one streamed request, and the reader that fills it from the server-sent
// events as they arrive. Tokens come from the stream's usage chunk (stream_options.include_usage), never from
// counting frames: a frame may carry several tokens, or none while a UTF-8 sequence is incomplete.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rill::bench::serve {

struct RequestRecord {
  bool ok = false;
  std::string error;          // why not ok: HTTP status and message, an error frame, a broken stream
  double start_s = 0;         // when it was sent, seconds after the benchmark started
  double ttft_s = 0;          // first frame with output text, after start_s
  double latency_s = 0;       // end of the stream (E2EL), after start_s
  std::vector<double> itl_s;  // gaps between successive frames with output text (vLLM's ITL)
  int64_t prompt_tokens = -1, completion_tokens = -1;  // the server's usage; -1 until it arrives
  std::string text;  // the generated text (completions: text; chat: content, reasoning, tool args)
};

// Feeds the bytes of an SSE body (chunk boundaries anywhere) into a record; times are seconds since the
// request was sent.
class SseRecorder {
 public:
  explicit SseRecorder(RequestRecord& r) : r_(r) {}
  void feed(std::string_view bytes, double t);
  // The body ended at `t`: the record is ok when no error came, [DONE] did and the usage chunk did.
  void finish(double t);

 private:
  void line(std::string_view line, double t);
  void frame(std::string_view data, double t);

  RequestRecord& r_;
  std::string pending_;  // an incomplete line
  bool seen_output_ = false, done_ = false;
  double last_output_ = 0;
};

}  // namespace rill::bench::serve
