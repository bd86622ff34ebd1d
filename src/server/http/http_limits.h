// What one connection may cost the server: sizes the request reader enforces and the deadlines and caps the
// listener enforces (each a `rill serve` flag; README.md lists them).
#pragma once

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

}  // namespace rill::server
