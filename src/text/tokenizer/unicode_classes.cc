#include "text/tokenizer/unicode_classes.h"

#include <array>
#include <cstring>
#include <map>
#include <vector>

namespace rill::text {
namespace {

struct Run {
  uint32_t first;
  uint8_t cls;
};

constexpr Run kRuns[] = {
#include "text/tokenizer/unicode_tables.inc"
};

struct Storage {
  std::vector<uint16_t> block_of;
  std::vector<uint8_t> blocks;
  UnicodeClassTable table;

  Storage() {
    std::vector<uint8_t> flat(0x110000);
    const size_t n = sizeof(kRuns) / sizeof(kRuns[0]);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t end = i + 1 < n ? kRuns[i + 1].first : 0x110000;
      std::memset(flat.data() + kRuns[i].first, kRuns[i].cls, end - kRuns[i].first);
    }
    // Most 256-code-point blocks repeat (unassigned planes, CJK), so the table stays small and
    // cache-friendly.
    // Fixed-size keys: GCC 12 at -O3 reads std::vector keys' comparison as a memcmp of up to SIZE_MAX bytes
    // (a -Wstringop-overread false positive); an array's bound is known to it.
    std::map<std::array<uint8_t, 256>, uint16_t> seen;
    block_of.resize(0x1100);
    for (uint32_t b = 0; b < 0x1100; ++b) {
      std::array<uint8_t, 256> block;
      std::copy(flat.begin() + b * 256, flat.begin() + (b + 1) * 256, block.begin());
      auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
      if (inserted) blocks.insert(blocks.end(), it->first.begin(), it->first.end());
      block_of[b] = it->second;
    }
    table = {block_of.data(), blocks.data()};
  }
};

}  // namespace

const UnicodeClassTable& unicode_class_table() {
  static const Storage storage;
  return storage.table;
}

}  // namespace rill::text
