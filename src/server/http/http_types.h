// The HTTP request and response the routes see, independent of the HTTP library (http_listener.cc is the
// only place that knows Boost.Beast): a request that was read whole and passed every framing and size
// limit, and a response that is either a whole body or a body the route streams chunk by chunk.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rill::server {

struct HttpRequest {
  std::string method;      // GET, POST, ...
  std::string target;      // as sent: path + query
  std::string path;        // percent-decoded, without the query
  std::string query;       // after '?', as sent
  int version = 11;        // 10 | 11
  bool keep_alive = true;  // the client did not ask to close (HTTP/1.1's default, 1.0's keep-alive)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string client;      // the peer as "address:port" ("[v6]:port"; "" when the socket could not say)
  std::string body;                  // the decoded body (the limits apply to it)
  std::vector<std::string> matches;  // the route pattern's capture groups (filled by the router)

  // The value of the first header named `name` (case-insensitive), or "".
  std::string_view header(std::string_view name) const;
  // True once the peer closed or reset its side of the connection while the request was handled: a
  // whole response it can no longer read (or a half-closed client, see README.md) need not be computed.
  bool client_gone() const { return gone_ && gone_->load(std::memory_order_relaxed); }

  std::shared_ptr<const std::atomic<bool>> gone_;  // set by the connection
};

// A streamed body's sink: writes one chunk (flushed at once); false when the client is gone (or the write
// deadline passed), after which nothing more can be written.
using ChunkWriter = std::function<bool(std::string_view chunk)>;

// What one call of a stepped stream (HttpResponse::stream_step) reports.
enum class StreamStep {
  More,  // call again (soon: the stream yields its thread between steps)
  Wait,  // nothing to send now: call again after `wake()` (or a short timer, whichever comes first)
  Done,  // the body is complete
};

// Makes a waiting stepped stream run its next step; callable from any thread, any number of times, also after
// the connection is gone.
using StreamWake = std::function<void()>;

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string content_type;
  // Set: the body is streamed (chunked on HTTP/1.1, close-delimited on HTTP/1.0): the connection sends the
  // head, then calls this on the handler thread with the writer; the body ends when it returns.
  std::function<void(const ChunkWriter& write)> stream;
  // Set instead of `stream`: the body is produced in steps, each a short call on a handler thread that
  // writes what is ready and returns. Between steps the stream holds no thread: a client that does not
  // read parks it until its buffered output drains (the write deadline ends it), and a Wait parks it until
  // `wake` runs (issue #32 N4: such streams held every --http-threads thread). Writes never block here.
  std::function<StreamStep(const ChunkWriter& write, const StreamWake& wake)> stream_step;

  void set_header(std::string name, std::string value);
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

}  // namespace rill::server
