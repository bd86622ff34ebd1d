#include "text/k3/turn_grammar.h"

#include <string>
#include <vector>

#include "text/constraint/json_schema.h"
#include "text/constraint/tool_arguments.h"
#include "text/k3/xtml_writer.h"

namespace rill::text::k3 {
namespace {

using constraint::GrammarBuilder;
using constraint::NodeId;

// Request-level tools, then every system message's dynamic tools, in order.
std::vector<const Json*> declared_tools(const Json& request) {
  std::vector<const Json*> out;
  auto take = [&](const Json& tools) {
    if (!tools.is_array()) return;
    for (const Json& t : tools) out.push_back(&t);
  };
  if (request.contains("tools")) take(request.at("tools"));
  if (request.contains("messages") && request.at("messages").is_array())
    for (const Json& m : request.at("messages"))
      if (m.is_object() && m.value("role", Json()) == "system" && m.contains("tools")) take(m.at("tools"));
  return out;
}

class Builder {
 public:
  Builder(const Tokenizer& tok) : tok_(tok) {}

  Status control_ids() {
    for (auto [name, id] : {std::pair{kOpen, &open_}, {kClose, &close_}, {kSep, &sep_}, {kEndOfMsg, &end_}}) {
      const auto t = tok_.token_id(name);
      if (!t) return invalid_argument("the vocabulary has no {} token (not a Kimi K3 tokenizer)", name);
      *id = *t;
    }
    return {};
  }

  // <|open|> text <|sep|> and <|close|> tag <|sep|>, the text as bytes (any tokenization of it).
  NodeId open(std::string_view text) { return b.seq({b.special(open_), b.bytes(text), b.special(sep_)}); }
  NodeId close(std::string_view tag) { return b.seq({b.special(close_), b.bytes(tag), b.special(sep_)}); }

  // <|open|>call tool="NAME" index="i"<|sep|> json block <|close|>call<|sep|>, for any of `tools`.
  NodeId call(const std::vector<constraint::ToolArguments>& tools, int index) {
    std::vector<NodeId> alts;
    for (const auto& [name, args] : tools) {
      const std::string attrs =
          "call tool=\"" + escape_attr_value(name) + "\" index=\"" + std::to_string(index) + "\"";
      alts.push_back(b.seq({open(attrs), open("json type=\"object\""), args, close("json"), close("call")}));
    }
    return b.alt(std::move(alts));
  }

  GrammarBuilder b;
  const Tokenizer& tok_;
  int32_t open_ = -1, close_ = -1, sep_ = -1, end_ = -1;
};

}  // namespace

Result<std::shared_ptr<const constraint::Grammar>> required_tool_call_grammar(
    const Json& request, const Tokenizer& tokenizer, const ToolGrammarOptions& options) {
  Builder g(tokenizer);
  RILL_TRY(g.control_ids());
  GrammarBuilder& b = g.b;
  RILL_ASSIGN_OR_RETURN(const std::vector<constraint::ToolArguments> tools,
                        constraint::tool_arguments(b, declared_tools(request), options.named_tool));
  // Named: exactly one call of that tool (vLLM's named tool_choice).
  const bool one = !options.parallel_tool_calls || !options.named_tool.empty();
  const NodeId calls = constraint::numbered_calls(b, 1, one ? 1 : std::max(1, options.max_calls),
                                                  [&](int i) { return g.call(tools, i); });

  std::vector<NodeId> turn;
  if (options.thinking) turn = {b.any_bytes(), g.close("think"), g.open("response")};
  for (NodeId n :
       {g.close("response"), g.open("tools"), calls, g.close("tools"), g.close("message"), b.special(g.end_)})
    turn.push_back(n);
  return b.build(b.seq(std::move(turn)));
}

Result<std::shared_ptr<const constraint::Grammar>> response_format_grammar(const Json* schema,
                                                                           const Tokenizer& tokenizer,
                                                                           bool thinking) {
  Builder g(tokenizer);
  RILL_TRY(g.control_ids());
  GrammarBuilder& b = g.b;
  NodeId value = -1;
  if (schema) {
    auto node = constraint::json_schema_node(b, *schema);
    if (!node.ok()) return invalid_argument("response_format.json_schema.{}", node.status().message());
    value = *node;
  } else {
    value = constraint::json_object_node(b);
  }
  std::vector<NodeId> turn;
  if (thinking) turn = {b.any_bytes(), g.close("think"), g.open("response")};
  for (NodeId n : {value, g.close("response"), g.close("message"), b.special(g.end_)}) turn.push_back(n);
  return b.build(b.seq(std::move(turn)));
}

}  // namespace rill::text::k3
