// The Unicode behaviour of Python's str that templates can observe: code-point indexing, case mapping
// (upper/lower/title/capitalize with full mappings and the final-sigma rule), isspace, isprintable (for
// repr) and re's `\w`. Tables are generated from Python by gen_unicode_tables.py.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rill::text::jinja::unicode {

// UTF-8 -> code points. Input is valid UTF-8 (Template::parse and the JSON reader check it).
std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view cps);
void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
size_t count_codepoints(std::string_view utf8);

bool is_space(char32_t cp);      // str.isspace, and re's \s
bool is_printable(char32_t cp);  // str.isprintable
bool is_word(char32_t cp);       // re's \w
bool is_cased(char32_t cp);

std::string to_upper(std::string_view s);                                 // str.upper
std::string to_lower(std::string_view s);                                 // str.lower (final sigma included)
std::string to_title(std::string_view s);                                 // str.title
std::string capitalize(std::string_view s);                               // str.capitalize
std::string swapcase(std::string_view s);                                 // str.swapcase
std::vector<std::string> split_lines(std::string_view s, bool keepends);  // str.splitlines
bool is_lower(std::string_view s);                                        // str.islower
bool is_upper(std::string_view s);                                        // str.isupper

}  // namespace rill::text::jinja::unicode
