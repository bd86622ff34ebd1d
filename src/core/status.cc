#include "core/status.h"

namespace rill {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::Ok: return "ok";
    case StatusCode::InvalidArgument: return "invalid argument";
    case StatusCode::NotFound: return "not found";
    case StatusCode::OutOfRange: return "out of range";
    case StatusCode::Unimplemented: return "unimplemented";
    case StatusCode::ResourceExhausted: return "resource exhausted";
    case StatusCode::Unavailable: return "unavailable";
    case StatusCode::Cancelled: return "cancelled";
    case StatusCode::Internal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", status_code_name(code_), message_);
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace rill
