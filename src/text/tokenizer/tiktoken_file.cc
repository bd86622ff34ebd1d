#include "text/tokenizer/tiktoken_file.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace rill::text {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string* out) {
  out->clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int n_pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && last && k >= 2) {
        ++n_pad;
        v <<= 6;
        continue;
      }
      const int d = base64_value(c);
      if (d < 0 || n_pad > 0) return false;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    const int n_bytes = 3 - n_pad;
    // Canonical: the bits that padding drops must be zero.
    if (n_pad > 0 && (v & ((1u << (8 * n_pad)) - 1)) != 0) return false;
    for (int k = 0; k < n_bytes; ++k) out->push_back(static_cast<char>((v >> (16 - 8 * k)) & 0xFF));
  }
  return true;
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return invalid_argument("cannot read {}", path.string());
  return ss.str();
}

Result<std::vector<std::string>> parse_tiktoken_model(std::string_view contents, std::string_view name) {
  std::vector<std::string> ranks;
  std::vector<char> seen_rank;
  std::unordered_map<std::string_view, size_t> line_of_token;
  std::vector<size_t> line_of_rank;
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < contents.size();) {
    size_t eol = contents.find('\n', pos);
    if (eol == std::string_view::npos) eol = contents.size();
    std::string_view line = contents.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      return invalid_argument("{}:{}: expected '<base64 token> <rank>'", name, line_no);
    }
    if (!base64_decode(line.substr(0, sp), &bytes)) {
      return invalid_argument("{}:{}: bad base64 token '{}'", name, line_no, line.substr(0, sp));
    }
    const std::string_view rank_text = line.substr(sp + 1);
    int64_t rank = -1;
    const auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0 || rank > (1 << 24) ||
        (rank_text.size() > 1 && rank_text[0] == '0')) {
      return invalid_argument("{}:{}: bad rank '{}'", name, line_no, rank_text);
    }
    if (static_cast<size_t>(rank) >= ranks.size()) {
      ranks.resize(rank + 1);
      seen_rank.resize(rank + 1, 0);
      line_of_rank.resize(rank + 1, 0);
    }
    if (seen_rank[rank]) {
      return invalid_argument("{}:{}: duplicate rank {} (first on line {})", name, line_no, rank,
                              line_of_rank[rank]);
    }
    seen_rank[rank] = 1;
    line_of_rank[rank] = line_no;
    ranks[rank] = bytes;
  }
  if (ranks.empty()) return invalid_argument("{}: no ranks", name);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!seen_rank[r])
      return invalid_argument("{}: rank {} is missing (ranks must be 0..{})", name, r, ranks.size() - 1);
    const auto [it, inserted] = line_of_token.emplace(ranks[r], line_of_rank[r]);
    if (!inserted) {
      return invalid_argument("{}:{}: duplicate token '{}' (first on line {})", name, line_of_rank[r],
                              base64_encode(ranks[r]), it->second);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (!line_of_token.count(std::string_view(&c, 1))) {
      return invalid_argument("{}: byte 0x{:02x} has no token (every single byte needs one)", name, b);
    }
  }
  return ranks;
}

Result<std::vector<std::string>> read_tiktoken_model(const std::filesystem::path& path) {
  RILL_ASSIGN_OR_RETURN(const std::string contents, read_file(path));
  return parse_tiktoken_model(contents, path.string());
}

std::string format_tiktoken_model(const std::vector<std::string>& ranks) {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    out += base64_encode(ranks[r]);
    out += ' ';
    out += std::to_string(r);
    out += '\n';
  }
  return out;
}

}  // namespace rill::text
