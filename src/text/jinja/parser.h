// Parser: tokens -> ast::TemplateNode, following jinja2's grammar and operator precedence
// (parser.py): condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filters.
#pragma once

#include <memory>
#include <string_view>

#include "text/jinja/ast.h"

namespace rill::text::jinja {

// Fails (Error with the line) on a syntax error, an unknown filter or test outside a conditional (where
// jinja2 fails at compile time too), and on tags rill does not support (include, extends, import, block,
// call, ...) so that nothing is silently rendered differently.
std::unique_ptr<ast::TemplateNode> parse_template(std::string_view source);

}  // namespace rill::text::jinja
