#include "text/jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "text/jinja/arguments.h"
#include "text/jinja/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/json.h"
#include "text/jinja/methods.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&);

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(unicode::to_lower(v.as_string())) : v;
}

// jinja2's make_attrgetter: "a.b.0" walks getitem per dotted part (digit parts as ints).
std::vector<Value> attribute_path(const Value& attribute) {
  if (attribute.is_none()) return {};
  if (!attribute.is_string()) return {attribute};
  std::vector<Value> parts;
  std::string_view s = attribute.as_string();
  while (true) {
    const size_t dot = s.find('.');
    const std::string part(s.substr(0, dot));
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string_view::npos) return parts;
    s.remove_prefix(dot + 1);
  }
}

Value get_path(Interpreter& in, Value item, const std::vector<Value>& path,
               const Value* default_value = nullptr) {
  for (const Value& part : path) {
    item = in.getitem(item, part);
    if (default_value && item.is_undefined()) item = *default_value;
  }
  return item;
}

// Sorts items by key (Python's sorted: stable, reverse keeps equal items in order).
std::vector<Value> sorted_by(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? compare(keys[b], keys[a]) < 0 : compare(keys[a], keys[b]) < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

// Python's round(x, n) for floats: exact decimal expansion, then round half to even on it.
double round_float(double x, int64_t n) {
  if (!std::isfinite(x) || n > 400) return x;
  if (n < -400) return std::copysign(0.0, x);
  char buf[1600];
  std::snprintf(buf, sizeof buf, "%.1100f", std::fabs(x));  // exact: glibc prints every binary digit
  std::string digits(buf);
  const size_t point = digits.find('.');
  digits.erase(point, 1);
  const int64_t keep = static_cast<int64_t>(point) + n;  // digits kept before rounding
  if (keep < 0) return std::copysign(0.0, x);
  std::string kept = digits.substr(0, static_cast<size_t>(keep));
  const std::string rest = digits.substr(static_cast<size_t>(keep));
  const bool above_half =
      !rest.empty() &&
      (rest[0] > '5' || (rest[0] == '5' && rest.find_first_not_of('0', 1) != std::string::npos));
  const bool tie = !rest.empty() && rest[0] == '5' && rest.find_first_not_of('0', 1) == std::string::npos;
  const bool odd = !kept.empty() && (kept.back() - '0') % 2 == 1;
  if (above_half || (tie && odd)) {
    int i = static_cast<int>(kept.size()) - 1;
    for (; i >= 0 && kept[i] == '9'; --i) kept[i] = '0';
    if (i < 0)
      kept.insert(kept.begin(), '1');
    else
      ++kept[i];
  }
  std::string text = kept.empty() ? "0" : kept;
  text += n < 0 ? std::string(static_cast<size_t>(-n), '0') : "";
  if (n > 0) text.insert(text.size() - std::min<size_t>(text.size(), static_cast<size_t>(n)), ".");
  return std::copysign(std::strtod(text.c_str(), nullptr), x);
}

Value round_int(int64_t v, int64_t n) {
  if (n >= 0) return Value::integer(v);
  if (n < -18) return Value::integer(0);
  int64_t p = 1;
  for (int64_t i = 0; i < -n; ++i) p *= 10;
  int64_t q = v / p, r = v % p;
  if (r < 0) r += p, --q;
  if (2 * r > p || (2 * r == p && (q & 1))) ++q;  // round half to even
  return Value::integer(q * p);
}

// --- string filters ---------------------------------------------------------------------------------

Value f_string_map(const Value& v, const CallArgs& a, std::string_view fn,
                   std::string (*map)(std::string_view)) {
  bind_args(fn, a, {});
  return Value::string(map(to_str(v)));
}

Value call_str_method(Interpreter& in, const std::string& self, std::string_view name,
                      std::vector<Value> args) {
  CallArgs call;
  call.positional = std::move(args);
  return in.call(*builtin_attribute(Value::string(self), name), call);
}

Value f_trim(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args("trim", a, {{"chars", Value::none()}});
  return call_str_method(in, to_str(v), "strip", {args[0]});
}

Value f_replace(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args =
      bind_args("replace", a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::none()}});
  const Value count = args[2].is_none() ? Value::integer(-1) : args[2];
  return call_str_method(in, to_str(v), "replace",
                         {Value::string(to_str(args[0])), Value::string(to_str(args[1])), count});
}

