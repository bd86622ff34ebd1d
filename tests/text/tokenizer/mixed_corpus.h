// A deterministic multilingual corpus (~1 MB) shared by the tiktoken reference test and tokenizer_bench:
// English, Chinese, Japanese, Korean, Arabic, Russian, Hindi, code, emoji, CamelCase, contractions, digits,
// whitespace and newline runs, combining marks, mixed-script words and a few special-token names.
#pragma once

#include <cstddef>
#include <string>

namespace rill::text::testing {

std::string make_mixed_corpus(size_t min_bytes = size_t{1} << 20);

}  // namespace rill::text::testing
