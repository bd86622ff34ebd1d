#include "runner/disk_file.h"

#include <charconv>
#include <cstring>

#include "runner/crc32c.h"

namespace rill::runner {
namespace {

constexpr char kMagic[8] = {'R', 'I', 'L', 'L', 'K', 'V', 'D', '\0'};
constexpr uint32_t kMaxTokens = 1 << 16;  // a block's tokens; far above any block size rill plans

template <typename T>
void put(std::vector<char>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <typename T>
T get(std::span<const char> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

std::optional<uint64_t> parse_hex64(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string disk_file_name(const DiskFileName& n) {
  return fmt::format("rill-{:016x}-{:016x}.{}", n.fingerprint, n.hash, n.snapshot ? "snap" : "blk");
}

std::optional<DiskFileName> parse_disk_file_name(std::string_view name) {
  // rill-<16 hex>-<16 hex>.blk | .snap
  if (name.size() < 5 + 16 + 1 + 16 + 4 || name.substr(0, 5) != "rill-" || name[21] != '-' || name[38] != '.')
    return std::nullopt;
  const std::string_view ext = name.substr(39);
  if (ext != "blk" && ext != "snap") return std::nullopt;
  const auto fp = parse_hex64(name.substr(5, 16)), hash = parse_hex64(name.substr(22, 16));
  if (!fp || !hash) return std::nullopt;
  return DiskFileName{*fp, *hash, ext == "snap"};
}

std::vector<char> encode_disk_header(const DiskFileHeader& h) {
  std::vector<char> out(h.size(), 0);
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  put<uint32_t>(out, 8, kDiskFormatVersion);
  put<uint32_t>(out, 12, h.snapshot ? 2 : 1);
  put<uint64_t>(out, 16, h.fingerprint);
  put<uint64_t>(out, 24, h.hash);
  put<uint64_t>(out, 32, h.parent_hash);
  put<uint64_t>(out, 40, h.payload_bytes);
  put<uint32_t>(out, 48, uint32_t(h.tokens.size()));
  put<uint32_t>(out, 52, h.payload_crc);
  std::memcpy(out.data() + kDiskHeaderBytes, h.tokens.data(), h.tokens.size() * sizeof(int32_t));
  uint32_t crc = crc32c(0, out.data(), 56);
  crc = crc32c(crc, out.data() + kDiskHeaderBytes, h.tokens.size() * sizeof(int32_t));
  put<uint32_t>(out, 56, crc);
  return out;
}

Result<DiskFileHeader> decode_disk_header_fixed(std::span<const char> fixed) {
  if (fixed.size() < kDiskHeaderBytes)
    return invalid_argument("truncated: {} bytes, shorter than the {}-byte header", fixed.size(), kDiskHeaderBytes);
  if (std::memcmp(fixed.data(), kMagic, sizeof(kMagic)) != 0) return invalid_argument("not a rill disk tier file");
  const uint32_t version = get<uint32_t>(fixed, 8);
  if (version != kDiskFormatVersion)
    return invalid_argument("format version {}, this build reads version {}", version, kDiskFormatVersion);
  const uint32_t kind = get<uint32_t>(fixed, 12);
  if (kind != 1 && kind != 2) return invalid_argument("unknown kind {} in the header", kind);
  DiskFileHeader h;
  h.snapshot = kind == 2;
  h.fingerprint = get<uint64_t>(fixed, 16);
  h.hash = get<uint64_t>(fixed, 24);
  h.parent_hash = get<uint64_t>(fixed, 32);
  h.payload_bytes = get<uint64_t>(fixed, 40);
  h.payload_crc = get<uint32_t>(fixed, 52);
  const uint32_t n_tokens = get<uint32_t>(fixed, 48);
  if (n_tokens > kMaxTokens) return invalid_argument("header checksum mismatch (corrupt header)");
  h.tokens.resize(n_tokens);
  return h;
}

Status finish_disk_header(std::span<const char> fixed, std::span<const int32_t> tokens, DiskFileHeader* h) {
  uint32_t crc = crc32c(0, fixed.data(), 56);
  crc = crc32c(crc, tokens.data(), tokens.size_bytes());
  if (crc != get<uint32_t>(fixed, 56)) return invalid_argument("header checksum mismatch (corrupt header)");
  h->tokens.assign(tokens.begin(), tokens.end());
  return {};
}

}  // namespace rill::runner