Value f_center(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args("center", a, {{"width", Value::integer(80)}});
  return call_str_method(in, to_str(v), "center", {args[0]});
}

Value f_title(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("title", a, {});
  // jinja2's own title: words start after runs of '-', whitespace, '(', '{', '[' or '<'.
  const std::u32string c = unicode::decode(to_str(v));
  auto is_break = [](char32_t ch) {
    return ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<' || unicode::is_space(ch);
  };
  std::string out;
  for (size_t i = 0; i < c.size();) {
    size_t j = i;
    const bool brk = is_break(c[i]);
    while (j < c.size() && is_break(c[j]) == brk) ++j;
    const std::string item = unicode::encode(std::u32string_view(c).substr(i, j - i));
    if (brk) {
      out += item;
    } else {
      out += unicode::to_upper(unicode::encode(std::u32string_view(c).substr(i, 1)));
      out += unicode::to_lower(unicode::encode(std::u32string_view(c).substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value::string(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args(
      "indent", a,
      {{"width", Value::integer(4)}, {"first", Value::boolean(false)}, {"blank", Value::boolean(false)}});
  if (!v.is_string()) fail(v.is_undefined() ? v.as_undefined().message : "indent() needs a string");
  const std::string indention = args[0].is_string()
                                    ? args[0].as_string()
                                    : std::string(std::max<int64_t>(0, int_arg("indent", args[0])), ' ');
  std::vector<std::string> lines = unicode::split_lines(v.as_string() + "\n", false);
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) rv += "\n";
    if (i && (truthy(args[2]) || !lines[i].empty())) rv += indention;
    rv += lines[i];
    in.check_size(rv.size());
  }
  if (truthy(args[1])) rv = indention + rv;
  return Value::string(std::move(rv));
}

Value f_truncate(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("truncate", a,
                        {{"length", Value::integer(255)},
                         {"killwords", Value::boolean(false)},
                         {"end", Value::string("...")},
                         {"leeway", Value::none()}});
  const int64_t length = int_arg("truncate", args[0]);
  const std::u32string end = unicode::decode(str_arg("truncate", args[2]));
  const int64_t leeway = args[3].is_none() ? 5 : int_arg("truncate", args[3]);
  if (length < static_cast<int64_t>(end.size())) fail("expected length >= {}, got {}", end.size(), length);
  if (leeway < 0) fail("expected leeway >= 0, got {}", leeway);
  const std::u32string s = unicode::decode(str_arg("truncate", v));
  if (static_cast<int64_t>(s.size()) <= length + leeway) return v;
  std::u32string head = s.substr(0, static_cast<size_t>(length) - end.size());
  if (!truthy(args[1])) {
    const size_t space = head.rfind(U' ');
    if (space != std::u32string::npos) head.resize(space);
  }
  return Value::string(unicode::encode(head + end));
}

Value f_wordcount(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : unicode::decode(to_str(v))) {
    const bool w = unicode::is_word(c);
    n += w && !in_word;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_format(Interpreter&, const Value& v, const CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty())
    fail("can't handle positional and keyword arguments at the same time");
  if (a.keyword.empty()) return Value::string(percent_format(to_str(v), tuple_value(a.positional)));
  DictData d;
  for (const auto& [k, val] : a.keyword) d.set(string_value(k), val);
  return Value::string(percent_format(to_str(v), Value::dict(std::move(d))));
}

Value f_escape(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("escape", a, {});
  return v.is_markup() ? v : Value::string(html_escape(to_str(v)), true);
}

Value f_forceescape(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("forceescape", a, {});
  return Value::string(html_escape(to_str(v)), true);
}

Value f_safe(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("safe", a, {});
  return Value::string(to_str(v), true);
}

Value f_string(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("string", a, {});
  return v.is_string() ? v : Value::string(to_str(v));
}

Value f_tojson(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args("tojson", a,
                        {{"ensure_ascii", Value::boolean(false)},
                         {"indent", Value::none()},
                         {"separators", Value::none()},
                         {"sort_keys", Value::boolean(false)}});
  DumpOptions o;
  o.ensure_ascii = truthy(args[0]);
  if (args[1].is_string())
    o.indent = args[1].as_string();
  else if (!args[1].is_none())
    o.indent = std::string(std::max<int64_t>(0, int_arg("tojson", args[1])), ' ');
  if (o.indent) o.item_separator = ",";
  if (!args[2].is_none()) {
    const std::vector<Value> seps = iterate(args[2]);
    if (seps.size() != 2) fail("tojson(): separators must be an (item_separator, key_separator) pair");
    o.item_separator = str_arg("tojson", seps[0]);
    o.key_separator = str_arg("tojson", seps[1]);
  }
  o.sort_keys = truthy(args[3]);
  std::string out = dumps(v, o);
  in.check_size(out.size());
  return Value::string(std::move(out));
}

// --- numbers ----------------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("abs", a, {});
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.is_integral()) return unary_op(v.as_int() < 0 ? '-' : '+', v);
  fail("bad operand type for abs(): '{}'", type_name(v));
}

Value f_int(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("int", a, {{"default", Value::integer(0)}, {"base", Value::integer(10)}});
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) {
      if (std::isnan(v.as_double())) return args[0];
      fail("cannot convert float infinity to integer");
    }
    if (std::fabs(v.as_double()) >= 9.2e18) fail("integer result exceeds 64 bits");
    return Value::integer(static_cast<int64_t>(v.as_double()));
  }
  if (!v.is_string()) return args[0];
  if (auto i = parse_int(v.as_string(), static_cast<int>(int_arg("int", args[1])))) return Value::integer(*i);
  // jinja2's quirk: "42.23"|int is 42 (via float).
  const auto d = parse_float(v.as_string());
  if (!d || !std::isfinite(*d)) return args[0];
  if (std::fabs(*d) >= 9.2e18) fail("integer result exceeds 64 bits");
  return Value::integer(static_cast<int64_t>(*d));
}

