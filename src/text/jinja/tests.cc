#include "text/jinja/tests.h"

#include <map>

#include "text/jinja/arguments.h"
#include "text/jinja/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/filters.h"
#include "text/jinja/operators.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

// A test takes the tested value and at most one argument, named `param` (nullptr: none).
using TestFn = bool (*)(Interpreter&, const Value& v, const Value& arg);
struct TestDef {
  TestFn fn;
  const char* param;
};

bool mod_equals(Interpreter& in, const Value& v, const Value& divisor, int64_t expected) {
  return equals(binary_op(in, "%", v, divisor), Value::integer(expected));
}

// jinja2's `sequence` test: len() works and the type has __getitem__ (jinja2's Undefined has both).
bool is_sequence(const Value& v) {
  if (v.is_string() || v.is_dict() || v.is_undefined()) return true;
  return v.is_flavor(SeqFlavor::List) || v.is_flavor(SeqFlavor::Tuple) || v.is_flavor(SeqFlavor::Range);
}

bool is_iterable(const Value& v) {
  return v.is_string() || v.is_dict() || v.is_seq() || v.is_undefined() || v.kind() == Value::Kind::Loop;
}

// jinja2's Undefined and LoopContext define __call__, so callable() accepts them.
bool is_callable(const Value& v) {
  return v.kind() == Value::Kind::Function || v.is_undefined() || v.kind() == Value::Kind::Loop;
}

bool eq(Interpreter&, const Value& v, const Value& o) {
  return equals(v, o);
}
bool ne(Interpreter&, const Value& v, const Value& o) {
  return !equals(v, o);
}
bool gt(Interpreter&, const Value& v, const Value& o) {
  return compare(v, o) > 0;
}
bool ge(Interpreter&, const Value& v, const Value& o) {
  return compare(v, o) >= 0;
}
bool lt(Interpreter&, const Value& v, const Value& o) {
  return compare(v, o) < 0;
}
bool le(Interpreter&, const Value& v, const Value& o) {
  return compare(v, o) <= 0;
}

const std::map<std::string_view, TestDef>& registry() {
  static const std::map<std::string_view, TestDef> kTests = {
      {"odd",
       {[](Interpreter& in, const Value& v, const Value&) { return mod_equals(in, v, Value::integer(2), 1); },
        nullptr}},
      {"even",
       {[](Interpreter& in, const Value& v, const Value&) { return mod_equals(in, v, Value::integer(2), 0); },
        nullptr}},
      {"divisibleby",
       {[](Interpreter& in, const Value& v, const Value& n) { return mod_equals(in, v, n, 0); }, "num"}},
      {"defined", {[](Interpreter&, const Value& v, const Value&) { return !v.is_undefined(); }, nullptr}},
      {"undefined", {[](Interpreter&, const Value& v, const Value&) { return v.is_undefined(); }, nullptr}},
      {"filter",
       {[](Interpreter&, const Value& v, const Value&) {
          return v.is_string() && filter_exists(v.as_string());
        },
        nullptr}},
      {"test",
       {[](Interpreter&, const Value& v, const Value&) {
          return v.is_string() && test_exists(v.as_string());
        },
        nullptr}},
      {"none", {[](Interpreter&, const Value& v, const Value&) { return v.is_none(); }, nullptr}},
      {"boolean", {[](Interpreter&, const Value& v, const Value&) { return v.is_bool(); }, nullptr}},
      {"false",
       {[](Interpreter&, const Value& v, const Value&) { return v.is_bool() && !v.as_bool(); }, nullptr}},
      {"true",
       {[](Interpreter&, const Value& v, const Value&) { return v.is_bool() && v.as_bool(); }, nullptr}},
      {"integer", {[](Interpreter&, const Value& v, const Value&) { return v.is_int(); }, nullptr}},
      {"float", {[](Interpreter&, const Value& v, const Value&) { return v.is_float(); }, nullptr}},
      {"lower",
       {[](Interpreter&, const Value& v, const Value&) { return unicode::is_lower(to_str(v)); }, nullptr}},
      {"upper",
       {[](Interpreter&, const Value& v, const Value&) { return unicode::is_upper(to_str(v)); }, nullptr}},
      {"string", {[](Interpreter&, const Value& v, const Value&) { return v.is_string(); }, nullptr}},
      {"mapping", {[](Interpreter&, const Value& v, const Value&) { return v.is_dict(); }, nullptr}},
      {"number", {[](Interpreter&, const Value& v, const Value&) { return v.is_number(); }, nullptr}},
      {"sequence", {[](Interpreter&, const Value& v, const Value&) { return is_sequence(v); }, nullptr}},
      {"iterable", {[](Interpreter&, const Value& v, const Value&) { return is_iterable(v); }, nullptr}},
      {"callable", {[](Interpreter&, const Value& v, const Value&) { return is_callable(v); }, nullptr}},
      {"sameas", {[](Interpreter&, const Value& v, const Value& o) { return v.same_object(o); }, "other"}},
      {"escaped", {[](Interpreter&, const Value& v, const Value&) { return v.is_markup(); }, nullptr}},
      {"in", {[](Interpreter&, const Value& v, const Value& seq) { return contains(seq, v); }, "seq"}},
      {"==", {eq, "other"}},
      {"eq", {eq, "other"}},
      {"equalto", {eq, "other"}},
      {"!=", {ne, "other"}},
      {"ne", {ne, "other"}},
      {">", {gt, "other"}},
      {"gt", {gt, "other"}},
      {"greaterthan", {gt, "other"}},
      {">=", {ge, "other"}},
      {"ge", {ge, "other"}},
      {"<", {lt, "other"}},
      {"lt", {lt, "other"}},
      {"lessthan", {lt, "other"}},
      {"<=", {le, "other"}},
      {"le", {le, "other"}},
  };
  return kTests;
}

}  // namespace

bool test_exists(std::string_view name) {
  return registry().count(name) != 0;
}

bool apply_test(Interpreter& in, std::string_view name, const Value& operand, CallArgs& args) {
  auto it = registry().find(name);
  if (it == registry().end()) fail("No test named '{}'.", name);
  const TestDef& def = it->second;
  if (!def.param) {
    bind_args(name, args, {});
    return def.fn(in, operand, Value());
  }
  return def.fn(in, operand, bind_args(name, args, {{def.param, std::nullopt}})[0]);
}

}  // namespace rill::text::jinja
