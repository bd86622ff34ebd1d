// The digit-range construction: the integers of [lo, hi] with n digits are, when lo and hi first differ at
// digit k, lo's digit followed by "at least the rest of lo", the digits strictly between followed by
// anything, and hi's digit followed by "at most the rest of hi" (the form regex generators for numeric ranges
// use). Lengths between those of lo and hi are "any n digits not starting with 0". Fractions compare digit by
// digit the same way, with a missing digit counting as 0, so "0.5" and "0.50" are the same value.
#include "text/constraint/number_range.h"

#include <algorithm>
#include <vector>

namespace rill::text::constraint {
namespace {

// Non-negative integers as digit strings without leading zeros.
int compare_digits(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

std::string add_one(std::string digits) {
  for (size_t i = digits.size(); i-- > 0;) {
    if (digits[i] != '9') {
      ++digits[i];
      return digits;
    }
    digits[i] = '0';
  }
  return "1" + digits;
}

std::string subtract_one(std::string digits) {  // digits > 0
  for (size_t i = digits.size(); i-- > 0;) {
    if (digits[i] != '0') {
      --digits[i];
      break;
    }
    digits[i] = '9';
  }
  const size_t first = digits.find_first_not_of('0');
  return first == std::string::npos ? "0" : digits.substr(first);
}

// Fractions without trailing zeros compare as strings: a prefix is the smaller value.
int compare_fractions(std::string_view a, std::string_view b) {
  const int c = a.compare(b);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

bool all_of_digit(std::string_view s, char d) {
  return std::all_of(s.begin(), s.end(), [d](char c) { return c == d; });
}

class RangeBuilder {
 public:
  explicit RangeBuilder(GrammarBuilder& b) : b_(b) {}

  NodeId nothing() { return b_.alt({}); }
  NodeId digit() {
    if (digit_ < 0) digit_ = b_.byte_range('0', '9');
    return digit_;
  }
  NodeId digits(int32_t n) { return n == 0 ? b_.empty() : b_.repeat(digit(), n, n); }
  // Free digit runs (a half-open range's tail, a fraction's rest) stop at kMaxFreeDigits beyond what a bound
  // spells (json_schema.cc: bounded number literals), so a model writing digits on has to end the number.
  static constexpr int32_t kMaxFreeDigits = 16;
  NodeId any_digits(int32_t min = 0) { return b_.repeat(digit(), min, std::max(min, kMaxFreeDigits)); }
  NodeId any_zeros(int32_t min) { return b_.repeat(b_.bytes("0"), min, kMaxFreeDigits); }

  // Digit strings of equal length between lo and hi (lo <= hi), leading zeros allowed (a tail of a number).
  NodeId same_length(const std::string& lo, const std::string& hi) {
    size_t p = 0;
    while (p < lo.size() && lo[p] == hi[p]) ++p;
    if (p == lo.size()) return b_.bytes(lo);
    const char l0 = lo[p], h0 = hi[p];
    const std::string lo_rest = lo.substr(p + 1), hi_rest = hi.substr(p + 1);
    const int32_t k = int32_t(lo_rest.size());
    const bool lo_full = all_of_digit(lo_rest, '0'), hi_full = all_of_digit(hi_rest, '9');
    std::vector<NodeId> alts;
    if (!lo_full)
      alts.push_back(
          b_.seq({b_.bytes(std::string(1, l0)), same_length(lo_rest, std::string(size_t(k), '9'))}));
    const char first = lo_full ? l0 : char(l0 + 1), last = hi_full ? h0 : char(h0 - 1);
    if (first <= last) alts.push_back(b_.seq({b_.byte_range(uint8_t(first), uint8_t(last)), digits(k)}));
    if (!hi_full)
      alts.push_back(
          b_.seq({b_.bytes(std::string(1, h0)), same_length(std::string(size_t(k), '0'), hi_rest)}));
    return b_.seq({b_.bytes(lo.substr(0, p)), b_.alt(std::move(alts))});
  }

  // Integers in [lo, hi] (hi absent: unbounded) spelled without leading zeros.
  NodeId integers(const std::string& lo, const std::optional<std::string>& hi) {
    if (hi && compare_digits(lo, *hi) > 0) return nothing();
    const int32_t n_lo = int32_t(lo.size());
    if (hi && hi->size() == lo.size()) return same_length(lo, *hi);
    std::vector<NodeId> alts = {same_length(lo, std::string(size_t(n_lo), '9'))};
    const NodeId nonzero = b_.byte_range('1', '9');
    if (!hi) {
      alts.push_back(b_.seq({nonzero, any_digits(n_lo)}));
    } else {
      const int32_t n_hi = int32_t(hi->size());
      if (n_hi - n_lo >= 2) alts.push_back(b_.seq({nonzero, b_.repeat(digit(), n_lo, n_hi - 2)}));
      alts.push_back(same_length("1" + std::string(size_t(n_hi - 1), '0'), *hi));
    }
    return b_.alt(std::move(alts));
  }

  // The digits of a fraction (after ".") whose value is at least / more than `lo`. Without `nonempty` the
  // empty string stands for the value 0 (no fraction written); a written fraction has at least one digit.
  NodeId fraction_above(const std::string& lo, bool inclusive, bool nonempty) {
    if (lo.empty()) {
      if (inclusive) return any_digits(nonempty ? 1 : 0);
      return b_.seq({any_zeros(0), b_.byte_range('1', '9'), any_digits()});
    }
    std::vector<NodeId> alts = {
        b_.seq({b_.bytes(lo.substr(0, 1)), fraction_above(lo.substr(1), inclusive, false)})};
    if (lo[0] < '9') alts.push_back(b_.seq({b_.byte_range(uint8_t(lo[0] + 1), '9'), any_digits()}));
    return b_.alt(std::move(alts));
  }

  // ... at most / less than `hi`.
  NodeId fraction_below(const std::string& hi, bool inclusive, bool nonempty) {
    if (hi.empty()) return inclusive ? any_zeros(nonempty ? 1 : 0) : nothing();
    std::vector<NodeId> alts;
    if (!nonempty) alts.push_back(b_.empty());  // 0 < hi, which has a non-zero digit
    if (hi[0] > '0') alts.push_back(b_.seq({b_.byte_range('0', uint8_t(hi[0] - 1)), any_digits()}));
    if (hi.size() > 1 || inclusive)  // else nothing starts with hi's last digit and stays below hi
      alts.push_back(b_.seq({b_.bytes(hi.substr(0, 1)), fraction_below(hi.substr(1), inclusive, false)}));
    return b_.alt(std::move(alts));
  }

  // ... between `lo` and `hi` (lo <= hi).
  NodeId fraction_between(const std::string& lo, bool lo_incl, const std::string& hi, bool hi_incl,
                          bool nonempty) {
    if (lo.empty() && lo_incl) return fraction_below(hi, hi_incl, nonempty);
    if (hi.empty()) return nothing();  // the upper end is 0 and the lower one above it
    const char l0 = lo.empty() ? '0' : lo[0], h0 = hi[0];
    const std::string lo_rest = lo.empty() ? "" : lo.substr(1), hi_rest = hi.substr(1);
    if (l0 == h0)
      return b_.seq(
          {b_.bytes(std::string(1, l0)), fraction_between(lo_rest, lo_incl, hi_rest, hi_incl, false)});
    std::vector<NodeId> alts = {
        b_.seq({b_.bytes(std::string(1, l0)), fraction_above(lo_rest, lo_incl, false)})};
    if (l0 + 1 <= h0 - 1)
      alts.push_back(b_.seq({b_.byte_range(uint8_t(l0 + 1), uint8_t(h0 - 1)), any_digits()}));
    if (!hi_rest.empty() || hi_incl)
      alts.push_back(b_.seq({b_.bytes(std::string(1, h0)), fraction_below(hi_rest, hi_incl, false)}));
    return b_.alt(std::move(alts));
  }

  // "." and `written` digits, or nothing at all when a zero fraction is in range.
  NodeId fraction(NodeId written, bool zero_ok) {
    const NodeId dotted = b_.seq({b_.bytes("."), written});
    return zero_ok ? b_.optional(dotted) : dotted;
  }

  // Non-negative numbers in [lo, hi] (hi absent: unbounded): lo's integer part with a fraction from lo's
  // on, the integers in between with any fraction, hi's integer part with a fraction up to hi's.
  NodeId magnitudes(const Bound& lo, const std::optional<Bound>& hi) {
    const std::string &a = lo.value.int_digits, &lo_frac = lo.value.frac_digits;
    const bool lo_zero_ok = lo_frac.empty() && !lo.exclusive;
    const bool hi_zero_ok = !hi || !(hi->value.frac_digits.empty() && hi->exclusive);
    if (hi && hi->value.int_digits == a) {
      const NodeId digits =
          fraction_between(lo_frac, !lo.exclusive, hi->value.frac_digits, !hi->exclusive, true);
      return b_.seq({b_.bytes(a), fraction(digits, lo_zero_ok && hi_zero_ok)});
    }
    std::vector<NodeId> alts = {
        b_.seq({b_.bytes(a), fraction(fraction_above(lo_frac, !lo.exclusive, true), lo_zero_ok)})};
    const std::string next = add_one(a);
    const std::optional<std::string> last =
        hi ? std::optional<std::string>(subtract_one(hi->value.int_digits))
           : std::nullopt;  // hi's int > a >= 0
    if (!last || compare_digits(next, *last) <= 0)
      alts.push_back(b_.seq({integers(next, last), b_.optional(b_.seq({b_.bytes("."), any_digits(1)}))}));
    if (hi && hi_zero_ok) {  // else (hi an exclusive integer) no value has hi's integer part
      const NodeId digits = fraction_below(hi->value.frac_digits, !hi->exclusive, true);
      alts.push_back(b_.seq({b_.bytes(hi->value.int_digits), fraction(digits, true)}));
    }
    return b_.alt(std::move(alts));
  }

 private:
  GrammarBuilder& b_;
  NodeId digit_ = -1;
};

}  // namespace

std::optional<Decimal> Decimal::parse(std::string_view s) {
  size_t i = 0;
  Decimal d;
  const bool negative = i < s.size() && s[i] == '-';
  if (negative) ++i;
  std::string mantissa;
  size_t n_int = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') mantissa.push_back(s[i++]), ++n_int;
  if (n_int == 0) return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') mantissa.push_back(s[i++]);
    if (i == start) return std::nullopt;
  }
  long exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    const bool minus = i < s.size() && s[i] == '-';
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      exponent = exponent * 10 + (s[i++] - '0');
      if (exponent > 100000) return std::nullopt;  // far past any double
    }
    if (i == start) return std::nullopt;
    if (minus) exponent = -exponent;
  }
  if (i != s.size()) return std::nullopt;
  const long point = long(n_int) + exponent;  // digits of `mantissa` before the decimal point
  std::string int_part, frac_part;
  if (point <= 0) {
    frac_part = std::string(size_t(-point), '0') + mantissa;
  } else if (size_t(point) >= mantissa.size()) {
    int_part = mantissa + std::string(size_t(point) - mantissa.size(), '0');
  } else {
    int_part = mantissa.substr(0, size_t(point));
    frac_part = mantissa.substr(size_t(point));
  }
  const size_t first = int_part.find_first_not_of('0');
  d.int_digits = first == std::string::npos ? "0" : int_part.substr(first);
  const size_t last = frac_part.find_last_not_of('0');
  d.frac_digits = last == std::string::npos ? "" : frac_part.substr(0, last + 1);
  d.negative = negative && !d.is_zero();
  return d;
}

