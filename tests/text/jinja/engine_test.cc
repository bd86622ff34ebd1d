// rill's Jinja engine, feature by feature, against Python's jinja2 in the reference environment
// (jinja_reference.py runs render_reference.py's environment live). No expected output is written here:
// each case is rendered by both and must match byte for byte, or fail in both.
#include <gtest/gtest.h>

#include "text/jinja/jinja_reference.h"
#include "text/jinja/template.h"

namespace rill::text::jinja {
namespace {

using testing::expect_same_as_jinja2;
using testing::RenderCase;

RenderCase T(std::string name, std::string source, const char* vars = "{}") {
  return RenderCase{std::move(name), std::move(source), "", nlohmann::ordered_json::parse(vars)};
}

// Every combination of tag kind, left/right modifier and surrounding whitespace: trim_blocks,
// lstrip_blocks, `-` and `+` and their interactions.
TEST(JinjaEngine, WhitespaceControlMatrix) {
  const std::vector<std::pair<std::string, std::string>> tags = {
      {"{%L if true R%}", "{%L endif R%}"},
      {"{#L c R#}", ""},
      {"{{L 'v' R}}", ""},
      {"{%L set x = 1 R%}", ""},
      {"{%L for i in [1, 2] R%}", "{%L endfor R%}"},
  };
  const std::vector<std::string> contexts = {
      "a  \n  @\n  b",        "\n\t@\nx", "@\n\ny", "  @  ", "a@b", "a\n  @  \n  @\n", "  @\r\n  b\n",
      "x \u3000\n \u00a0@\n", "@",        "  @\n",
  };
  std::vector<RenderCase> cases;
  for (const auto& [open, close] : tags) {
    for (const std::string left : {"", "-", "+"}) {
      for (const std::string right : {"", "-", "+"}) {
        if (open.rfind("{{", 0) == 0 && right == "+") continue;  // `+}}` is not a tag end in jinja2
        auto fill = [&](std::string t) {
          for (auto pos = t.find('L'); pos != std::string::npos; pos = t.find('L')) t.replace(pos, 1, left);
          for (auto pos = t.find('R'); pos != std::string::npos; pos = t.find('R')) t.replace(pos, 1, right);
          return t;
        };
        const std::string tag =
            close.empty() ? fill(open) : fill(open) + "\n  body {{ 1 }}  \n" + fill(close);
        for (const std::string& ctx : contexts) {
          std::string src = ctx;
          for (auto pos = src.find('@'); pos != std::string::npos; pos = src.find('@', pos + tag.size())) {
            src.replace(pos, 1, tag);
          }
          cases.push_back(T("ws " + open + " " + left + right, src));
        }
      }
    }
  }
  cases.push_back(T("raw block", "a\n  {% raw %}\n  {{ x }} {% if %}\n  {% endraw %}\nb"));
  cases.push_back(T("raw block trimmed", "a\n  {%- raw -%}\n  {{ x }}\n  {%- endraw -%}\n  b"));
  cases.push_back(T("trailing newline dropped", "x\n"));
  cases.push_back(T("two trailing newlines", "x\n\n"));
  cases.push_back(T("crlf template", "a\r\n{% if true %}\r\n  b\r\n{% endif %}\r\nc\r\n"));
  cases.push_back(T("lone cr", "a\r{{ 1 }}\rb"));
  cases.push_back(T("tag at start", "{% if true %}\nx{% endif %}"));
  cases.push_back(T("comment then newline", "{# c #}\n{# d -#}  \n  x"));
  expect_same_as_jinja2(cases);
}

TEST(JinjaEngine, LiteralsAndPrinting) {
  expect_same_as_jinja2({
      T("ints", "{{ 1 }} {{ -0 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 9223372036854775807 }}"),
      T("floats",
        "{{ 1.0 }} {{ 1.5e3 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 2.5e-7 }} {{ 1_0.5 }}"),
      T("float repr", "{{ [1/3, 2/3, 100.0, 1e22, 1.7976931348623157e308, 5e-324, -0.0, 123456789.123] }}"),
      T("strings",
        R"({{ 'a\nb' }}|{{ "q\"q" }}|{{ 'it\'s' }}|{{ '\x41\u00e9\U0001F600' }}|{{ '\101\7' }}|{{ 'a' 'b' "c" }})"),
      T("unknown escape", R"({{ '\q\d' }}|{{ 'tab\there' }})"),
      T("repr in containers",
        R"({{ ['a', "it's", 'say "x"', 'both \' "', '\n\t\\', '\x00\x7f\xa0\u200b', 'é中😀'] }})"),
      T("constants", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [true, none] }}"),
      T("tuple list dict",
        "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ [] }} {{ {} }} {{ {'a': (1, [2])} }} {{ {1: 2, 1.5: none} }}"),
      T("tuple expression", "{{ 1, 2 }}"),
      T("variables", "{{ s }} {{ i }} {{ f }} {{ b }} {{ n }} {{ l }} {{ d }}",
        R"({"s": "text", "i": 42, "f": 2.5, "b": true, "n": null, "l": [1, "x", null, 1.0], "d": {"k": [true]}})"),
      T("json floats", "{{ a }} {{ b }} {{ c }} {{ d }}",
        R"({"a": 1e5, "b": 1.0, "c": 1e-7, "d": 12345678901234567890.0})"),
      T("undefined prints empty", "[{{ missing }}][{{ d.missing }}][{{ l[9] }}]", R"({"d": {}, "l": []})"),
      T("namespace repr", "{% set ns = namespace(a=1, b='x') %}{{ ns }}"),
      T("macro repr", "{% macro m() %}{% endmacro %}{{ m }}"),
      T("dict views", "{{ d.keys() }} {{ d.values() }} {{ d.items() }}", R"({"d": {"a": 1, "b": [2]}})"),
      T("loop repr", "{% for x in [1, 2] %}{{ loop }}{% endfor %}"),
  });
}

