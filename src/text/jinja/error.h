// How the engine reports a failure internally. The tree walker throws `Error` from wherever Python's jinja2
// would raise; the evaluator stamps the line of the innermost statement or expression on the way out, and
// Template::render turns it into a Status. Exceptions never leave the module (style.md §7.5): one internal
// type keeps every node's code about its semantics instead of threading Result through ~100 call sites.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

namespace rill::text::jinja {

struct Error {
  std::string message;
  int line = 0;         // 0 until a node on the way out claims it
  bool raised = false;  // from raise_exception(): message is the template author's text, verbatim
};

[[noreturn]] inline void fail(std::string message) {
  throw Error{std::move(message)};
}

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error{fmt::format(f, std::forward<Args>(args)...)};
}

}  // namespace rill::text::jinja
