// HTTP framing fuzz target: bytes -> RequestReader (the parser the connections use, no socket) with small
// limits, fed in pieces whose size the first byte picks (so the head/body boundaries land anywhere).
// Checks what the limits promise: a request taken has a body within max_body_bytes; the unparsed bytes held
// (an incomplete head, chunk line or trailer) stay within max_header_bytes (+ one piece); a failure is one of
// the statuses the reader documents; every call returns (no hang). A violation aborts (a crash for libFuzzer
// / the driver).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/http/request_reader.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "http_framing_fuzz: violated: %s\n", what);
  std::abort();
}

bool documented_status(int s) {
  return s == 400 || s == 413 || s == 415 || s == 417 || s == 431 || s == 501 || s == 505;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rill::server::RequestReader;
  if (size == 0) return 0;
  rill::server::HttpLimits limits;
  limits.max_header_bytes = 512;
  limits.max_body_bytes = 256;
  RequestReader reader(limits);
  const size_t piece = size_t(data[0] % 64) + 1;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  while (!in.empty() && reader.state() != RequestReader::State::Failed) {
    const std::string_view bytes = in.substr(0, piece);
    in.remove_prefix(bytes.size());
    reader.feed(bytes);
    if (reader.wants_continue()) reader.continue_sent();
    while (reader.state() == RequestReader::State::Complete) {
      const rill::server::HttpRequest req = reader.take();
      check(req.body.size() <= limits.max_body_bytes, "body within max_body_bytes");
      check(req.version == 10 || req.version == 11, "version 1.0 or 1.1");
      check(!req.method.empty(), "a method");
    }
    check(reader.buffered() <= limits.max_header_bytes + piece, "unparsed bytes within max_header_bytes");
  }
  reader.finish();
  if (reader.state() == RequestReader::State::Failed) {
    check(documented_status(reader.error_status()), "a documented error status");
    check(!reader.error_message().empty(), "an error message");
  }
  return 0;
}