TEST(JinjaEngine, Operators) {
  expect_same_as_jinja2({
      T("arith",
        "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 "
        "}}"),
      T("mod signs",
        "{{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 7 // -2.0 }} {{ -0.0 // 1 }}"),
      T("pow", "{{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -1 }} {{ 2.0 ** 0.5 }} {{ 10 ** 18 }}"),
      T("mixed", "{{ 1 + 1.5 }} {{ true + 1 }} {{ true * 3 }} {{ 3 - false }} {{ 1 / 4 }}"),
      T("strings", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'x' * 0 }} {{ 'x' * -1 }}"),
      T("lists", "{{ [1] + [2, 3] }} {{ [0] * 3 }} {{ (1,) + (2,) }} {{ [1, 2] * 0 }}"),
      T("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ [1] ~ missing }}"),
      T("compare",
        "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ (1, 2) >= (1, 2) }}"),
      T("chained", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 == true }} {{ 'é' > 'z' }} {{ '中' > 'é' }}"),
      T("equality",
        "{{ 1 == 1.0 }} {{ [1] == [1.0] }} {{ (1,) == [1] }} {{ {'a': 1} == {'a': 1.0} }} {{ none == none }} "
        "{{ 'a' != 'b' }}"),
      T("in",
        "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in missing }} "
        "{{ '' in 'a' }}"),
      T("logic",
        "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or none }} {{ not 0 }} {{ not [] }} {{ not 'a' }}"),
      T("truthiness",
        "{% for v in [0, 1, 0.0, '', 'a', [], [0], {}, {'a': 1}, none, true] %}{{ 'T' if v else 'F' }}{% "
        "endfor %}"),
      T("precedence",
        "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ not 1 == 2 }} {{ 1 + 1 if false else 5 }} {{ "
        "-3|abs }}"),
      T("cond expr", "{{ 'y' if true else 'n' }} {{ 'y' if false }}|{{ 'a' if 0 else 'b' if 0 else 'c' }}"),
      T("generator truthy", "{{ 'T' if [] | select else 'F' }} {{ 'T' if [] | map('string') else 'F' }}"),
      T("unary", "{{ -(3) }} {{ +3 }} {{ -1.5 }} {{ - -2 }} {{ -true }}"),
      T("percent format",
        "{{ '%s and %s' % ('a', 1) }} {{ '%d%%' % 50 }} {{ '%5.2f|%-4d|%04d|%x' % (3.14159, 7, 42, 255) }} "
        "{{ '%(k)s' % {'k': 'v'} }} {{ '%r' % 'q' }}"),
  });
}

