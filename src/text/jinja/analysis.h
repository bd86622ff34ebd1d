// Static questions about a parsed template that callers ask before rendering (no evaluation happens).
#pragma once

#include <functional>
#include <string_view>

#include "text/jinja/ast.h"

namespace rill::text::jinja {

// Calls fn on every expression under `body`; `soft` marks those inside an if/elif test or body or a
// conditional expression, where jinja2 defers the unknown-filter check to run time.
using ExprVisitor = std::function<void(const ast::Expr&, bool soft)>;
void visit_expressions(const ast::Body& body, bool soft, const ExprVisitor& fn);

// Fails (Error with the line) for an unknown filter or test outside a conditional, as jinja2's compiler does.
void check_filters_and_tests(const ast::Body& body);

// Whether some for-loop iterates over a value read as `key`: x[key], x.key, x.get(key), a variable set from
// one of those, or a variable or macro parameter named `key`. Chat code asks it for "content", to tell
// templates that walk OpenAI content-part lists from those that treat content as a string (vLLM's
// "openai" / "string" content formats).
bool loops_over(const ast::TemplateNode& root, std::string_view key);

}  // namespace rill::text::jinja