Value f_float(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("float", a, {{"default", Value::floating(0.0)}});
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::floating(*d);
  }
  return args[0];
}

Value f_round(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("round", a, {{"precision", Value::integer(0)}, {"method", Value::string("common")}});
  const std::string& method = str_arg("round", args[1]);
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
  const int64_t n = int_arg("round", args[0]);
  if (!v.is_number()) fail("type {} doesn't define __round__ method", type_name(v));
  if (method == "common")
    return v.is_float() ? Value::floating(round_float(v.as_double(), n)) : round_int(v.as_int(), n);
  const double p = std::pow(10.0, static_cast<double>(n));
  const double scaled = v.as_double() * p;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / p);
}

// --- sequences --------------------------------------------------------------------------------------

Value generator(std::vector<Value> items) {
  return Value::seq(std::move(items), SeqFlavor::Generator);
}

Value f_length(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("length", a, {});
  return Value::integer(static_cast<int64_t>(length(v)));
}

Value f_list(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("list", a, {});
  return Value::seq(iterate(v));
}

Value f_first(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("first", a, {});
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("last", a, {});
  if (v.is_flavor(SeqFlavor::Generator) || v.is_flavor(SeqFlavor::ListReverse)) {
    fail("'{}' object is not reversible", type_name(v));
  }
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_reverse(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) {
    std::u32string c = unicode::decode(v.as_string());
    std::reverse(c.begin(), c.end());
    return Value::string(unicode::encode(c));
  }
  const bool reversible = v.is_dict() || v.is_undefined() || v.is_flavor(SeqFlavor::List) ||
                          v.is_flavor(SeqFlavor::Tuple) || v.is_flavor(SeqFlavor::Range) ||
                          v.is_flavor(SeqFlavor::DictKeys) || v.is_flavor(SeqFlavor::DictValues) ||
                          v.is_flavor(SeqFlavor::DictItems);
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() gives an iterator; for iterators jinja2 falls back to a reversed list.
  return Value::seq(std::move(items), reversible ? SeqFlavor::ListReverse : SeqFlavor::List);
}

Value f_join(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args("join", a, {{"d", Value::string("")}, {"attribute", Value::none()}});
  const std::vector<Value> path = attribute_path(args[1]);
  const std::string sep = to_str(args[0]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(path.empty() ? item : get_path(in, item, path));
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_default(Interpreter&, const Value& v, const CallArgs& a) {
  auto args =
      bind_args("default", a, {{"default_value", Value::string("")}, {"boolean", Value::boolean(false)}});
  if (v.is_undefined() || (truthy(args[1]) && !truthy(v))) return args[0];
  return v;
}

Value f_items(Interpreter&, const Value& v, const CallArgs& a) {
  bind_args("items", a, {});
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, val] : v.as_dict().items()) items.push_back(tuple_value({k, val}));
  return generator(std::move(items));
}