TEST(JinjaEngine, OperatorErrors) {
  expect_same_as_jinja2({
      T("str plus int", "{{ 'a' + 1 }}"),
      T("int plus str", "{{ 1 + 'a' }}"),
      T("undefined plus", "{{ missing + 1 }}"),
      T("div zero", "{{ 1 / 0 }}"),
      T("floordiv zero", "{{ 1 // 0 }}"),
      T("mod zero", "{{ 1.5 % 0 }}"),
      T("order mixed", "{{ 1 < 'a' }}"),
      T("order none", "{{ none < 1 }}"),
      T("in int", "{{ 1 in 5 }}"),
      T("int in str", "{{ 1 in 'abc' }}"),
      T("list minus", "{{ [1] - [1] }}"),
      T("list plus tuple", "{{ [1] + (2,) }}"),
      T("percent missing arg", "{{ '%s %s' % 'a' }}"),
      T("percent extra arg", "{{ '%s' % ('a', 'b') }}"),
      T("neg string", "{{ -'a' }}"),
  });
}

TEST(JinjaEngine, Filters) {
  const char* vars = R"({"users": [{"name": "bo", "age": 30, "tags": ["x"]}, {"name": "Al", "age": 25},
                        {"name": "cy", "age": 30, "admin": true}], "d": {"b": 1, "A": 2, "c": 0},
                        "words": "The quick  brown\tfox", "s": "  Hello World  "})";
  expect_same_as_jinja2({
      T("default",
        "{{ missing|default('d') }} {{ none|default('d') }} {{ ''|d('e', true) }} {{ 0|default(5, "
        "boolean=true) }} {{ 'x'|d }}",
        vars),
      T("length",
        "{{ users|length }} {{ 'héllo'|length }} {{ d|count }} {{ missing|length }} {{ users[0].tags|length "
        "}}",
        vars),
      T("trim", "[{{ s|trim }}] [{{ 'xxhixx'|trim('x') }}] [{{ missing|trim }}] [{{ '\u3000a\u00a0'|trim }}]",
        vars),
      T("case",
        "{{ 'hELLo wORLD'|upper }} {{ 'ÀÉÎ ΣΑΣ'|lower }} {{ 'hello world'|capitalize }} {{ 'ßtraße ǆ'|upper "
        "}}",
        vars),
      T("title",
        "{{ 'hello-world (x) [y] <z> o\\'neil'|title }} {{ \"it's 3rd\"|title }} {{ 'ǆemal ΣΑΣ'|title }}",
        vars),
      T("join",
        "{{ [1, 'a', none]|join(', ') }} {{ users|join('|', attribute='name') }} {{ 'abc'|join('-') }} {{ "
        "[]|join(',') }}",
        vars),
      T("first last",
        "{{ users|first }} {{ [1, 2]|last }} {{ 'abc'|first }} {{ []|first }}|{{ d|first }} {{ d|last }}",
        vars),
      T("list string",
        "{{ 'abc'|list }} {{ d|list }} {{ (1, 2)|list }} {{ 5|string }} {{ none|string }} {{ [1]|string }}",
        vars),
      T("numbers",
        "{{ '12'|int + 1 }} {{ '0x1A'|int(0, 16) }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '3.9'|int }} {{ "
        "3.9|int }} {{ '1e3'|float }} {{ 'nope'|float(1.5) }} {{ true|int }} {{ ' 42 '|int }} {{ '1_000'|int "
        "}}",
        vars),
      T("round",
        "{{ 3|round }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3.14159|round(3) }} {{ "
        "2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ 1234.5|round(-2) }} {{ 1250|round(-2) }} {{ "
        "-2.5|round }}",
        vars),
      T("abs", "{{ -3|abs }} {{ (-2.5)|abs }} {{ true|abs }}", vars),
      T("items dictsort",
        "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(by='value') }} {{ "
        "d|dictsort(reverse=true) }}",
        vars),
      T("sort",
        "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) "
        "}} {{ [3, 1]|sort(reverse=true) }}",
        vars),
      T("sort attribute",
        "{{ users|sort(attribute='age')|map(attribute='name')|join(',') }} {{ "
        "users|sort(attribute='age,name')|map(attribute='name')|join(',') }} {{ users|sort(attribute='name', "
        "reverse=true)|map(attribute='name')|list }}",
        vars),
      T("unique",
        "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ "
        "users|unique(attribute='age')|map(attribute='name')|list }} {{ [1, 1.0, true]|unique|list }}",
        vars),
      T("min max sum",
        "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ users|max(attribute='age') }} {{ "
        "[1, 2.5]|sum }} {{ users|sum(attribute='age') }} {{ []|max }}",
        vars),
      T("map",
        "{{ users|map(attribute='name')|list }} {{ [1, 2]|map('string')|list }} {{ ['a', "
        "'b']|map('upper')|join }} {{ users|map(attribute='admin', default=false)|list }} {{ "
        "users|map(attribute='tags.0')|list }}",
        vars),
      T("select reject",
        "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }} {{ [0, 1, '', "
        "'a']|select|list }} {{ [1, 5, 9]|select('gt', 3)|list }} {{ ['a', 'b']|select('in', ['b'])|list }}",
        vars),
      T("selectattr",
        "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ "
        "users|rejectattr('admin')|map(attribute='name')|list }} {{ users|selectattr('age', 'equalto', "
        "30)|map(attribute='name')|list }} {{ users|selectattr('name', 'in', ['Al'])|list|length }}",
        vars),
      T("reverse",
        "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ (1, 2)|reverse|join }} {{ [1, 2]|select|reverse "
        "}}",
        vars),
      T("replace",
        "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ "
        "5|replace('5', 'five') }}",
        vars),
      T("indent",
        "{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb\n'|indent('> ', blank=true) }}|{{ "
        "'x'|indent(first=true) }}",
        vars),
      T("wordcount truncate",
        "{{ words|wordcount }} {{ 'héllo wörld-x'|wordcount }} {{ 'a b c d e f g h'|truncate(9) }} {{ "
        "'abcdefghijkl'|truncate(9, true) }} {{ 'abc'|truncate(5) }} {{ 'one two three four'|truncate(11, "
        "false, '..', 0) }}",
        vars),
      T("center format",
        "[{{ 'ab'|center(7) }}] [{{ 'abc'|center(6) }}] {{ '%s-%03d'|format('a', 7) }} {{ "
        "'%(x)s'|format(x=1) }}",
        vars),
      T("batch slice",
        "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }} {{ [1, 2, 3, 4, "
        "5]|slice(2)|list }} {{ [1, 2, 3, 4]|slice(3, 'x')|list }}",
        vars),
      T("attr",
        "{{ users[0]|attr('name') }}|{{ 'a'|attr('upper') is defined }} {{ namespace(z=1)|attr('z') }}",
        vars),
      T("safe escape",
        "{{ '<b>'|safe }} {{ '<a href=\"x\">&'|escape }} {{ '<i>'|e }} {{ '<x>'|safe|e }} {{ '<'|forceescape "
        "}} {{ ('<a>'|safe + '<b>') }} {{ '<a>' ~ ('<b>'|safe) }}",
        vars),
      T("chained filters",
        "{{ users|map(attribute='name')|map('upper')|select('ne', 'AL')|sort|join('+')|lower|replace('+', ' "
        "') }}",
        vars),
      T("filter on expression",
        "{{ (1 + 2)|string ~ 'x' }} {{ -1|abs }} {{ [1, 2]|length > 1 }} {{ 'a' ~ 'b'|upper }}", vars),
  });
}

