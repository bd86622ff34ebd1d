// The client side of `rill bench serve`: a small HTTP/1.1 client on Boost.Beast that sends streamed requests
// at given arrival times, at most `max_concurrency` at once, on one I/O thread (so no request waits for a
// thread), and times the server-sent events of each. Boost stays inside load_generator.cc.
#pragma once

#include <string>
#include <vector>

#include "bench/serve/request_record.h"
#include "core/status.h"

namespace rill::bench::serve {

struct ServerUrl {
  std::string host, port;
  std::string base_path;  // prefix before /v1/... ("" or "/something", no trailing slash)
  std::string str() const { return "http://" + host + ":" + port + base_path; }
};
// "http://HOST[:PORT][/PREFIX]"; errors name --url.
Result<ServerUrl> parse_server_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};
// GET base_path + path (for /v1/models); an unreachable server is an Unavailable error naming the URL.
Result<HttpReply> http_get(const ServerUrl& url, const std::string& path, const std::string& api_key,
                           double timeout_s);

struct LoadPlan {
  ServerUrl url;
  std::string endpoint;             // /v1/completions or /v1/chat/completions
  std::string api_key;              // sent as a bearer token when not empty
  std::vector<std::string> bodies;  // one JSON request body per request (stream: true)
  std::vector<double> arrivals;     // seconds after the start, nondecreasing, one per body
  int max_concurrency = 0;          // 0: no limit
};

struct LoadResult {
  std::vector<RequestRecord> records;  // one per body, in plan order
  double duration_s = 0;               // from the start until the last request ended
  int max_in_flight = 0;               // the most requests open at once (<= max_concurrency)
};

// Runs the plan to the end; failures of single requests are in their records.
Result<LoadResult> run_load(const LoadPlan& plan);

}  // namespace rill::bench::serve
