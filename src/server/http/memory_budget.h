// The bytes every connection together may hold for request bodies being read and parsed (issue #32 N2: 24
// concurrent 16 MB JSON bodies, each ~24x larger once parsed, ended the process with std::bad_alloc). A
// connection charges its body as it is read (a Content-Length in full, from the head) and, once the body is
// complete, kParseExpansion times it for the route's parse; the charge is returned when the route returns.
// A request that does not fit is answered 503 and its connection closed: the server refuses work rather than
// running out of memory.
#pragma once

#include <atomic>
#include <cstddef>

namespace rill::server {

// What a parsed JSON body may cost per byte of text: bounded_json's worst case (`[{},{},...]`: a 16-byte
// value and a heap object per 3 bytes) is ~21x; the rest is the route's own copies.
inline constexpr size_t kParseExpansion = 32;

class MemoryBudget {
 public:
  explicit MemoryBudget(size_t capacity) : capacity_(capacity) {}
  // Charges `bytes` when they fit (true); else charges nothing (false).
  bool try_charge(size_t bytes);
  void release(size_t bytes) { in_use_.fetch_sub(bytes); }
  size_t capacity() const { return capacity_; }
  size_t in_use() const { return in_use_.load(); }

 private:
  const size_t capacity_;
  std::atomic<size_t> in_use_{0};
};

// A default capacity from what this process can still allocate: a quarter of the smaller of MemAvailable and
// the room left under RLIMIT_AS, between 256 MiB and 8 GiB.
size_t default_request_memory_bytes();

}  // namespace rill::server
