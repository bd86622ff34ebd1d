// CRC-32C (Castagnoli, the iSCSI / ext4 / RocksDB checksum): the disk tier's file checksums. SSE4.2's crc32
// instruction where the CPU has it (several GB/s: a 41 MiB snapshot in a few ms), else a table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rill::runner {

// Continues a CRC over `n` more bytes: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// The CRC of A followed by B from the CRCs of each and B's length: crc32c_combine(crc32c(0, a), crc32c(0, b),
// |b|) == crc32c(0, a + b). The disk tier checksums a large file's chunks on several threads and joins them.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

}  // namespace rill::runner