Decimal Decimal::integer(std::string_view digits, bool negative) {
  Decimal d;
  d.int_digits = std::string(digits);
  d.negative = negative && d.int_digits != "0";
  return d;
}

std::string Decimal::text() const {
  return (negative ? "-" : "") + int_digits + (frac_digits.empty() ? "" : "." + frac_digits);
}

Decimal Decimal::floor() const {
  if (is_integer()) return *this;
  return negative ? integer(add_one(int_digits), true) : integer(int_digits, false);
}

Decimal Decimal::ceil() const {
  if (is_integer()) return *this;
  return negative ? integer(int_digits, true) : integer(add_one(int_digits), false);
}

Decimal Decimal::plus_one() const {
  return negative ? integer(subtract_one(int_digits), true) : integer(add_one(int_digits), false);
}

Decimal Decimal::minus_one() const {
  if (negative || is_zero()) return integer(add_one(int_digits), true);
  return integer(subtract_one(int_digits), false);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = compare_digits(a.int_digits, b.int_digits);
  if (c == 0) c = compare_fractions(a.frac_digits, b.frac_digits);
  return a.negative ? -c : c;
}

bool NumberRange::empty() const {
  if (!lo || !hi) return false;
  const int c = compare(lo->value, hi->value);
  return c > 0 || (c == 0 && (lo->exclusive || hi->exclusive));
}

