// Reading and writing `tiktoken.model`: one line per rank, "<base64 token bytes> <rank>".
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::text {

// Parses the file's contents; `name` is used in error messages ("tiktoken.model:12: bad base64 ...").
// Strict: canonical base64, a decimal rank, LF or CRLF line ends, empty lines skipped; ranks must be
// dense 0..n-1 (the control block is numbered from n), every token distinct, every single byte present.
// Returns the token bytes indexed by rank.
Result<std::vector<std::string>> parse_tiktoken_model(std::string_view contents, std::string_view name);
Result<std::vector<std::string>> read_tiktoken_model(const std::filesystem::path& path);

// The file for ranks[r] = bytes of rank r, in rank order.
std::string format_tiktoken_model(const std::vector<std::string>& ranks);

std::string base64_encode(std::string_view bytes);
// Canonical base64 with padding; false for anything else.
bool base64_decode(std::string_view text, std::string* out);

Result<std::string> read_file(const std::filesystem::path& path);

}  // namespace rill::text