TEST(JinjaEngine, ToJson) {
  const char* vars =
      R"({"tools": [{"type": "function", "function": {"name": "get_weather", "description": "天气 é \"q\" \\ \n\t\u0001 😀",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
                        "nums": [1, -2, 1.0, 1.5e-7, 1e100, 0.1, 12345678901234567], "nested": {"z": {"b": [], "a": {}}, "a": null, "m": [true, false]}})";
  expect_same_as_jinja2({
      T("default", "{{ tools|tojson }}", vars),
      T("ensure_ascii", "{{ tools|tojson(ensure_ascii=true) }}", vars),
      T("indent",
        "{{ nested|tojson(indent=2) }}|{{ nested|tojson(indent=0) }}|{{ nested|tojson(indent='\t') }}|{{ "
        "[]|tojson(indent=2) }}",
        vars),
      T("separators",
        "{{ nested|tojson(separators=(',', ':')) }}|{{ nested|tojson(indent=1, separators=(';', '=')) }}",
        vars),
      T("sort_keys",
        "{{ nested|tojson(sort_keys=true) }} {{ tools|tojson(sort_keys=true, separators=(',', ':')) }}",
        vars),
      T("positional", "{{ 'é'|tojson(true) }} {{ [1]|tojson(false, 2) }}", vars),
      T("numbers", "{{ nums|tojson }} {{ (1/3)|tojson }} {{ 2**62|tojson }}", vars),
      T("scalars",
        "{{ none|tojson }} {{ true|tojson }} {{ 'x'|tojson }} {{ (1, 'a')|tojson }} {{ {1: 2, none: 3, 1.5: "
        "4, true: 5}|tojson }}",
        vars),
      T("markup", "{{ '<a>'|safe|tojson }}", vars),
      T("undefined fails", "{{ missing|tojson }}", vars),
      T("generator fails", "{{ [1]|select|tojson }}", vars),
      T("sort mixed keys fails", "{{ {1: 1, 'a': 2}|tojson(sort_keys=true) }}", vars),
  });
}

