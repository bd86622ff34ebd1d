// The event-driven HTTP/1.1 server (Boost.Beast over Asio; nothing else in rill includes either): a few I/O
// threads run every socket asynchronously, so a connection holds no thread while its request arrives or
// while it idles in keep-alive; each complete request that passed the RequestReader's limits runs on the
// HandlerPool, and its response (whole, or streamed from the handler thread) is written back through the
// connection's strand under a write deadline. Keep-alive, pipelining (answered in order), HTTP/1.0 (no
// chunking), `Expect: 100-continue`; a connection cap (over it: 503 and close).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http/http_limits.h"
#include "server/http/http_types.h"

namespace rill::server {

struct HttpHandlers {
  // Runs a request on a handler thread; fills `res` (or sets res.stream).
  std::function<void(HttpRequest& req, HttpResponse& res)> handle;
  // The response for an error the HTTP layer answers itself (framing, limits, the connection cap).
  std::function<HttpResponse(int status, const std::string& message)> error;
  // Called once per response sent (its status), whoever wrote it.
  std::function<void(int status)> responded;
  // Requests for which this is true (quick, never-blocking routes: /health, /metrics) run on reserved
  // threads instead of the --http-threads queue, and are the only ones served on a connection accepted into
  // the reserved band past --max-connections. Empty: none.
  std::function<bool(const HttpRequest& req)> reserved;
};

class HttpListener {
 public:
  HttpListener(HttpLimits limits, HttpHandlers handlers);
  ~HttpListener();

  // Binds and listens now (SO_REUSEADDR, not SO_REUSEPORT; a SOMAXCONN backlog). Port 0 picks a free one.
  Status bind(const std::string& host, int port);
  int port() const;
  // Serves on the calling thread (+ the other I/O threads) until stop(); returns at once after a stop().
  void run();
  // Stops accepting and closes every connection that is not being answered (idle, or a request still
  // arriving); the ones being answered close after their response. Serving goes on for those.
  void begin_drain();
  // begin_drain(), then waits for the handlers to finish and their responses to be written (each write is
  // bounded by the write deadline) and makes run() return. Safe from any thread, before run() too.
  void stop();
  int open_connections() const;

  struct Impl;  // http_listener.cc (public only so its connections can name it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rill::server
