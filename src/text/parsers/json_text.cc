#include "text/parsers/json_text.h"

#include "text/json/bounded_json.h"

namespace rill::text {

std::optional<nlohmann::ordered_json> parse_json(std::string_view text) {
  auto value = parse_bounded_json(text);
  if (!value.ok()) return std::nullopt;
  return std::move(value).value();
}

std::string dump_compact(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

const char* json_type_name(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::object:
      return "object";
    case nlohmann::ordered_json::value_t::array:
      return "array";
    case nlohmann::ordered_json::value_t::string:
      return "string";
    case nlohmann::ordered_json::value_t::boolean:
      return "boolean";
    case nlohmann::ordered_json::value_t::null:
      return "null";
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
    case nlohmann::ordered_json::value_t::number_float:
      return "number";
    case nlohmann::ordered_json::value_t::binary:
    case nlohmann::ordered_json::value_t::discarded:
      return "invalid";
  }
  return "invalid";
}

}  // namespace rill::text
