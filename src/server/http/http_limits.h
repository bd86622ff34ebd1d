// What one connection may cost the server: sizes the request reader enforces and the deadlines and caps the
// listener enforces (each a `rill serve` flag; README.md lists them).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace rill::server {

struct HttpLimits {
  size_t max_header_bytes = 16u << 10;  // request line + headers (431 above)
  // The decoded body, whatever the transfer coding (413 above). 4 MiB: OpenAI clients send KBs, and a
  // million-character prompt still fits; each body may cost kParseExpansion times this once parsed.
  size_t max_body_bytes = 4u << 20;
  // Bodies being read and parsed, all connections together (memory_budget.h); 0: sized at start from the
  // memory available (default_request_memory_bytes()).
  size_t request_memory_bytes = 0;
  // The whole head must arrive within this of its first byte (or of the accept); the whole body within
  // body_timeout of the head's end. Past either the connection is closed (408 is not worth a write).
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds keep_alive_timeout{30'000};  // idle between requests
  std::chrono::milliseconds write_timeout{60'000};       // one write (a response, or one stream chunk)
  int max_connections = 1024;  // open at once; beyond it a connection gets 503 and is closed
  // Past max_connections, this many more are accepted for the reserved routes only (/health, /metrics).
  int reserved_connections = 32;
  // Open at once from one peer address (0: no cap); beyond it 503 and close.
  int max_connections_per_client = 512;
  int io_threads = 2;          // run the sockets (no route code runs there)
  int handler_threads = 256;   // requests handled at once (a stream holds its thread while it runs)
};

// The idle time a response's `Keep-Alive: timeout=N` advertises, in whole seconds: keep_alive_timeout less a
// margin (5 s, or half of a shorter timeout), so a client that honours the header stops reusing a connection
// before the server closes it. Advertising the deadline itself left no margin: a client whose event loop was
// busy (undici, 64 streams under ThreadSanitizer) sent a request on a connection idle for 30 s as the server
// closed it, and the request failed with a connection error.
inline long long advertised_keep_alive_seconds(std::chrono::milliseconds keep_alive_timeout) {
  const std::chrono::milliseconds margin = std::min<std::chrono::milliseconds>(std::chrono::seconds(5),
                                                                               keep_alive_timeout / 2);
  return std::chrono::duration_cast<std::chrono::seconds>(keep_alive_timeout - margin).count();
}

}  // namespace rill::server
