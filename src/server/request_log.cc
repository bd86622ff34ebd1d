#include "server/request_log.h"

#include <fmt/format.h>

#include "core/log.h"

namespace rill::server {

std::string format_finished_request(const FinishedRequest& r) {
  const std::string ttft = r.ttft_s < 0 ? "-" : fmt::format("{:.3f}s", r.ttft_s);
  // vLLM's TPOT: the time after the first token over the tokens after it.
  const std::string tpot =
      r.ttft_s < 0 || r.completion_tokens < 2
          ? "-"
          : fmt::format("{:.4f}s", (r.e2e_s - r.ttft_s) / double(r.completion_tokens - 1));
  // An abort comes before the engine reported its cache hit: unknown, not a number.
  const std::string cached = r.cached_tokens < 0 ? "-" : std::to_string(r.cached_tokens);
  std::string line = fmt::format(
      "request {} finished: choice={} status={} finish={} prompt_tokens={} cached_tokens={} "
      "completion_tokens={} ttft={} tpot={} e2e={:.3f}s",
      r.id.empty() ? "-" : r.id, r.choice, r.http_status, r.finish_reason, r.prompt_tokens, cached,
      r.completion_tokens, ttft, tpot, r.e2e_s);
  if (!r.method.empty()) line += fmt::format(" method={} path={}", r.method, r.path);
  if (!r.client.empty()) line += fmt::format(" client={}", r.client);
  return line;
}

void log_finished_request(const FinishedRequest& r) {
  RILL_LOG_INFO("{}", format_finished_request(r));
}

void log_rejected_request(const std::string& method, const std::string& path, const std::string& client,
                          int status, const std::string& reason) {
  RILL_LOG_INFO("request rejected: {} {} status={} client={} reason={}", method, path, status,
                client.empty() ? "-" : client, reason);
}

}  // namespace rill::server
