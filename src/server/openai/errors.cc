#include "server/openai/errors.h"

#include <cctype>

namespace rill::server {

const char* error_type_for(int http_status) {
  switch (http_status) {
    case 401:
      return "authentication_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "unavailable_error";
    default:
      return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

Json error_body(const ApiError& error) {
  Json inner = Json::object();
  inner["message"] = error.message;
  inner["type"] = error.type.empty() ? error_type_for(error.http_status) : error.type;
  inner["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  inner["code"] = error.http_status;
  return Json{{"error", std::move(inner)}};
}

namespace {

// Validation messages start with the parameter they are about ("temperature: must be in [0, 100]",
// "tokens[3]: ..."): that prefix, or "" when the message does not start with one.
std::string param_of_message(std::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0 || colon > 128) return "";
  for (char c : message.substr(0, colon))
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']'))
      return "";
  return std::string(message.substr(0, colon));
}

}  // namespace

ApiError error_from_status(const Status& status, std::string param) {
  int http = 500;
  switch (status.code()) {
    case StatusCode::Ok:  // a caller bug: an error was expected
    case StatusCode::Internal:
      http = 500;
      break;
    case StatusCode::InvalidArgument:
    case StatusCode::OutOfRange:
    case StatusCode::Unimplemented:
      http = 400;
      break;
    case StatusCode::NotFound:
      http = 404;
      break;
    case StatusCode::ResourceExhausted:
      http = 429;
      break;
    case StatusCode::Unavailable:
    case StatusCode::Cancelled:
      http = 503;
      break;
  }
  // Every 400 names its parameter (issue #32: the engine's range errors answered `param: null`).
  if (http == 400 && param.empty()) param = param_of_message(status.message());
  return ApiError{http, status.message(), std::move(param), ""};
}

ApiError model_not_found(std::string_view model) {
  return ApiError{404, fmt::format("The model `{}` does not exist.", model), "model", ""};
}

}  // namespace rill::server
