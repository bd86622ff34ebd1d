// Typed reads of an OpenAI request object. Absent and null both mean "not given" (the SDKs send null for
// unset fields); unknown fields are ignored (vLLM); a known field of the wrong type or outside its range
// records a 400 naming the field. The first error wins: read everything, then check error() once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai/errors.h"

namespace rill::server {

// A closed or half-open interval for number fields; `lo_open` makes the lower bound exclusive.
struct Range {
  double lo = -1e300, hi = 1e300;
  bool lo_open = false;
};

class FieldReader {
 public:
  // `path` prefixes field names in messages ("messages[2]." -> "messages[2].role").
  explicit FieldReader(const Json& object, std::string path = "") : object_(object), path_(std::move(path)) {}

  std::optional<double> number(std::string_view key, Range range = {});
  // Integral JSON numbers (16 and 16.0), within [lo, hi].
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi);
  std::optional<bool> boolean(std::string_view key);
  std::optional<std::string> string(std::string_view key);
  // Present and of that JSON type, else nullptr (a wrong type records an error).
  const Json* object(std::string_view key);
  const Json* array(std::string_view key);
  // Present and not null, any type.
  const Json* any(std::string_view key) const;

  std::string name(std::string_view key) const { return path_ + std::string(key); }
  void fail(ApiError error);
  template <typename... Args>
  void fail(std::string_view key, fmt::format_string<Args...> f, Args&&... args) {
    fail(ApiError{400, fmt::format("{}: {}", name(key), fmt::format(f, std::forward<Args>(args)...)),
                  name(key), ""});
  }

  const std::optional<ApiError>& error() const { return error_; }
  bool ok() const { return !error_; }

 private:
  const Json& object_;
  std::string path_;
  std::optional<ApiError> error_;
};

// "a string", "an integer", ... for messages about a value's JSON type.
const char* json_type_phrase(const Json& value);

// The length of `value` as compact JSON text: how request_limits.h measures schemas.
size_t json_text_bytes(const Json& value);

}  // namespace rill::server