Value f_dictsort(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("dictsort", a,
                        {{"case_sensitive", Value::boolean(false)},
                         {"by", Value::string("key")},
                         {"reverse", Value::boolean(false)}});
  const std::string& by = str_arg("dictsort", args[1]);
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) fail("'{}' object has no attribute 'items'", type_name(v));
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.as_dict().items()) {
    items.push_back(tuple_value({k, val}));
    const Value& key = by == "key" ? k : val;
    keys.push_back(truthy(args[0]) ? key : ignore_case(key));
  }
  return Value::seq(sorted_by(std::move(items), keys, truthy(args[2])));
}

Value f_sort(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args("sort", a,
                        {{"reverse", Value::boolean(false)},
                         {"case_sensitive", Value::boolean(false)},
                         {"attribute", Value::none()}});
  // make_multi_attrgetter: "a,b" sorts by several attributes; the key is always a list.
  std::vector<std::vector<Value>> paths;
  if (args[2].is_string()) {
    const Value parts = call_str_method(in, args[2].as_string(), "split", {Value::string(",")});
    for (const Value& part : parts.as_seq().items) paths.push_back(attribute_path(part));
  } else {
    paths.push_back(attribute_path(args[2]));
  }
  std::vector<Value> items = iterate(v), keys;
  for (const Value& item : items) {
    std::vector<Value> key;
    for (const auto& path : paths) {
      const Value k = get_path(in, item, path);
      key.push_back(truthy(args[1]) ? k : ignore_case(k));
    }
    keys.push_back(Value::seq(std::move(key)));
  }
  return Value::seq(sorted_by(std::move(items), keys, truthy(args[0])));
}

Value f_unique(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args =
      bind_args("unique", a, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  const std::vector<Value> path = attribute_path(args[1]);
  std::set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value k = get_path(in, item, path);
    if (seen.insert(hash_key(truthy(args[0]) ? k : ignore_case(k))).second) out.push_back(item);
  }
  return generator(std::move(out));
}

Value min_or_max(Interpreter& in, const Value& v, const CallArgs& a, bool want_max) {
  const char* fn = want_max ? "max" : "min";
  auto args = bind_args(fn, a, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  const std::vector<Value> path = attribute_path(args[1]);
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = get_path(in, items[i], path);
    if (!truthy(args[0])) k = ignore_case(k);
    // Python's min/max keep the first of equal items.
    if (i == 0 || (want_max ? compare(k, best_key) > 0 : compare(k, best_key) < 0)) best = i, best_key = k;
  }
  return items[best];
}

Value f_min(Interpreter& in, const Value& v, const CallArgs& a) {
  return min_or_max(in, v, a, false);
}
Value f_max(Interpreter& in, const Value& v, const CallArgs& a) {
  return min_or_max(in, v, a, true);
}

Value f_sum(Interpreter& in, const Value& v, const CallArgs& a) {
  auto args = bind_args("sum", a, {{"attribute", Value::none()}, {"start", Value::integer(0)}});
  const std::vector<Value> path = attribute_path(args[0]);
  if (args[1].is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  Value total = args[1];
  for (const Value& item : iterate(v)) total = binary_op(in, "+", total, get_path(in, item, path));
  return total;
}

Value f_batch(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("batch", a, {{"linecount", std::nullopt}, {"fill_with", Value::none()}});
  const int64_t n = int_arg("batch", args[0]);
  if (n <= 0) fail("batch(): linecount must be positive");
  std::vector<Value> out, tmp;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(tmp.size()) == n) out.push_back(Value::seq(std::move(tmp))), tmp.clear();
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!args[1].is_none()) tmp.resize(static_cast<size_t>(n), args[1]);
    out.push_back(Value::seq(std::move(tmp)));
  }
  return generator(std::move(out));
}

Value f_slice(Interpreter&, const Value& v, const CallArgs& a) {
  auto args = bind_args("slice", a, {{"slices", std::nullopt}, {"fill_with", Value::none()}});
  const int64_t slices = int_arg("slice", args[0]);
  if (slices <= 0) fail("integer division or modulo by zero");
  const std::vector<Value> seq = iterate(v);
  const int64_t n = static_cast<int64_t>(seq.size()), per = n / slices, extra = n % slices;
  std::vector<Value> out;
  int64_t offset = 0;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!args[1].is_none() && k >= extra) part.push_back(args[1]);
    out.push_back(Value::seq(std::move(part)));
  }
  return generator(std::move(out));
}

