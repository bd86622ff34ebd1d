#include "text/jinja/methods.h"

#include <algorithm>
#include <array>
#include <map>

#include "text/jinja/arguments.h"
#include "text/jinja/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

using StrMethod = Value (*)(Interpreter&, const std::string&, const CallArgs&);

// --- code-point helpers -----------------------------------------------------------------------------

// Python's slice.indices(): clamps start/stop for a sequence of length n.
void slice_indices(int64_t n, std::optional<int64_t>& start, std::optional<int64_t>& stop, int64_t step) {
  auto fix = [&](std::optional<int64_t>& v, int64_t dflt) {
    if (!v) {
      v = dflt;
      return;
    }
    int64_t x = *v < 0 ? *v + n : *v;
    if (step > 0)
      x = std::clamp<int64_t>(x, 0, n);
    else
      x = std::clamp<int64_t>(x, -1, n - 1);
    v = x;
  };
  fix(start, step > 0 ? 0 : n - 1);
  fix(stop, step > 0 ? n : -1);
}

template <typename T>
std::vector<T> slice_vector(const std::vector<T>& in, std::optional<int64_t> start,
                            std::optional<int64_t> stop, int64_t step) {
  slice_indices(static_cast<int64_t>(in.size()), start, stop, step);
  std::vector<T> out;
  for (int64_t i = *start; step > 0 ? i < *stop : i > *stop; i += step) out.push_back(in[i]);
  return out;
}

std::u32string cps(const std::string& s) {
  return unicode::decode(s);
}

// Code-point [start, end) window of s, with Python's negative/None index rules (str.find's start/end).
std::pair<size_t, size_t> window(const std::u32string& s, const Value& start, const Value& end) {
  const int64_t n = static_cast<int64_t>(s.size());
  auto norm = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t x = int_arg("slice", v);
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  const int64_t b = norm(start, 0), e = norm(end, n);
  return {static_cast<size_t>(b), static_cast<size_t>(std::max(b, e))};
}

bool is_strip_char(char32_t c, const std::optional<std::u32string>& chars) {
  return chars ? chars->find(c) != std::u32string::npos : unicode::is_space(c);
}

Value do_strip(const std::string& s, const CallArgs& a, bool left, bool right, std::string_view fn) {
  auto args = bind_args(fn, a, {{"chars", Value::none()}});
  std::optional<std::u32string> chars;
  if (!args[0].is_none()) chars = cps(str_arg(fn, args[0]));
  const std::u32string c = cps(s);
  size_t b = 0, e = c.size();
  while (left && b < e && is_strip_char(c[b], chars)) ++b;
  while (right && e > b && is_strip_char(c[e - 1], chars)) --e;
  return Value::string(unicode::encode(std::u32string_view(c).substr(b, e - b)));
}

std::vector<Value> split_whitespace(const std::u32string& c, int64_t maxsplit) {
  std::vector<Value> out;
  size_t i = 0;
  while (true) {
    while (i < c.size() && unicode::is_space(c[i])) ++i;
    if (i == c.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(Value::string(unicode::encode(c.substr(i))));
      break;
    }
    size_t j = i;
    while (j < c.size() && !unicode::is_space(c[j])) ++j;
    out.push_back(Value::string(unicode::encode(c.substr(i, j - i))));
    i = j;
  }
  return out;
}

