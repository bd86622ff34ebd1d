// OpenAI error envelopes: every failure the server reports is {"error": {"message", "type", "param", "code"}}
// with the HTTP status that goes with it (serving.md §1.5). ApiResult<T> carries a value or such an error
// out of request parsing, the way Result<T> carries a Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::server {

using Json = nlohmann::ordered_json;

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string param;  // the request field at fault; "" is sent as null
  std::string type;   // "" -> the type that goes with http_status (error_type_for)
};

// "invalid_request_error" (400, 404, 405, 413), "authentication_error" (401), "rate_limit_error" (429),
// "server_error" (500), "unavailable_error" (503).
const char* error_type_for(int http_status);

// {"error": {"message", "type", "param", "code"}}; code is the HTTP status, as vLLM and llama-server send it.
Json error_body(const ApiError& error);

// A Status from the engine or the text layer: InvalidArgument / OutOfRange / Unimplemented -> 400,
// NotFound -> 404, ResourceExhausted -> 429, Unavailable / Cancelled -> 503, Internal -> 500.
ApiError error_from_status(const Status& status, std::string param = "");

template <typename... Args>
ApiError bad_request(std::string param, fmt::format_string<Args...> f, Args&&... args) {
  return ApiError{400, fmt::format(f, std::forward<Args>(args)...), std::move(param), ""};
}

// 404 ``The model `X` does not exist.`` (vLLM's text).
ApiError model_not_found(std::string_view model);

// A value or the ApiError saying why there is none.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT: implicit, like Result<T>
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const ApiError& error() const { return std::get<ApiError>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace rill::server

// Returns the ApiError of an ApiResult (or an engaged std::optional<ApiError>) from the enclosing function.
#define RILL_API_TRY(expr)                                      \
  do {                                                          \
    if (auto rill_api_error_ = (expr)) return *rill_api_error_; \
  } while (0)

#define RILL_API_ASSIGN_OR_RETURN(lhs, expr) \
  RILL_API_ASSIGN_OR_RETURN_IMPL(RILL_CONCAT(rill_api_result_, __LINE__), lhs, expr)
#define RILL_API_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.error();                   \
  lhs = std::move(tmp).value()