TEST(JinjaEngine, Tests) {
  const char* vars = R"({"s": "x", "i": 3, "f": 1.5, "n": null, "l": [1], "d": {"k": 1}, "b": true})";
  expect_same_as_jinja2({
      T("types",
        "{% for v in [s, i, f, n, l, d, b, missing] %}{{ v is defined }}{{ v is undefined }}{{ v is none "
        "}}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}{{ v is "
        "sequence }}{{ v is iterable }}{{ v is boolean }}{{ v is true }}{{ v is false }}{{ v is callable "
        "}};{% endfor %}",
        vars),
      T("numbers",
        "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 3.0 is odd }} "
        "{{ 2.5 is even }}",
        vars),
      T("comparisons",
        "{{ 3 is eq 3 }} {{ 3 is equalto(3) }} {{ 3 is ne 4 }} {{ 3 is gt 2 }} {{ 3 is ge 3 }} {{ 3 is lt 2 "
        "}} {{ 3 is le 3 }} {{ 3 is == 3 }} {{ 2 is greaterthan 1 }} {{ 1 is lessthan 2 }}",
        vars),
      T("in sameas",
        "{{ 1 is in [1, 2] }} {{ 'k' is in d }} {{ none is sameas none }} {{ true is sameas 1 }} {{ b is "
        "sameas true }}",
        vars),
      T("case",
        "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '12' is lower }} {{ 'ǅ' is upper "
        "}}",
        vars),
      T("not", "{{ s is not string }} {{ missing is not defined }} {{ not s is string }}", vars),
      T("filter test names",
        "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }}", vars),
      T("escaped", "{{ 'a'|safe is escaped }} {{ 'a' is escaped }}", vars),
      T("on attribute", "{{ d.k is defined }} {{ d.z is defined }} {{ d['k'] is number }} {{ l[0] is odd }}",
        vars),
      T("odd of string fails", "{{ 'a' is odd }}", vars),
      T("unknown test fails", "{{ 1 is frobnicated }}", vars),
      T("unknown test in if is lazy", "{% if false %}{{ 1 is frobnicated }}{% endif %}ok", vars),
  });
}