NodeId integer_range_node(GrammarBuilder& b, const std::optional<Decimal>& lo,
                          const std::optional<Decimal>& hi) {
  RangeBuilder r(b);
  if (lo && hi && compare(*lo, *hi) > 0) return r.nothing();
  std::vector<NodeId> parts;
  if (!lo || lo->negative) {  // -1, -2, ...: magnitudes from |hi| (or 1) to |lo|
    const std::string from = hi && hi->negative ? hi->int_digits : "1";
    const std::optional<std::string> to = lo ? std::optional<std::string>(lo->int_digits) : std::nullopt;
    parts.push_back(b.seq({b.bytes("-"), r.integers(from, to)}));
  }
  if (!hi || !hi->negative) {
    const std::string from = lo && !lo->negative ? lo->int_digits : "0";
    const std::optional<std::string> to = hi ? std::optional<std::string>(hi->int_digits) : std::nullopt;
    parts.push_back(r.integers(from, to));
  }
  return b.alt(std::move(parts));
}

NodeId number_range_node(GrammarBuilder& b, const NumberRange& range) {
  RangeBuilder r(b);
  if (range.empty()) return r.nothing();
  auto magnitude = [](const Bound& bound) {
    Bound m = bound;
    m.value.negative = false;
    return m;
  };
  std::vector<NodeId> parts;
  // Values below zero: "-" and a magnitude in (|hi| or 0, |lo|].
  if (!range.lo || range.lo->value.negative) {
    const Bound from = range.hi && range.hi->value.negative ? magnitude(*range.hi) : Bound{Decimal{}, true};
    const std::optional<Bound> to = range.lo ? std::optional<Bound>(magnitude(*range.lo)) : std::nullopt;
    if (!NumberRange{from, to}.empty()) parts.push_back(b.seq({b.bytes("-"), r.magnitudes(from, to)}));
  }
  // Zero and above.
  if (!range.hi || !range.hi->value.negative) {
    const Bound from = range.lo && !range.lo->value.negative ? *range.lo : Bound{Decimal{}, false};
    if (!NumberRange{from, range.hi}.empty()) parts.push_back(r.magnitudes(from, range.hi));
  }
  return b.alt(std::move(parts));
}

}  // namespace rill::text::constraint
