// The K3 XTML output format (kimi-architecture.md §6.4, serving.md §2.5):
//   [REASONING<|close|>think<|sep|>] <|open|>response<|sep|>CONTENT<|close|>response<|sep|>
//   [<|open|>tools<|sep|> (<|open|>call tool="NAME" index="N"<|sep|> ARGS <|close|>call<|sep|>)*
//    <|close|>tools<|sep|>] <|close|>message<|sep|><|end_of_msg|>
// ARGS: (<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>)* or one
// <|open|>json type="object"<|sep|>{...}<|close|>json<|sep|> block.
#pragma once

#include <memory>

#include "text/parsers/output_parser.h"

namespace rill::text {

// Precondition: config.validate() is ok and config.family == ModelFamily::KimiK3.
std::unique_ptr<OutputParser> make_kimi_k3_parser(const ParserConfig& config);

}  // namespace rill::text
