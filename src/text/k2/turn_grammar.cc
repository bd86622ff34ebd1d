#include "text/k2/turn_grammar.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "text/constraint/tool_arguments.h"

namespace rill::text::k2 {
namespace {

using constraint::GrammarBuilder;
using constraint::NodeId;

// The control tokens of the turn, as whole symbols.
struct Markers {
  int32_t section_begin, section_end, call_begin, argument_begin, call_end, im_end, think_end;
};

Result<Markers> markers(const Tokenizer& tokenizer, bool reasoning) {
  Markers m{};
  const std::pair<std::string_view, int32_t*> names[] = {{"<|tool_calls_section_begin|>", &m.section_begin},
                                                         {"<|tool_calls_section_end|>", &m.section_end},
                                                         {"<|tool_call_begin|>", &m.call_begin},
                                                         {"<|tool_call_argument_begin|>", &m.argument_begin},
                                                         {"<|tool_call_end|>", &m.call_end},
                                                         {"<|im_end|>", &m.im_end},
                                                         {"</think>", &m.think_end}};
  for (const auto& [name, id] : names) {
    if (name == "</think>" && !reasoning) continue;
    const auto t = tokenizer.token_id(name);
    if (!t) return invalid_argument("the vocabulary has no {} token (not a Kimi K2-family tokenizer)", name);
    *id = *t;
  }
  return m;
}

}  // namespace

Result<std::shared_ptr<const constraint::Grammar>> required_tool_call_grammar(
    const nlohmann::ordered_json& request, const Tokenizer& tokenizer, const ToolGrammarOptions& options) {
  RILL_ASSIGN_OR_RETURN(const Markers m, markers(tokenizer, options.reasoning));
  GrammarBuilder b;
  std::vector<const nlohmann::ordered_json*> declared;
  if (request.contains("tools") && request.at("tools").is_array())
    for (const auto& t : request.at("tools")) declared.push_back(&t);
  RILL_ASSIGN_OR_RETURN(const std::vector<constraint::ToolArguments> tools,
                        constraint::tool_arguments(b, declared, options.named_tool));

  // <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>, any tool.
  auto call = [&](int index) {
    std::vector<NodeId> alts;
    for (const auto& [name, args] : tools) {
      const NodeId id = b.bytes("functions." + name + ":" + std::to_string(index));
      alts.push_back(
          b.seq({b.special(m.call_begin), id, b.special(m.argument_begin), args, b.special(m.call_end)}));
    }
    return b.alt(std::move(alts));
  };
  const bool one = !options.parallel_tool_calls || !options.named_tool.empty();
  const NodeId calls =
      constraint::numbered_calls(b, options.first_call_index, one ? 1 : std::max(1, options.max_calls), call);

  std::vector<NodeId> turn;
  if (options.reasoning) turn = {b.any_bytes(), b.special(m.think_end)};
  for (NodeId n : {b.special(m.section_begin), calls, b.special(m.section_end), b.special(m.im_end)})
    turn.push_back(n);
  return b.build(b.seq(std::move(turn)));
}

}  // namespace rill::text::k2
