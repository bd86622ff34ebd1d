// Native Kimi K3 chat renderer: a port of the checkpoint's encoding_k3.py::build_chat_segments (spec §6.4,
// serving.md §2.4). An OpenAI chat request becomes XTML segments, the prompt text and its token ids,
// encoded segment by segment (BPE never crosses a segment boundary; message text never yields specials).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/k3/chat_options.h"
#include "text/k3/python_json.h"
#include "text/k3/xtml_writer.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text::k3 {

// build_chat_segments(messages, tools, thinking=..., thinking_effort=..., tool_choice=...,
// response_format=...) with the reference's normalisation first: runs of tool results are re-sorted into the
// preceding assistant's tool_calls order by tool_call_id, tool-call argument strings are parsed (an
// unparseable one is kept as a raw `json` block), tools and schemas are key-sorted. Where the reference
// silently drops input (unknown roles, non-object messages) this returns InvalidArgument instead; images are
// Unimplemented.
Result<std::vector<Segment>> build_chat_segments(const Json& messages, const Json& tools,
                                                 const ChatOptions& options);

// Segment-wise ids. A control segment must be one special token of `tokenizer` (K3's `<|open|>` etc.):
// anything else means the tokenizer is not K3's and is an error rather than a silently different prompt.
Result<std::vector<int32_t>> encode_segments(const std::vector<Segment>& segments,
                                             const Tokenizer& tokenizer);

struct RenderedPrompt {
  std::vector<Segment> segments;
  std::string text;  // the concatenated segments (what the Jinja transcription renders)
  std::vector<int32_t> ids;
  // Ids of the generation prompt's final `<|open|>think<|sep|>` / `<|open|>response<|sep|>` (3 with the Kimi
  // vocabulary, 0 without a generation prompt): usage.prompt_tokens excludes them (serving.md §1.4).
  int32_t n_generation_stub = 0;
  ChatOptions options;
};

// The whole path for an OpenAI chat request (messages, tools, tool_choice, response_format, thinking,
// reasoning_effort, chat_template_kwargs, add_generation_prompt), including K3's request checks on
// dynamic tools (serving.md §2.6).
Result<RenderedPrompt> render_chat(const Json& request, const Tokenizer& tokenizer);

}  // namespace rill::text::k3
