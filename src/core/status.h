// Status and Result<T>: how every function that can fail on user input reports it (design.md §8).
// Exceptions never cross module boundaries; a Status carries a message that names the file, tensor,
// field or request parameter at fault.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace rill {

enum class StatusCode {
  Ok,
  InvalidArgument,    // bad user input: request, config, checkpoint, CLI flag
  NotFound,           // a file, tensor or model that does not exist
  OutOfRange,         // a value outside what the model or the engine supports
  Unimplemented,      // recognised but not supported yet
  ResourceExhausted,  // memory, cache blocks, queue capacity
  Unavailable,        // loading, draining, shutting down
  Cancelled,
  Internal,           // a bug in rill or a failed CUDA call
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == StatusCode::Ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Prefixes the message with where it happened ("loading layer 3: ...").
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::InvalidArgument, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::NotFound, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status out_of_range(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::OutOfRange, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::Unimplemented, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::ResourceExhausted, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::Unavailable, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::Internal, fmt::format(f, std::forward<Args>(args)...)};
}

// Result<T>: a value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rill

#define RILL_CONCAT_INNER(a, b) a##b
#define RILL_CONCAT(a, b) RILL_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define RILL_TRY(expr)                                 \
  do {                                                 \
    ::rill::Status rill_status_ = (expr);              \
    if (!rill_status_.ok()) return rill_status_;       \
  } while (0)

// `RILL_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define RILL_ASSIGN_OR_RETURN(lhs, expr) RILL_ASSIGN_OR_RETURN_IMPL(RILL_CONCAT(rill_result_, __LINE__), lhs, expr)
#define RILL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
