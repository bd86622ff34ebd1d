#include "text/jinja/operators.h"

#include <cmath>
#include <limits>

#include "text/jinja/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/py_format.h"

namespace rill::text::jinja {
namespace {

[[noreturn]] void fail_operands(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.as_undefined().message);
  if (b.is_undefined()) fail(b.as_undefined().message);
  if (op == "+" && a.is_string()) fail("can only concatenate str (not \"{}\") to str", type_name(b));
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

[[noreturn]] void fail_overflow() {
  fail("integer result exceeds 64 bits (Python would switch to a big integer)");
}

int64_t add(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) fail_overflow();
  return r;
}
int64_t sub(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_sub_overflow(x, y, &r)) fail_overflow();
  return r;
}
int64_t mul(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_mul_overflow(x, y, &r)) fail_overflow();
  return r;
}

Value int_arith(std::string_view op, int64_t x, int64_t y) {
  if (op == "+") return Value::integer(add(x, y));
  if (op == "-") return Value::integer(sub(x, y));
  if (op == "*") return Value::integer(mul(x, y));
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return Value::floating(static_cast<double>(x) / static_cast<double>(y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("integer division or modulo by zero");
    if (x == std::numeric_limits<int64_t>::min() && y == -1) fail_overflow();
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors toward negative infinity
    return Value::integer(op == "//" ? q : m);
  }
  // "**": a negative exponent gives a float, as in Python.
  if (y < 0) return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
  int64_t acc = 1;
  for (int64_t base = x, e = y; e > 0; e >>= 1) {
    if (e & 1) acc = mul(acc, base);
    if (e > 1) base = mul(base, base);
  }
  return Value::integer(acc);
}

Value float_arith(std::string_view op, double x, double y) {
  if (op == "+") return Value::floating(x + y);
  if (op == "-") return Value::floating(x - y);
  if (op == "*") return Value::floating(x * y);
  if (op == "/") {
    if (y == 0) fail("float division by zero");
    return Value::floating(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail(op == "//" ? "float floor division by zero" : "float modulo");
    // CPython's float_divmod.
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) mod += y, div -= 1.0;
    } else {
      mod = std::copysign(0.0, y);
    }
    double floordiv = 0;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::floating(op == "//" ? floordiv : mod);
  }
  if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y))
    fail("raising a negative number to a fractional power gives a complex number");
  return Value::floating(std::pow(x, y));
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (seq.is_string()) {
    if (n <= 0) return Value::string("");
    in.check_size(seq.as_string().size() * static_cast<size_t>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  if (n > 0) in.check_size(seq.as_seq().items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_seq().items.begin(), seq.as_seq().items.end());
  return Value::seq(std::move(out), seq.as_seq().flavor);
}

bool concatenable(const Value& v) {
  return v.is_flavor(SeqFlavor::List) || v.is_flavor(SeqFlavor::Tuple);
}


Value add_strings(Interpreter& in, const Value& a, const Value& b) {
  in.check_size(a.as_string().size() + b.as_string().size());
  if (!a.is_markup() && !b.is_markup()) return Value::string(a.as_string() + b.as_string());
  const std::string left = a.is_markup() ? a.as_string() : html_escape(a.as_string());
  const std::string right = b.is_markup() ? b.as_string() : html_escape(b.as_string());
  return Value::string(left + right, true);
}

}  // namespace

Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_arith(op, a.as_double(), b.as_double());
    return int_arith(op, a.as_int(), b.as_int());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return add_strings(in, a, b);
    if (concatenable(a) && concatenable(b) && a.as_seq().flavor == b.as_seq().flavor) {
      in.check_size(a.as_seq().items.size() + b.as_seq().items.size());
      std::vector<Value> items = a.as_seq().items;
      items.insert(items.end(), b.as_seq().items.begin(), b.as_seq().items.end());
      return Value::seq(std::move(items), a.as_seq().flavor);
    }
  }
  if (op == "*") {
    if ((a.is_string() || concatenable(a)) && b.is_integral()) return repeat(in, a, b.as_int());
    if ((b.is_string() || concatenable(b)) && a.is_integral()) return repeat(in, b, a.as_int());
  }
  if (op == "%" && a.is_string()) {
    if (a.is_markup())
      fail("`%` formatting of Markup strings (from |safe or |escape) is not supported by rill");
    return Value::string(percent_format(a.as_string(), b));
  }
  fail_operands(op, a, b);
}

Value unary_op(char op, const Value& v) {
  if (v.is_float()) return Value::floating(op == '-' ? -v.as_double() : v.as_double());
  if (v.is_integral()) {
    if (op == '+') return Value::integer(v.as_int());
    if (v.as_int() == std::numeric_limits<int64_t>::min()) fail_overflow();
    return Value::integer(-v.as_int());
  }
  if (v.is_undefined()) fail(v.as_undefined().message);
  fail("bad operand type for unary {}: '{}'", op, type_name(v));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace rill::text::jinja
