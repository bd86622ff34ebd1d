// Jinja filters (`x | name(args)`): jinja2's default set with its Python semantics, plus the `tojson` of
// the reference environment (json.dumps with ensure_ascii=False unless asked, indent, separators,
// sort_keys). A few defaults rill does not implement (urlize, wordwrap, ...) fail when used.
#pragma once

#include <string_view>

#include "text/jinja/value.h"

namespace rill::text::jinja {

bool filter_exists(std::string_view name);
Value apply_filter(Interpreter& in, std::string_view name, const Value& operand, CallArgs& args);

}  // namespace rill::text::jinja
