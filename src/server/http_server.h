// The HTTP front end (cpp-httplib): a thread per connection from a fixed pool, the route table of
// routes.cc behind one wrapper that turns an ApiError or a stray exception into the OpenAI envelope
// (llama.cpp's ex_wrapper), API-key checks on /v1, 503 while not ready, envelopes for httplib's own
// 404 / 405 / 413 / 400.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/openai/errors.h"
#include "server/serving_context.h"

namespace rill::server {

// A route writes its response into `res`, or returns the error to send instead.
using RouteHandler =
    std::function<std::optional<ApiError>(ServingContext&, const httplib::Request&, httplib::Response&)>;

struct Route {
  const char* method;  // GET | POST
  const char* path;    // httplib pattern (a regex)
  RouteHandler handler;
  bool needs_model;  // 503 unless the model is loaded and the server is not draining
};

// The route table (routes.cc).
const std::vector<Route>& route_table();

void write_json(httplib::Response& res, const Json& body, int status = 200);
void write_error(httplib::Response& res, const ApiError& error);

class HttpServer {
 public:
  HttpServer(ServingContext& ctx, int n_threads);
  // Binds now (before the model loads), so /health answers during loading. Port 0 picks a free port.
  Status bind(const std::string& host, int port);
  int port() const { return port_; }
  void listen();  // serves until stop()
  // Stops accepting; requests being written finish first (httplib joins its workers).
  void stop() { server_.stop(); }

 private:
  void install_routes();

  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the library): a burst of
  // clients would wait for SYN retransmits. This exposes the socket so bind() can raise it.
  struct Listener : httplib::Server {
    int socket() const { return int(svr_sock_); }
  };

  ServingContext& ctx_;
  Listener server_;
  int port_ = 0;
};

}  // namespace rill::server
