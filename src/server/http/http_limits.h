// What one connection may cost the server: sizes the request reader enforces and the deadlines and caps the
// listener enforces (each a `rill serve` flag; README.md lists them).
#pragma once

#include <chrono>
#include <cstddef>

namespace rill::server {

struct HttpLimits {
  size_t max_header_bytes = 16u << 10;  // request line + headers (431 above)
  size_t max_body_bytes = 16u << 20;    // the decoded body, whatever the transfer coding (413 above)
  // The whole head must arrive within this of its first byte (or of the accept); the whole body within
  // body_timeout of the head's end. Past either the connection is closed (408 is not worth a write).
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds keep_alive_timeout{30'000};  // idle between requests
  std::chrono::milliseconds write_timeout{60'000};       // one write (a response, or one stream chunk)
  int max_connections = 1024;  // open at once; beyond it a connection gets 503 and is closed
  int io_threads = 2;          // run the sockets (no route code runs there)
  int handler_threads = 256;   // requests handled at once (a stream holds its thread while it runs)
};

}  // namespace rill::server