std::vector<Value> rsplit_whitespace(const std::u32string& c, int64_t maxsplit) {
  std::vector<Value> out;
  size_t e = c.size();
  while (true) {
    while (e > 0 && unicode::is_space(c[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(Value::string(unicode::encode(c.substr(0, e))));
      break;
    }
    size_t b = e;
    while (b > 0 && !unicode::is_space(c[b - 1])) --b;
    out.push_back(Value::string(unicode::encode(c.substr(b, e - b))));
    e = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Value do_split(const std::string& s, const CallArgs& a, bool from_right) {
  const char* fn = from_right ? "rsplit" : "split";
  auto args = bind_args(fn, a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
  const int64_t maxsplit = int_arg(fn, args[1]);
  if (args[0].is_none()) {
    return Value::seq(from_right ? rsplit_whitespace(cps(s), maxsplit) : split_whitespace(cps(s), maxsplit));
  }
  const std::string& sep = str_arg(fn, args[0]);
  if (sep.empty()) fail("empty separator");
  std::vector<Value> out;
  if (!from_right) {
    size_t pos = 0;
    for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                     (hit = s.find(sep, pos)) != std::string::npos;
         pos = hit + sep.size()) {
      out.push_back(Value::string(s.substr(pos, hit - pos)));
    }
    out.push_back(Value::string(s.substr(pos)));
    return Value::seq(std::move(out));
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string::npos) break;
    out.push_back(Value::string(s.substr(hit + sep.size(), end - hit - sep.size())));
    end = hit;
  }
  out.push_back(Value::string(s.substr(0, end)));
  std::reverse(out.begin(), out.end());
  return Value::seq(std::move(out));
}

Value do_splitlines(const std::string& s, const CallArgs& a) {
  auto args = bind_args("splitlines", a, {{"keepends", Value::boolean(false)}});
  std::vector<Value> out;
  for (std::string& line : unicode::split_lines(s, truthy(args[0])))
    out.push_back(Value::string(std::move(line)));
  return Value::seq(std::move(out));
}

Value do_affix(const std::string& s, const CallArgs& a, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  auto args = bind_args(fn, a, {{"prefix", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
  const std::u32string c = cps(s);
  const auto [b, e] = window(c, args[1], args[2]);
  const std::u32string_view w = std::u32string_view(c).substr(b, e - b);
  auto test = [&](const Value& v) {
    const std::u32string x = cps(str_arg(fn, v));
    if (w.size() < x.size()) return false;
    return prefix ? w.substr(0, x.size()) == x : w.substr(w.size() - x.size()) == x;
  };
  if (args[0].is_flavor(SeqFlavor::Tuple)) {
    for (const Value& v : args[0].as_seq().items) {
      if (test(v)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (!args[0].is_string()) {
    fail("{} first arg must be str or a tuple of str, not {}", fn, type_name(args[0]));
  }
  return Value::boolean(test(args[0]));
}

// find / rfind / index / rindex: the code-point position of sub in s[start:end].
Value do_find(const std::string& s, const CallArgs& a, bool from_right, bool raise) {
  const char* fn = from_right ? (raise ? "rindex" : "rfind") : (raise ? "index" : "find");
  auto args = bind_args(fn, a, {{"sub", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
  const std::u32string c = cps(s);
  const std::u32string sub = cps(str_arg(fn, args[0]));
  const auto [b, e] = window(c, args[1], args[2]);
  const std::u32string_view w = std::u32string_view(c).substr(b, e - b);
  const size_t hit = from_right ? w.rfind(sub) : w.find(sub);
  if (hit == std::u32string_view::npos) {
    if (raise) fail("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(b + hit));
}

Value do_count(const std::string& s, const CallArgs& a) {
  auto args =
      bind_args("count", a, {{"sub", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
  const std::u32string c = cps(s);
  const std::u32string sub = cps(str_arg("count", args[0]));
  const auto [b, e] = window(c, args[1], args[2]);
  const std::u32string_view w = std::u32string_view(c).substr(b, e - b);
  if (sub.empty()) return Value::integer(static_cast<int64_t>(w.size() + 1));
  int64_t n = 0;
  for (size_t p = w.find(sub); p != std::u32string_view::npos; p = w.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

Value do_replace(Interpreter& in, const std::string& s, const CallArgs& a) {
  auto args =
      bind_args("replace", a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::integer(-1)}});
  const std::string& from = str_arg("replace", args[0]);
  const std::string& to = str_arg("replace", args[1]);
  int64_t count = int_arg("replace", args[2]);
  std::string out;
  if (from.empty()) {
    // Python inserts `new` before every code point and at the end.
    const std::u32string c = cps(s);
    for (char32_t cp : c) {
      if (count-- != 0) out += to;
      unicode::append_utf8(out, cp);
      in.check_size(out.size());
    }
    if (count != 0) out += to;
    return Value::string(std::move(out));
  }
  size_t pos = 0;
  for (size_t hit; count != 0 && (hit = s.find(from, pos)) != std::string::npos;
       pos = hit + from.size(), --count) {
    out.append(s, pos, hit - pos);
    out += to;
    in.check_size(out.size());
  }
  out.append(s, pos);
  return Value::string(std::move(out));
}

Value do_join(Interpreter& in, const std::string& sep, const CallArgs& a) {
  auto args = bind_args("join", a, {{"iterable", std::nullopt}});
  std::string out;
  size_t i = 0;
  for (const Value& item : iterate(args[0])) {
    if (!item.is_string()) fail("sequence item {}: expected str instance, {} found", i, type_name(item));
    if (i++) out += sep;
    out += item.as_string();
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value do_pad(Interpreter& in, const std::string& s, const CallArgs& a, char where, std::string_view fn) {
  auto args = bind_args(fn, a, {{"width", std::nullopt}, {"fillchar", Value::string(" ")}});
  const int64_t width = int_arg(fn, args[0]);
  const std::u32string fill = cps(str_arg(fn, args[1]));
  if (fill.size() != 1) fail("The fill character must be exactly one character long");
  const int64_t n = static_cast<int64_t>(unicode::count_codepoints(s));
  if (width <= n) return Value::string(s);
  in.check_size(static_cast<size_t>(width) * 4);
  const int64_t total = width - n;
  // CPython's center: the odd extra fill character goes left only when the width is odd too.
  const int64_t left = where == '<' ? 0 : where == '>' ? total : total / 2 + (total & width & 1);
  std::u32string out(left, fill[0]);
  out += cps(s);
  out += std::u32string(total - left, fill[0]);
  return Value::string(unicode::encode(out));
}

Value do_zfill(Interpreter& in, const std::string& s, const CallArgs& a) {
  auto args = bind_args("zfill", a, {{"width", std::nullopt}});
  const int64_t width = int_arg("zfill", args[0]);
  const int64_t n = static_cast<int64_t>(unicode::count_codepoints(s));
  if (width <= n) return Value::string(s);
  in.check_size(static_cast<size_t>(width));
  const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  return Value::string((sign ? s.substr(0, 1) : "") + std::string(width - n, '0') + s.substr(sign ? 1 : 0));
}

Value do_partition(const std::string& s, const CallArgs& a, bool from_right) {
  const char* fn = from_right ? "rpartition" : "partition";
  auto args = bind_args(fn, a, {{"sep", std::nullopt}});
  const std::string& sep = str_arg(fn, args[0]);
  if (sep.empty()) fail("empty separator");
  const size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    return from_right ? tuple_value({string_value(""), string_value(""), string_value(s)})
                      : tuple_value({string_value(s), string_value(""), string_value("")});
  }
  return tuple_value(
      {string_value(s.substr(0, hit)), string_value(sep), string_value(s.substr(hit + sep.size()))});
}

// isalpha/isdigit/... need Unicode category tables rill does not carry: answer for ASCII text only.
Value ascii_predicate(const std::string& s, const CallArgs& a, std::string_view fn,
                      bool (*pred)(unsigned char)) {
  bind_args(fn, a, {});
  if (s.empty()) return Value::boolean(false);
  for (unsigned char c : s) {
    if (c >= 0x80) fail("str.{}() on non-ASCII text is not supported by rill's Jinja engine", fn);
    if (!pred(c)) return Value::boolean(false);
  }
  return Value::boolean(true);
}

bool ascii_alpha(unsigned char c) {
  return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}
bool ascii_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}
bool ascii_alnum(unsigned char c) {
  return ascii_alpha(c) || ascii_digit(c);
}

Value no_args(const CallArgs& a, std::string_view fn, std::string v) {
  bind_args(fn, a, {});
  return Value::string(std::move(v));
}

const std::map<std::string_view, StrMethod>& str_methods() {
  static const std::map<std::string_view, StrMethod> kMethods = {
      {"strip", [](Interpreter&, const std::string& s,
                   const CallArgs& a) { return do_strip(s, a, true, true, "strip"); }},
      {"lstrip", [](Interpreter&, const std::string& s,
                    const CallArgs& a) { return do_strip(s, a, true, false, "lstrip"); }},
      {"rstrip", [](Interpreter&, const std::string& s,
                    const CallArgs& a) { return do_strip(s, a, false, true, "rstrip"); }},
      {"split", [](Interpreter&, const std::string& s, const CallArgs& a) { return do_split(s, a, false); }},
      {"rsplit", [](Interpreter&, const std::string& s, const CallArgs& a) { return do_split(s, a, true); }},
      {"splitlines",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_splitlines(s, a); }},
      {"startswith",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_affix(s, a, true); }},
      {"endswith",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_affix(s, a, false); }},
      {"find",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_find(s, a, false, false); }},
      {"rfind",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_find(s, a, true, false); }},
      {"index",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_find(s, a, false, true); }},
      {"rindex",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_find(s, a, true, true); }},
      {"count", [](Interpreter&, const std::string& s, const CallArgs& a) { return do_count(s, a); }},
      {"replace", do_replace},
      {"join", do_join},
      {"center", [](Interpreter& in, const std::string& s,
                    const CallArgs& a) { return do_pad(in, s, a, '^', "center"); }},
      {"ljust", [](Interpreter& in, const std::string& s,
                   const CallArgs& a) { return do_pad(in, s, a, '<', "ljust"); }},
      {"rjust", [](Interpreter& in, const std::string& s,
                   const CallArgs& a) { return do_pad(in, s, a, '>', "rjust"); }},
      {"zfill", do_zfill},
      {"partition",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_partition(s, a, false); }},
      {"rpartition",
       [](Interpreter&, const std::string& s, const CallArgs& a) { return do_partition(s, a, true); }},
      {"upper", [](Interpreter&, const std::string& s,
                   const CallArgs& a) { return no_args(a, "upper", unicode::to_upper(s)); }},
      {"lower", [](Interpreter&, const std::string& s,
                   const CallArgs& a) { return no_args(a, "lower", unicode::to_lower(s)); }},
      {"title", [](Interpreter&, const std::string& s,
                   const CallArgs& a) { return no_args(a, "title", unicode::to_title(s)); }},
      {"capitalize", [](Interpreter&, const std::string& s,
                        const CallArgs& a) { return no_args(a, "capitalize", unicode::capitalize(s)); }},
      {"swapcase", [](Interpreter&, const std::string& s,
                      const CallArgs& a) { return no_args(a, "swapcase", unicode::swapcase(s)); }},
      {"removeprefix",
       [](Interpreter&, const std::string& s, const CallArgs& a) {
         const std::string p =
             str_arg("removeprefix", bind_args("removeprefix", a, {{"prefix", std::nullopt}})[0]);
         return Value::string(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
       }},
      {"removesuffix",
       [](Interpreter&, const std::string& s, const CallArgs& a) {
         const std::string p =
             str_arg("removesuffix", bind_args("removesuffix", a, {{"suffix", std::nullopt}})[0]);
         const bool has =
             !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
         return Value::string(has ? s.substr(0, s.size() - p.size()) : s);
       }},
      {"format", [](Interpreter&, const std::string& s,
                    const CallArgs& a) { return Value::string(brace_format(s, a)); }},
      {"islower",
       [](Interpreter&, const std::string& s, const CallArgs& a) {
         bind_args("islower", a, {});
         return Value::boolean(unicode::is_lower(s));
       }},
      {"isupper",
       [](Interpreter&, const std::string& s, const CallArgs& a) {
         bind_args("isupper", a, {});
         return Value::boolean(unicode::is_upper(s));
       }},
      {"isspace",
       [](Interpreter&, const std::string& s, const CallArgs& a) {
         bind_args("isspace", a, {});
         const std::u32string c = cps(s);
         return Value::boolean(!c.empty() && std::all_of(c.begin(), c.end(), unicode::is_space));
       }},
      {"isascii",
       [](Interpreter&, const std::string& s, const CallArgs& a) {
         bind_args("isascii", a, {});
         return Value::boolean(
             std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
       }},
      {"isalpha", [](Interpreter&, const std::string& s,
                     const CallArgs& a) { return ascii_predicate(s, a, "isalpha", ascii_alpha); }},
      {"isdigit", [](Interpreter&, const std::string& s,
                     const CallArgs& a) { return ascii_predicate(s, a, "isdigit", ascii_digit); }},
      {"isdecimal", [](Interpreter&, const std::string& s,
                       const CallArgs& a) { return ascii_predicate(s, a, "isdecimal", ascii_digit); }},
      {"isnumeric", [](Interpreter&, const std::string& s,
                       const CallArgs& a) { return ascii_predicate(s, a, "isnumeric", ascii_digit); }},
      {"isalnum", [](Interpreter&, const std::string& s,
                     const CallArgs& a) { return ascii_predicate(s, a, "isalnum", ascii_alnum); }},
  };
  return kMethods;
}

// Every public attribute of these Python types, so that one rill does not implement fails loudly instead
// of reading as undefined (dir() of Python 3.11).
constexpr std::string_view kStrAttrs[] = {"casefold",   "encode",       "expandtabs",
                                          "format_map", "isidentifier", "isprintable",
                                          "istitle",    "maketrans",    "translate"};
constexpr std::string_view kIntAttrs[] = {
    "as_integer_ratio", "bit_count", "bit_length", "conjugate", "denominator",
    "from_bytes",       "imag",      "numerator",  "real",      "to_bytes"};
constexpr std::string_view kFloatAttrs[] = {"as_integer_ratio", "conjugate", "fromhex", "hex", "imag",
                                            "is_integer",       "real"};
constexpr std::string_view kListMutators[] = {"append", "clear",  "extend",  "insert",
                                              "pop",    "remove", "reverse", "sort"};
constexpr std::string_view kDictMutators[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
bool in(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value method(std::string_view name, NativeFn fn) {
  return Value::function(std::string(name), Function::Kind::Method, std::move(fn));
}

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)), true);
}

[[noreturn]] void fail_unsupported(const Value& obj, std::string_view name) {
  fail("'{}.{}' is not supported by rill's Jinja engine", type_name(obj), name);
}

std::optional<Value> str_attribute(const Value& obj, std::string_view name) {
  const auto& methods = str_methods();
  auto it = methods.find(name);
  if (it == methods.end()) {
    if (in(kStrAttrs, name)) fail_unsupported(obj, name);
    return std::nullopt;
  }
  // Markup strings (|safe, |escape) escape the arguments of their methods; rill does not model that.
  if (obj.is_markup()) fail("methods of Markup strings (from |safe or |escape) are not supported by rill");
  const StrMethod fn = it->second;
  const std::string self = obj.as_string();
  return method(name, [fn, self](Interpreter& in, CallArgs& a) { return fn(in, self, a); });
}

std::optional<Value> dict_attribute(const Value& obj, std::string_view name) {
  if (in(kDictMutators, name)) return unsafe(obj, name);
  auto view = [&](SeqFlavor flavor) {
    return method(name, [obj, flavor, name = std::string(name)](Interpreter&, CallArgs& a) {
      bind_args(name, a, {});
      std::vector<Value> items;
      for (const auto& [k, v] : obj.as_dict().items()) {
        items.push_back(flavor == SeqFlavor::DictKeys     ? k
                        : flavor == SeqFlavor::DictValues ? v
                                                          : tuple_value({k, v}));
      }
      return Value::seq(std::move(items), flavor);
    });
  };
  if (name == "items") return view(SeqFlavor::DictItems);
  if (name == "keys") return view(SeqFlavor::DictKeys);
  if (name == "values") return view(SeqFlavor::DictValues);
  if (name == "get") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      auto args = bind_args("get", a, {{"key", std::nullopt}, {"default", Value::none()}});
      (void)hash_key(args[0]);
      const Value* v = obj.as_dict().find(args[0]);
      return v ? *v : args[1];
    });
  }
  if (name == "copy") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      bind_args("copy", a, {});
      return Value::dict(obj.as_dict());
    });
  }
  if (name == "fromkeys") fail_unsupported(obj, name);
  return std::nullopt;
}

std::optional<Value> seq_attribute(const Value& obj, std::string_view name) {
  const SeqFlavor flavor = obj.as_seq().flavor;
  const bool list = flavor == SeqFlavor::List, tuple = flavor == SeqFlavor::Tuple;
  if (list && in(kListMutators, name)) return unsafe(obj, name);
  if ((list || tuple) && name == "count") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      auto args = bind_args("count", a, {{"value", std::nullopt}});
      return Value::integer(std::count_if(obj.as_seq().items.begin(), obj.as_seq().items.end(),
                                          [&](const Value& v) { return equals(v, args[0]); }));
    });
  }
  if ((list || tuple) && name == "index") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      auto args = bind_args("index", a, {{"value", std::nullopt}});
      const auto& items = obj.as_seq().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (equals(items[i], args[0])) return Value::integer(static_cast<int64_t>(i));
      }
      fail("{} is not in list", repr(args[0]));
    });
  }
  if (list && name == "copy") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      bind_args("copy", a, {});
      return Value::seq(obj.as_seq().items);
    });
  }
  static constexpr std::string_view kOther[] = {"start",   "stop",       "step", "count", "index",
                                                "mapping", "isdisjoint", "send", "throw", "close"};
  if (in(kOther, name)) fail_unsupported(obj, name);
  return std::nullopt;
}

