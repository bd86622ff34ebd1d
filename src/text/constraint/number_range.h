// Grammars for JSON numbers within bounds (JSON Schema minimum / maximum / exclusiveMinimum /
// exclusiveMaximum): exact digit-range constructions over the decimal text, so every accepted text is a value
// in the range, compared as the decimals it spells (no rounding through a double).
//
// Spellings (a grammar need only accept some spelling of each value): integers are -?(0|[1-9][0-9]*) without
// "-0"; bounded numbers add an optional fraction (.[0-9]+) but no exponent, so "1e3" is not offered where
// "1000" is.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "text/constraint/grammar.h"

namespace rill::text::constraint {

// A decimal number: sign, integer digits ("0" or no leading zero), fraction digits (no trailing zero).
// Zero is never negative.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;

  // Parses JSON number text (e.g. "-12", "0.5", "1e+30", "2.5E-3"); nullopt when it is not one.
  static std::optional<Decimal> parse(std::string_view json_number);
  static Decimal integer(std::string_view digits, bool negative);  // `digits` without leading zeros

  bool is_integer() const { return frac_digits.empty(); }
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
  std::string text() const;  // canonical: "-12.5", "0", "100"
  Decimal floor() const;
  Decimal ceil() const;
  Decimal plus_one() const;  // integers only
  Decimal minus_one() const;
};

// -1, 0, 1 as a < b, a == b, a > b.
int compare(const Decimal& a, const Decimal& b);

struct Bound {
  Decimal value;
  bool exclusive = false;
};

// A range of numbers; a missing end is unbounded.
struct NumberRange {
  std::optional<Bound> lo, hi;
  bool empty() const;  // no value lies in it
};

// Integers in [lo, hi] (both inclusive; absent: unbounded). Ends must be integers.
NodeId integer_range_node(GrammarBuilder& b, const std::optional<Decimal>& lo,
                          const std::optional<Decimal>& hi);
// Numbers in `range` (integer or fractional values), written without an exponent.
NodeId number_range_node(GrammarBuilder& b, const NumberRange& range);

}  // namespace rill::text::constraint
