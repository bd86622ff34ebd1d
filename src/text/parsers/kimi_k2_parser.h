// The K2 / Kimi-Linear output format (serving.md §2.2–§2.3):
//   [<think>REASONING</think>] CONTENT [<|tool_calls_section_begin|>
//     (<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>)*
//   <|tool_calls_section_end|>] <|im_end|>
#pragma once

#include <memory>

#include "text/parsers/output_parser.h"

namespace rill::text {

// Precondition: config.validate() is ok and config.family == ModelFamily::KimiK2.
std::unique_ptr<OutputParser> make_kimi_k2_parser(const ParserConfig& config);

}  // namespace rill::text
