#include "server/openai/fields.h"

#include <cmath>

namespace rill::server {

const char* json_type_phrase(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::binary:
      return "binary data";
    case Json::value_t::discarded:
      return "invalid JSON";
  }
  return "a value";
}

size_t json_text_bytes(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace).size();
}

const Json* FieldReader::any(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::fail(ApiError error) {
  if (!error_) error_ = std::move(error);
}

std::optional<double> FieldReader::number(std::string_view key, Range range) {
  const Json* v = any(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    fail(key, "must be a number, got {}", json_type_phrase(*v));
    return std::nullopt;
  }
  const double x = v->get<double>();
  const bool below = range.lo_open ? !(x > range.lo) : !(x >= range.lo);
  if (below || !(x <= range.hi) || !std::isfinite(x)) {
    fail(key, "must be in {}{}, {}], got {}", range.lo_open ? "(" : "[", range.lo, range.hi, x);
    return std::nullopt;
  }
  return x;
}

std::optional<int64_t> FieldReader::integer(std::string_view key, int64_t lo, int64_t hi) {
  const Json* v = any(key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::floor(v->get<double>()) == v->get<double>() && std::fabs(v->get<double>()) < 9e18) {
    x = int64_t(v->get<double>());
  } else {
    fail(key, "must be an integer, got {}",
         v->is_number() ? fmt::format("{}", v->get<double>()) : json_type_phrase(*v));
    return std::nullopt;
  }
  if (x < lo || x > hi) {
    if (hi == INT64_MAX)
      fail(key, "must be >= {}, got {}", lo, x);
    else
      fail(key, "must be in [{}, {}], got {}", lo, hi, x);
    return std::nullopt;
  }
  return x;
}

std::optional<bool> FieldReader::boolean(std::string_view key) {
  const Json* v = any(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    fail(key, "must be a boolean, got {}", json_type_phrase(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> FieldReader::string(std::string_view key) {
  const Json* v = any(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    fail(key, "must be a string, got {}", json_type_phrase(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

const Json* FieldReader::object(std::string_view key) {
  const Json* v = any(key);
  if (v && !v->is_object()) {
    fail(key, "must be an object, got {}", json_type_phrase(*v));
    return nullptr;
  }
  return v;
}

const Json* FieldReader::array(std::string_view key) {
  const Json* v = any(key);
  if (v && !v->is_array()) {
    fail(key, "must be an array, got {}", json_type_phrase(*v));
    return nullptr;
  }
  return v;
}

}  // namespace rill::server
