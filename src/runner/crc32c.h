// CRC-32C (Castagnoli, the iSCSI / ext4 / RocksDB checksum): the disk tier's file checksums. SSE4.2's crc32
// instruction where the CPU has it (several GB/s: a 41 MiB snapshot in a few ms), else a table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rill::runner {

// Continues a CRC over `n` more bytes: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace rill::runner
