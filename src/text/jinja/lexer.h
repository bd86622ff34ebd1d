// Lexer: template source -> tokens, with jinja2's whitespace rules for the environment HF chat templates
// are written for (trim_blocks and lstrip_blocks on, `-`/`+` modifiers, keep_trailing_newline off).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text::jinja {

enum class TokenType {
  Data,           // literal template text, already whitespace-controlled
  VariableBegin,  // {{
  VariableEnd,    // }}
  BlockBegin,     // {%
  BlockEnd,       // %}
  Name,
  String,  // text holds the unescaped value
  Integer,
  Float,
  Operator,  // text holds the operator: "+", "//", "==", "(", ...
  Eof,
};

struct Token {
  TokenType type = TokenType::Eof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Fails (Error with the line) on an unterminated tag, comment or string, an unknown character or
// unbalanced brackets, as jinja2's lexer does.
std::vector<Token> tokenize(std::string_view source);

}  // namespace rill::text::jinja