TEST(JinjaEngine, ForLoops) {
  const char* vars = R"({"items": ["a", "b", "c"], "d": {"x": 1, "y": 2}, "pairs": [[1, 2], [3, 4]]})";
  expect_same_as_jinja2({
      T("loop vars",
        "{% for i in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ "
        "loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }}{{ loop.depth0 }}[{{ loop.previtem "
        "}}|{{ loop.nextitem }}];{% endfor %}",
        vars),
      T("else",
        "{% for i in [] %}x{% else %}empty{% endfor %}{% for i in items %}{{ i }}{% else %}never{% endfor %}",
        vars),
      T("filtered",
        "{% for i in range(10) if i is odd %}{{ i }}/{{ loop.index }}/{{ loop.length }} {% endfor %}", vars),
      T("break continue",
        "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif "
        "%}{{ i }}{% endfor %}",
        vars),
      T("nested",
        "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index "
        "}};{% endfor %}",
        vars),
      T("unpack",
        "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in pairs %}{{ a + b }}{% endfor "
        "%}{% for k in d %}{{ k }}{% endfor %}",
        vars),
      T("string and dict iteration",
        "{% for ch in 'héllo' %}{{ ch }}.{% endfor %}{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}",
        vars),
      T("scoping",
        "{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}{{ i }}", vars),
      T("namespace escapes loop",
        "{% set ns = namespace(total=0, seen=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i "
        "%}{% set ns.seen = ns.seen + [i] %}{% endfor %}{{ ns.total }} {{ ns.seen }}",
        vars),
      T("cycle changed",
        "{% for i in [1, 1, 2, 3, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.changed(i) }}{% endfor %}", vars),
      T("loop over undefined", "{% for i in missing %}x{% else %}none{% endfor %}", vars),
      T("loop over generator",
        "{% for x in items|select('ne', 'b') %}{{ loop.index }}{{ x }}{{ loop.length }}{% endfor %}", vars),
      T("range forms",
        "{{ range(3)|list }} {{ range(2, 8, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ "
        "range(3)|length }} {{ range(5)[1] }}",
        vars),
      T("loop over none fails", "{% for i in none %}{% endfor %}", vars),
      T("loop over int fails", "{% for i in 3 %}{% endfor %}", vars),
      T("unpack mismatch fails", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", vars),
      T("range too big fails", "{{ range(100001)|length }}", vars),
      T("range step zero fails", "{{ range(1, 2, 0) }}", vars),
      T("break outside loop fails", "{% break %}", vars),
  });
}

TEST(JinjaEngine, Macros) {
  expect_same_as_jinja2({
      T("defaults",
        "{% macro m(a, b=a + 1, c='z') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 5) }}|{{ m(1, "
        "c='q') }}|{{ m(a=2) }}"),
      T("varargs kwargs",
        "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}"),
      T("missing arg is undefined",
        "{% macro m(a, b) %}[{{ a }}][{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}"),
      T("recursion",
        "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ "
        "fact(10) }}"),
      T("sees scope at call time",
        "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }}"),
      T("no loop vars", "{% macro m() %}[{{ i }}]{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}"),
      T("defined in loop", "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}"),
      T("local set", "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}"),
      T("returns string",
        "{% macro m() %}5{% endmacro %}{{ m() ~ 1 }} {{ m() + '1' }} {{ m()|int + 1 }} {{ m() is string }}"),
      T("namespace arg",
        "{% macro inc(ns) %}{% set ns.n = ns.n + 1 %}{% endmacro %}{% set ns = namespace(n=0) %}{{ inc(ns) "
        "}}{{ inc(ns) }}{{ ns.n }}"),
      T("whitespace in macro", "{% macro m(x) -%}\n  [{{ x }}]\n{%- endmacro %}\n{{ m(1) }}\n{{ m(2) }}"),
      T("too many args fails", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
      T("unknown kwarg fails", "{% macro m(a) %}{% endmacro %}{{ m(b=2) }}"),
      T("duplicate arg fails", "{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}"),
  });
}

TEST(JinjaEngine, Assignments) {
  expect_same_as_jinja2({
      T("set forms", "{% set a = 1 %}{% set b, c = 2, 3 %}{% set t = 1, 2 %}{{ a }}{{ b }}{{ c }}{{ t }}"),
      T("set in if leaks", "{% if true %}{% set x = 3 %}{% endif %}{{ x }}"),
      T("block set",
        "{% set x %}a{{ 1 }}b{% endset %}{{ x }}|{% set y | upper | replace('I', '1') %}hi{% endset %}{{ y "
        "}}"),
      T("filter block",
        "{% filter upper %}abc {{ 'd' }}{% endfilter %}|{% filter trim|title %}  x y  {% endfilter %}"),
      T("with",
        "{% set a = 0 %}{% with a = 1, b = 2 %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}{{ b }}{{ c "
        "}}"),
      T("namespace",
        "{% set ns = namespace(a=1) %}{% set ns.b = 'x' %}{{ ns.a }}{{ ns.b }}{{ ns.missing }}|{{ "
        "namespace({'k': 1}, j=2) }}"),
      T("print", "{% print 1, 'a' %}{% print [1] %}"),
      T("set shadows variable", "{% set messages = [1] %}{{ messages }}", R"({"messages": ["x"]})"),
      T("set on non-namespace fails", "{% set d = {} %}{% set d.a = 1 %}"),
      T("dict global", "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict({'z': 1}, y=2) }}"),
      T("strftime_now", "{{ strftime_now('%Y') }}|{{ strftime_now('') }}|{{ strftime_now('%%') }}"),
  });
}

TEST(JinjaEngine, AttributesAndSubscripts) {
  const char* vars =
      R"({"d": {"a": {"b": [10, 20, 30]}, "items": "key!", "get": 1, "_private": 2}, "l": [1, 2, 3, 4, 5], "s": "héllo wörld"})";
  expect_same_as_jinja2({
      T("access", "{{ d.a.b[1] }} {{ d['a']['b'][-1] }} {{ d.a.b.0 }} {{ l[0] }} {{ s[1] }} {{ s[-1] }}",
        vars),
      T("method beats key", "{{ d.items is defined }} {{ d['items'] }} {{ d.get('get') }} {{ d._private }}",
        vars),
      T("missing", "[{{ d.nope }}][{{ l[10] }}][{{ s[99] }}][{{ d['a']['zz'] }}][{{ l['x'] }}][{{ none.x }}]",
        vars),
      T("slices",
        "{{ l[1:3] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[:-1] }} {{ l[5:] }} {{ l[-1:0:-2] }} {{ "
        "s[::-1] }} {{ s[2:6] }} {{ (1, 2, 3)[1:] }}",
        vars),
      T("slice none", "{{ l[none:2] }} {{ l[1:none] }} {{ l[true:] }}", vars),
      T("slice dict fails", "{{ d[1:] }}", vars),
      T("slice with string fails", "{{ l['a':] }}", vars),
      T("slice generator fails", "{{ (l|select)[1:] }}", vars),
      T("string methods",
        "{{ s.upper() }} {{ s.title() }} {{ s.split() }} {{ s.split('l') }} {{ s.split('l', 1) }} {{ "
        "s.rsplit('l', 1) }} {{ s.replace('l', 'L') }} {{ s.find('w') }} {{ s.count('l') }} {{ "
        "s.startswith('hé') }} {{ s.endswith(('x', 'ld')) }}",
        vars),
      T("strip family",
        "[{{ '  x  '.strip() }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'xxyxx'.strip('x') "
        "}}][{{ 'abcba'.strip('ab') }}][{{ '\n\t x\u2003'.strip() }}]",
        vars),
      T("split whitespace",
        "{{ '  a  b \n c '.split() }} {{ ' a b c '.split(none, 1) }} {{ ' a b c '.rsplit(none, 1) }} {{ "
        "''.split() }} {{ ''.split(',') }} {{ 'a,,b'.split(',') }}",
        vars),
      T("more str methods",
        "{{ 'a-b-c'.partition('-') }} {{ 'a-b-c'.rpartition('-') }} {{ 'abc'.center(9, '*') }} {{ "
        "'7'.zfill(3) }} {{ '-7'.zfill(4) }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }} {{ "
        "'Hello'.swapcase() }} {{ 'pre_x'.removeprefix('pre_') }} {{ 'x.txt'.removesuffix('.txt') }}",
        vars),
      T("predicates",
        "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ 'a1'.isalnum() }} {{ ''.isdigit() }} {{ ' "
        "\t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'é'.isascii() }}",
        vars),
      T("find family",
        "{{ s.find('l', 3) }} {{ s.rfind('l') }} {{ s.index('w') }} {{ s.find('zz') }} {{ 'aaa'.count('aa') "
        "}} {{ 'abc'.count('') }} {{ s.startswith('llo', 2) }}",
        vars),
      T("splitlines", "{{ 'a\nb\r\nc\rd'.splitlines() }} {{ 'a\nb\n'.splitlines(true) }}", vars),
      T("format",
        "{{ '{} {}'.format(1, 'a') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}-{y}'.format(x=1, y=[2]) }} {{ "
        "'{:>5}|{:<4}|{:^5}|{:.2f}|{:03d}|{!r}'.format('a', 'b', 'c', 3.14159, 7, 's') }} {{ '{{}}'.format() "
        "}}",
        vars),
      T("join method", "{{ ', '.join(['a', 'b']) }} {{ ''.join('xyz') }} {{ '-'.join(d.a.b|map('string')) }}",
        vars),
      T("dict methods",
        "{{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.a.keys()|list }} {{ d.a.values()|list }} {{ "
        "d.items()|list|length }} {{ d.copy()|length }}",
        vars),
      T("list methods", "{{ l.count(2) }} {{ l.index(3) }} {{ l.copy() }} {{ (1, 1).count(1) }}", vars),
      T("undefined attribute fails", "{{ missing.attr }}", vars),
      T("undefined item fails", "{{ missing['k'] }}", vars),
      T("undefined call fails", "{{ missing() }}", vars),
      T("index error fails", "{{ l.index(99) }}", vars),
      T("join of ints fails", "{{ ', '.join([1, 2]) }}", vars),
  });
}

TEST(JinjaEngine, Sandbox) {
  const char* vars = R"({"l": [1], "d": {"a": 1}})";
  expect_same_as_jinja2({
      T("append", "{{ l.append(2) }}", vars),
      T("append in set", "{% set _ = l.append(2) %}{{ l }}", vars),
      T("pop", "{{ l.pop() }}", vars),
      T("list clear", "{{ l.clear() }}", vars),
      T("update", "{{ d.update({'b': 2}) }}", vars),
      T("setdefault", "{% set x = d.setdefault('b', 2) %}", vars),
      T("clear", "{{ d.clear() }}", vars),
      T("sort method", "{{ l.sort() }}", vars),
      T("dunder", "{{ ''.__class__ }}|{{ d.__class__ is defined }}", vars),
      T("dunder call", "{{ ''.__class__.__mro__ }}", vars),
      T("printing unsafe attribute is empty", "[{{ l.append }}][{{ l.append is defined }}]", vars),
      T("raise_exception", "{{ raise_exception('custom failure: ' ~ d.a) }}", vars),
      T("raise_exception in macro",
        "{% macro m() %}{{ raise_exception('from macro') }}{% endmacro %}a{{ m() }}", vars),
  });
}

TEST(JinjaEngine, SyntaxErrors) {
  expect_same_as_jinja2({
      T("unclosed if", "{% if true %}\nx\n"),
      T("unclosed for", "a\n{% for x in y %}"),
      T("unknown tag", "line1\n{% frobnicate %}"),
      T("unbalanced", "{{ (1 }}"),
      T("unexpected bracket", "\n\n{{ 1] }}"),
      T("missing end of comment", "a\n{# never closed"),
      T("bad token", "{{ 1 $ 2 }}"),
      T("unknown filter", "\n{{ 1|frobnicate }}"),
      T("unknown filter in if is lazy", "{% if false %}{{ 1|frobnicate }}{% endif %}ok"),
      T("unknown filter in condexpr is lazy", "{{ 'a' if true else 1|frobnicate }}"),
      T("unknown filter in taken branch fails", "{% if true %}{{ 1|frobnicate }}{% endif %}"),
      T("empty expression", "{{ }}"),
      T("else without if", "{% else %}"),
      T("endfor mismatch", "{% if true %}{% endfor %}"),
      T("unterminated string", "{{ 'abc }}"),
      T("chained is", "{{ 1 is odd is even }}"),
      T("default after non-default", "{% macro m(a=1, b) %}{% endmacro %}"),
      T("assign to literal", "{% set 1 = 2 %}"),
      T("unsupported include", "{% include 'x.jinja' %}"),
  });
}

// Checks that do not involve jinja2's output: rill's own limits and error messages.
TEST(JinjaEngine, ErrorsNameTheLine) {
  auto t = Template::parse("a\n{% set x = 1 %}\n{{ x.y.z }}\n", "t.jinja");
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto r = t->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("t.jinja:3:"), std::string::npos) << r.status().message();
  auto s = Template::parse("x\n\n{% if %}", "s.jinja");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("s.jinja:3:"), std::string::npos) << s.status().message();
  auto m = Template::parse("{% macro f() %}\n\n{{ raise_exception('boom') }}{% endmacro %}\n{{ f() }}", "m");
  ASSERT_TRUE(m.ok());
  auto mr = m->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(mr.ok());
  EXPECT_NE(mr.status().message().find("m:3: boom"), std::string::npos) << mr.status().message();
}