std::optional<Value> loop_attribute(const Value& obj, std::string_view name) {
  LoopState& l = obj.as_loop();
  const auto n = static_cast<int64_t>(l.items.size());
  const auto i = static_cast<int64_t>(l.index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(l.depth);
  if (name == "depth0") return Value::integer(l.depth - 1);
  if (name == "previtem") return i > 0 ? l.items[i - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? l.items[i + 1] : Value::undefined("there is no next item");
  if (name == "cycle") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      if (a.positional.empty()) fail("no items for cycling given");
      return a.positional[obj.as_loop().index0 % a.positional.size()];
    });
  }
  if (name == "changed") {
    return method(name, [obj](Interpreter&, CallArgs& a) {
      LoopState& state = obj.as_loop();
      const Value now = Value::seq(a.positional);
      const bool changed = !state.last_changed || !equals(Value::seq(*state.last_changed), now);
      state.last_changed = a.positional;
      return Value::boolean(changed);
    });
  }
  return std::nullopt;
}

}  // namespace

Value slice_value(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  if (obj.is_string()) {
    const std::u32string c = cps(obj.as_string());
    const std::vector<char32_t> v(c.begin(), c.end());
    const std::vector<char32_t> s = slice_vector(v, start, stop, st);
    return Value::string(unicode::encode(std::u32string(s.begin(), s.end())));
  }
  const SeqFlavor flavor = obj.as_seq().flavor;
  return Value::seq(slice_vector(obj.as_seq().items, start, stop, st), flavor);
}

std::optional<Value> builtin_attribute(const Value& obj, std::string_view name) {
  // jinja2's sandbox refuses every attribute starting with an underscore that the object really has;
  // for the dunder names every Python object has, that is always.
  if (name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__")
    return unsafe(obj, name);
  switch (obj.kind()) {
    case Value::Kind::String:
      return str_attribute(obj, name);
    case Value::Kind::Dict:
      return dict_attribute(obj, name);
    case Value::Kind::Seq:
      return seq_attribute(obj, name);
    case Value::Kind::Loop:
      return loop_attribute(obj, name);
    case Value::Kind::Namespace: {
      const Value* v = obj.as_namespace().attrs.find(name);
      return v ? std::optional<Value>(*v) : std::nullopt;
    }
    case Value::Kind::Bool:
    case Value::Kind::Int:
      if (in(kIntAttrs, name)) fail_unsupported(obj, name);
      return std::nullopt;
    case Value::Kind::Float:
      if (in(kFloatAttrs, name)) fail_unsupported(obj, name);
      return std::nullopt;
    case Value::Kind::Undefined:
    case Value::Kind::None:
    case Value::Kind::Function:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace rill::text::jinja
