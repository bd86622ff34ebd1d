// The request log of `rill serve` (off with --disable-log-requests): one info line per finished engine
// request and one per refused HTTP request, as `key=value` fields so a person can read them and a script
// (tests/e2e/vllm_cli_test.mjs) can parse them.
#pragma once

#include <cstdint>
#include <string>

namespace rill::server {

struct FinishedRequest {
  std::string id;  // the response id (chatcmpl-..., cmpl-...)
  int choice = 0;
  int http_status = 200;
  std::string finish_reason;  // stop | length | tool_calls | abort | error | server_interrupted
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double ttft_s = -1;  // seconds from arrival to the first token; < 0: none came
  double e2e_s = 0;    // seconds from arrival to the finish
  std::string method, path;  // the HTTP request's ("" when not known)
  std::string client;        // the peer, "address:port" ("" when not known)
};

// "request chatcmpl-1 finished: choice=0 status=200 finish=stop prompt_tokens=12 cached_tokens=0
// completion_tokens=16 ttft=0.012s tpot=0.0040s e2e=0.072s method=POST path=/v1/chat/completions
// client=127.0.0.1:51234" (tpot: decode time per token after the first; cached_tokens=- when unknown, as for a
// request aborted before it finished).
std::string format_finished_request(const FinishedRequest& r);
void log_finished_request(const FinishedRequest& r);

// "request rejected: POST /v1/chat/completions status=400 client=127.0.0.1:51234 reason=..."
void log_rejected_request(const std::string& method, const std::string& path, const std::string& client,
                          int status, const std::string& reason);

}  // namespace rill::server