TEST(JinjaEngine, LimitsStopRunawayTemplates) {
  auto render = [](const std::string& src) {
    auto t = Template::parse(src, "limits");
    EXPECT_TRUE(t.ok()) << t.status().message();
    RenderLimits limits;
    limits.max_steps = 100000;
    limits.max_output_bytes = 1 << 20;
    return t->render(nlohmann::ordered_json::object(), limits);
  };
  auto deep = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("deeper"), std::string::npos) << deep.status().message();
  auto loops = render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_FALSE(loops.ok());
  EXPECT_NE(loops.status().message().find("iterations"), std::string::npos) << loops.status().message();
  auto big = render("{{ 'x' * 100000000 }}");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("bytes"), std::string::npos) << big.status().message();
  auto grow = render(
      "{% set ns = namespace(s='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = "
      "ns.s + ns.s %}{% endfor %}");
  ASSERT_FALSE(grow.ok());
  std::string nested = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(Template::parse(nested, "nested").ok());
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(Template::parse(blocks, "blocks").ok());
}

TEST(JinjaEngine, RejectsBadInput) {
  EXPECT_FALSE(Template::parse(std::string("{{ '\xff' }}"), "utf8").ok());
  auto t = Template::parse("{{ x }}", "vars");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(nlohmann::ordered_json::array()).ok());
  EXPECT_FALSE(t->render(nlohmann::ordered_json::parse(R"({"x": 18446744073709551615})")).ok());
}

}  // namespace
}  // namespace rill::text::jinja
