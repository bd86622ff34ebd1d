// JSON in and out of the engine: request JSON -> Values (as Python's json.load builds them), and Values ->
// text exactly as Python's json.dumps writes it (the reference `tojson` filter is json.dumps).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja/value.h"

namespace rill::text::jinja {

// Objects keep their key order (Python dicts do). Fails for integers beyond int64.
Value from_json(const nlohmann::ordered_json& j);

struct DumpOptions {
  bool ensure_ascii = true;
  std::optional<std::string> indent;  // json.dumps indent: an int becomes that many spaces
  std::string item_separator = ", ";  // json.dumps defaults; "," when indent is set
  std::string key_separator = ": ";
  bool sort_keys = false;
};

std::string dumps(const Value& v, const DumpOptions& options);

}  // namespace rill::text::jinja
