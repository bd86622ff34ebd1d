// The HTTP front end: the route table of routes.cc behind one router that checks the API key (every route
// but /health, and /metrics only with --api-key-metrics), answers 404 / 405 (with Allow) itself, and wraps
// each route so an ApiError or a stray exception becomes the OpenAI envelope (llama.cpp's ex_wrapper) and
// model routes answer 503 while not ready. The sockets are http/'s HttpListener.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/http_limits.h"
#include "server/http/http_listener.h"
#include "server/http/http_types.h"
#include "server/openai/errors.h"
#include "server/serving_context.h"

namespace rill::server {

// A route writes its response into `res`, or returns the error to send instead.
using RouteHandler =
    std::function<std::optional<ApiError>(ServingContext&, const HttpRequest&, HttpResponse&)>;

struct Route {
  const char* method;  // GET | POST
  // The whole decoded path, literally; or a prefix ending in "/*", which matches any non-empty rest of the
  // path (slashes included: model names have them), captured as HttpRequest::matches[1]. Never a regex:
  // libstdc++'s std::regex recurses once per character, so a long path overflowed the stack (issue #32 N1).
  const char* path;
  RouteHandler handler;
  bool needs_model;  // 503 unless the model is loaded and the server is not draining
};

// The route table (routes.cc).
const std::vector<Route>& route_table();

// Paths longer than this are refused with 414 before routing (the longest route is 20 bytes; a model name
// in /v1/models/NAME is far shorter).
constexpr size_t kMaxRoutedPathBytes = 2048;

// a == b, in a time that depends on the lengths only (the API key check).
bool equal_in_constant_time(std::string_view given, std::string_view expected);

// Whether `path` matches the route pattern `pattern` (see Route::path); the captures go to `matches`.
bool match_route(std::string_view pattern, const std::string& path, std::vector<std::string>* matches);

void write_json(HttpResponse& res, const Json& body, int status = 200);
void write_error(HttpResponse& res, const ApiError& error);

class HttpServer {
 public:
  HttpServer(ServingContext& ctx, const HttpLimits& limits);
  // Binds now (before the model loads), so /health answers during loading. Port 0 picks a free port.
  Status bind(const std::string& host, int port);
  int port() const { return listener_.port(); }
  void listen() { listener_.run(); }  // serves until stop(); returns at once if stop() came first
  // Stops accepting and closes idle and half-read connections; requests being answered go on.
  void begin_drain() { listener_.begin_drain(); }
  // begin_drain(), then waits for the requests being answered and makes listen() return.
  void stop() { listener_.stop(); }

 private:
  void handle(HttpRequest& req, HttpResponse& res);
  bool authorized(const HttpRequest& req) const;

  ServingContext& ctx_;
  HttpListener listener_;
};

}  // namespace rill::server
