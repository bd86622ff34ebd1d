// The disk tier's file format (issue #38, cache/README.md): one file per MLA block or KDA snapshot that left
// the host tier, named `rill-<fingerprint>-<chain hash>.{blk,snap}` (16 hex digits each), written to a
// temporary name and renamed, so a file under its final name is whole unless something outside rill cut it.
//
//   offset  size  field (little-endian)
//        0     8  magic "RILLKVD\0"
//        8     4  format version (kDiskFormatVersion)
//       12     4  kind: 1 MLA block, 2 KDA snapshot
//       16     8  fingerprint: the model, config and cache layout that wrote it (cache_fingerprint.h)
//       24     8  the block's prefix chain hash (PrefixIndex::chain_hash; a snapshot: the block it follows)
//       32     8  the parent block's chain hash (0: the first block of a prompt)
//       40     8  payload bytes
//       48     4  number of token ids that follow the header (a block's block_size; a snapshot: 0)
//       52     4  CRC-32C of the payload
//       56     4  CRC-32C of bytes [0, 56) and the token ids
//       60     4  zero
//       64        token ids (int32), then the payload: every layer's rows in HostTier's order
//
// A restarted server rebuilds its prefix index from the headers (hash, parent hash, tokens) without reading
// payloads; the payload checksum is checked when a hit reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::runner {

inline constexpr uint32_t kDiskFormatVersion = 1;
inline constexpr size_t kDiskHeaderBytes = 64;

struct DiskFileHeader {
  bool snapshot = false;
  uint64_t fingerprint = 0, hash = 0, parent_hash = 0;
  uint64_t payload_bytes = 0;
  uint32_t payload_crc = 0;
  std::vector<int32_t> tokens;
  // Bytes of the header and its token ids: where the payload starts.
  size_t size() const { return kDiskHeaderBytes + tokens.size() * sizeof(int32_t); }
};

struct DiskFileName {
  uint64_t fingerprint = 0, hash = 0;
  bool snapshot = false;
};
std::string disk_file_name(const DiskFileName& n);
// nullopt for a name this format does not produce (someone else's file: left alone).
std::optional<DiskFileName> parse_disk_file_name(std::string_view name);

// The header and token ids as stored (the header checksum filled in).
std::vector<char> encode_disk_header(const DiskFileHeader& h);
// The fixed 64 bytes: magic, version, kind, and the number of token ids to read next; an error names what is
// wrong (not this format, another version, a bad kind, an impossible count).
Result<DiskFileHeader> decode_disk_header_fixed(std::span<const char> fixed);
// Checks the header checksum over the fixed bytes and `tokens`, and stores them in `h`.
Status finish_disk_header(std::span<const char> fixed, std::span<const int32_t> tokens, DiskFileHeader* h);

}  // namespace rill::runner
