// Sizes derived from untrusted numbers (config.json fields, command-line flags): products and sums that
// report overflow instead of wrapping, and byte counts printed for people ("3.2 TiB").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace rill {

// The product of non-negative factors; nullopt when a factor is negative or the product exceeds int64.
std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors);
// a + b for non-negative a and b; nullopt on overflow or a negative operand.
std::optional<int64_t> checked_sum(int64_t a, int64_t b);

// "512 B", "8.0 KiB", "22.1 GiB", "3.2 TiB": binary units, one decimal above bytes.
std::string format_bytes(double bytes);

}  // namespace rill
