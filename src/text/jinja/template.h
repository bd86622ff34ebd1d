// rill's Jinja engine: renders Hugging Face chat templates byte for byte as Python's jinja2 does in the
// environment transformers' apply_chat_template uses (immutable sandbox, trim_blocks, lstrip_blocks,
// loop controls, json.dumps-based tojson, raise_exception, strftime_now). README.md lists what is covered.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/jinja/render_limits.h"

namespace rill::text::jinja {

namespace ast {
struct TemplateNode;
}

class Template {
 public:
  // Fails with "NAME:LINE: message" on a syntax error or a construct rill does not support.
  static Result<Template> parse(std::string_view source, std::string name = "template");

  // variables: a JSON object whose keys become template variables (messages, tools, ...), with the
  // types Python's json.load would give them. Fails with "NAME:LINE: message" where jinja2 would raise;
  // for raise_exception() the message is the template's own text.
  Result<std::string> render(const nlohmann::ordered_json& variables, const RenderLimits& limits = {}) const;

  const std::string& name() const { return name_; }
  // See analysis.h: does some for-loop iterate over a value read as `key` (e.g. message content parts)?
  bool loops_over(std::string_view key) const;

 private:
  Template(std::shared_ptr<const ast::TemplateNode> root, std::string name)
      : root_(std::move(root)), name_(std::move(name)) {}
  std::shared_ptr<const ast::TemplateNode> root_;  // immutable: one Template renders on many threads
  std::string name_;
};

}  // namespace rill::text::jinja
