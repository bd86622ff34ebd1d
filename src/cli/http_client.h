// A small blocking HTTP/1.1 client for `rill chat --url`: one request per connection (Connection: close),
// the response body handed over as it arrives (a text/event-stream reply is printed while it streams), and
// a stop flag polled every 100 ms so Ctrl-C can end a reply (the connection is closed; the server then
// cancels the generation). Boost.Beast, as the server's http/ uses.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "core/status.h"

namespace rill::cli {

struct HttpUrl {
  std::string host, port, base_path;  // "http://h:8000/x" -> "h", "8000", "/x"
};
// Only http:// (the default port is 80); errors name --url.
Result<HttpUrl> parse_http_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;      // the whole body, unless an on_body callback took it
  bool stopped = false;  // `stop` ended it early
};

// `on_body` (optional) gets each piece of the body as it arrives (and the body is not kept).
Result<HttpReply> http_request(const HttpUrl& url, const std::string& method, const std::string& path,
                               const std::string& body, const std::string& api_key,
                               const std::function<void(std::string_view)>& on_body = {},
                               const std::atomic<bool>* stop = nullptr);

}  // namespace rill::cli