Value f_attr(Interpreter&, const Value& v, const CallArgs& a) {
  const std::string name = str_arg("attr", bind_args("attr", a, {{"name", std::nullopt}})[0]);
  // Only real attributes (methods, namespace fields): `attr` never falls back to dict items.
  std::optional<Value> found = builtin_attribute(v, name);
  return found ? *found
               : Value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(v), name));
}

Value f_map(Interpreter& in, const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});
  if (a.positional.empty()) {
    Value attribute, default_value = Value::none();
    for (const auto& [k, val] : a.keyword) {
      if (k == "attribute")
        attribute = val;
      else if (k == "default")
        default_value = val;
      else
        fail("Unexpected keyword argument '{}'", k);
    }
    if (attribute.is_undefined()) fail("map requires a filter argument");
    const std::vector<Value> path = attribute_path(attribute);
    for (const Value& item : iterate(v)) {
      out.push_back(get_path(in, item, path, default_value.is_none() ? nullptr : &default_value));
      in.count_step();
    }
    return generator(std::move(out));
  }
  const std::string& name = str_arg("map", a.positional[0]);
  for (const Value& item : iterate(v)) {
    CallArgs rest{std::vector<Value>(a.positional.begin() + 1, a.positional.end()), a.keyword};
    out.push_back(in.filter(name, item, rest));
    in.count_step();
  }
  return generator(std::move(out));
}

// select / reject / selectattr / rejectattr (jinja2's select_or_reject).
Value select_or_reject(Interpreter& in, const Value& v, const CallArgs& a, bool keep_if, bool by_attribute) {
  if (!truthy(v)) return generator({});
  size_t off = 0;
  std::vector<Value> path;
  if (by_attribute) {
    if (a.positional.empty()) fail("Missing parameter for attribute name");
    path = attribute_path(a.positional[0]);
    off = 1;
  }
  const bool has_test = a.positional.size() > off;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? get_path(in, item, path) : item;
    bool ok = false;
    if (has_test) {
      CallArgs rest{std::vector<Value>(a.positional.begin() + off + 1, a.positional.end()), a.keyword};
      ok = in.test(str_arg("select", a.positional[off]), subject, rest);
    } else {
      ok = truthy(subject);
    }
    if (ok == keep_if) out.push_back(item);
    in.count_step();
  }
  return generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, const CallArgs& a) {
  return select_or_reject(in, v, a, true, false);
}
Value f_reject(Interpreter& in, const Value& v, const CallArgs& a) {
  return select_or_reject(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, const CallArgs& a) {
  return select_or_reject(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, const CallArgs& a) {
  return select_or_reject(in, v, a, false, true);
}

// nullptr: a jinja2 default filter rill does not implement (fails when applied).
const std::map<std::string_view, FilterFn>& registry() {
  static const std::map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", [](Interpreter&, const Value& v,
                        const CallArgs& a) { return f_string_map(v, a, "capitalize", unicode::capitalize); }},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"filesizeformat", nullptr},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_forceescape},
      {"format", f_format},
      {"groupby", nullptr},
      {"indent", f_indent},
      {"int", f_int},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", [](Interpreter&, const Value& v,
                   const CallArgs& a) { return f_string_map(v, a, "lower", unicode::to_lower); }},
      {"items", f_items},
      {"map", f_map},
      {"min", f_min},
      {"max", f_max},
      {"pprint", nullptr},
      {"random", nullptr},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"slice", f_slice},
      {"sort", f_sort},
      {"string", f_string},
      {"striptags", nullptr},
      {"sum", f_sum},
      {"title", f_title},
      {"trim", f_trim},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", [](Interpreter&, const Value& v,
                   const CallArgs& a) { return f_string_map(v, a, "upper", unicode::to_upper); }},
      {"urlencode", nullptr},
      {"urlize", nullptr},
      {"wordcount", f_wordcount},
      {"wordwrap", nullptr},
      {"xmlattr", nullptr},
      {"tojson", f_tojson},
  };
  return kFilters;
}

}  // namespace

bool filter_exists(std::string_view name) {
  return registry().count(name) != 0;
}

Value apply_filter(Interpreter& in, std::string_view name, const Value& operand, CallArgs& args) {
  auto it = registry().find(name);
  if (it == registry().end()) fail("No filter named '{}'.", name);
  if (!it->second) fail("the '{}' filter is not supported by rill's Jinja engine", name);
  return it->second(in, operand, args);
}

}  // namespace rill::text::jinja
