#include "text/jinja/parser.h"

#include <initializer_list>

#include "text/jinja/analysis.h"
#include "text/jinja/error.h"
#include "text/jinja/lexer.h"

namespace rill::text::jinja {
namespace {

using namespace ast;  // NOLINT: this file builds nothing but ast nodes

constexpr int kMaxNesting = 200;  // deeper expressions or blocks are refused, not recursed into

using EndRules = std::initializer_list<std::string_view>;

// --- checks after parsing ---------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::unique_ptr<TemplateNode> parse() {
    auto root = std::make_unique<TemplateNode>();
    root->body = subparse({});
    return root;
  }

 private:
  // --- token helpers ---
  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool at_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool at_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool at_any_name(EndRules names) const {
    for (std::string_view n : names) {
      if (at_name(n)) return true;
    }
    return false;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!at_name(n)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail_here(std::string message) const { throw Error{std::move(message), cur().line}; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Data:
        return "template data";
      case TokenType::VariableBegin:
        return "begin of print statement";
      case TokenType::VariableEnd:
        return "end of print statement";
      case TokenType::BlockBegin:
        return "begin of statement block";
      case TokenType::BlockEnd:
        return "end of statement block";
      case TokenType::Eof:
        return "end of template";
      case TokenType::Name:
      case TokenType::Operator:
      case TokenType::Integer:
      case TokenType::Float:
        return t.text;
      case TokenType::String:
        return "string";
    }
    return "token";
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_here(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
  }
  void expect_type(TokenType type, std::string_view what) {
    if (cur().type != type) fail_here(fmt::format("expected {}, got '{}'", what, describe(cur())));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) fail_here(fmt::format("expected name, got '{}'", describe(cur())));
    return next().text;
  }
  void expect_name(std::string_view n) {
    if (!skip_name(n)) fail_here(fmt::format("expected '{}', got '{}'", n, describe(cur())));
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail_here("template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // --- statements ---
  Body subparse(EndRules end_rules) {
    DepthGuard guard(*this);
    Body body;
    std::unique_ptr<Output> output;
    auto flush = [&] {
      if (output) body.push_back(std::move(output));
    };
    auto out = [&]() -> Output& {
      if (!output) output = std::make_unique<Output>(cur().line);
      return *output;
    };
    while (cur().type != TokenType::Eof) {
      if (cur().type == TokenType::Data) {
        out().parts.push_back({next().text, nullptr});
      } else if (cur().type == TokenType::VariableBegin) {
        next();
        Output& o = out();
        o.parts.push_back({"", parse_tuple(false, true, {}, false, false)});
        expect_type(TokenType::VariableEnd, "end of print statement");
      } else {
        flush();
        next();  // BlockBegin
        if (end_rules.size() && at_any_name(end_rules)) return body;
        body.push_back(parse_statement());
        expect_type(TokenType::BlockEnd, "end of statement block");
      }
    }
    flush();
    if (end_rules.size()) {
      std::string wanted;
      for (std::string_view r : end_rules) wanted += (wanted.empty() ? "'" : " or '") + std::string(r) + "'";
      fail_here("Unexpected end of template. Jinja was looking for the following tags: " + wanted + ".");
    }
    return body;
  }

  Body parse_statements(EndRules end_rules, bool drop_needle) {
    skip_op(":");
    expect_type(TokenType::BlockEnd, "end of statement block");
    Body body = subparse(end_rules);
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::Name) fail_here("tag name expected");
    const std::string tag = cur().text;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "with") return parse_with();
    if (tag == "filter") return parse_filter_block();
    if (tag == "print") return parse_print();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_here(fmt::format("'{}' outside loop", tag));
      const int line = next().line;
      return std::make_unique<LoopControl>(tag == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    static constexpr std::string_view kUnsupported[] = {"block", "extends",    "include", "import", "from",
                                                        "call",  "autoescape", "do",      "trans"};
    for (std::string_view u : kUnsupported) {
      if (tag == u) fail_here(fmt::format("the '{}' tag is not supported by rill's Jinja engine", tag));
    }
    fail_here(fmt::format("Encountered unknown tag '{}'.", tag));
  }

  StmtPtr parse_for() {
    auto node = std::make_unique<For>(next().line);
    node->target = parse_assign_target(true, false, {"in"}, false);
    expect_name("in");
    node->iter = parse_tuple(false, false, {"recursive"}, false, false);
    if (skip_name("if")) node->filter = parse_expression(true);
    if (at_name("recursive")) fail_here("recursive for loops are not supported by rill's Jinja engine");
    ++loop_depth_;
    node->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") node->else_body = parse_statements({"endfor"}, true);
    return node;
  }

  StmtPtr parse_if() {
    auto node = std::make_unique<If>(next().line);
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      node->branches.emplace_back(std::move(test), std::move(body));
      const std::string& t = next().text;
      if (t == "elif") continue;
      if (t == "else") node->else_body = parse_statements({"endif"}, true);
      break;
    }
    return node;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    ExprPtr target = parse_assign_target(true, false, {}, true);
    if (skip_op("="))
      return std::make_unique<Set>(line, std::move(target), parse_tuple(false, true, {}, false, false));
    auto node = std::make_unique<SetBlock>(line);
    node->target = std::move(target);
    node->filter = parse_filter(nullptr, false);
    node->body = parse_statements({"endset"}, true);
    return node;
  }

  StmtPtr parse_macro() {
    auto node = std::make_unique<Macro>(next().line);
    node->name = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      if (!node->params.empty()) expect_op(",");
      node->params.push_back(expect_name());
      if (skip_op("=")) {
        node->defaults.push_back(parse_expression(true));
      } else if (!node->defaults.empty()) {
        fail_here("non-default argument follows default argument");
      }
    }
    expect_op(")");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // a macro body is its own function: `break` there is outside any loop
    node->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved_loops;
    // jinja2 lets a macro take extra arguments only when its body reads `varargs` / `kwargs`.
    visit_expressions(node->body, false, [&](const Expr& e, bool) {
      if (e.kind != ExprKind::Name) return;
      const std::string& n = static_cast<const Name&>(e).name;
      node->uses_varargs = node->uses_varargs || n == "varargs";
      node->uses_kwargs = node->uses_kwargs || n == "kwargs";
    });
    return node;
  }

  StmtPtr parse_with() {
    auto node = std::make_unique<With>(next().line);
    while (cur().type != TokenType::BlockEnd) {
      if (!node->assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(true, false, {}, false);
      expect_op("=");
      node->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    node->body = parse_statements({"endwith"}, true);
    return node;
  }

  StmtPtr parse_filter_block() {
    auto node = std::make_unique<FilterBlock>(next().line);
    node->filter = parse_filter(nullptr, true);
    node->body = parse_statements({"endfilter"}, true);
    return node;
  }

  StmtPtr parse_print() {
    auto node = std::make_unique<Output>(next().line);
    while (cur().type != TokenType::BlockEnd) {
      if (!node->parts.empty()) expect_op(",");
      node->parts.push_back({"", parse_expression(true)});
    }
    return node;
  }

  ExprPtr parse_assign_target(bool with_tuple, bool name_only, EndRules extra_end, bool with_namespace) {
    ExprPtr target;
    if (name_only) {
      const int line = cur().line;
      target = std::make_unique<Name>(line, expect_name());
    } else if (with_tuple) {
      target = parse_tuple(true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    check_assignable(*target);
    return target;
  }

  void check_assignable(const Expr& e) const {
    if (e.kind == ExprKind::Name) return;
    if (e.kind == ExprKind::Getattr && static_cast<const Getattr&>(e).object->kind == ExprKind::Name) return;
    if (e.kind == ExprKind::Tuple) {
      for (const auto& item : static_cast<const Sequence&>(e).items) check_assignable(*item);
      return;
    }
    throw Error{"can't assign to this expression", e.line};
  }

  // --- expressions ---
  bool is_tuple_end(EndRules extra_end) const {
    if (cur().type == TokenType::VariableEnd || cur().type == TokenType::BlockEnd || at_op(")")) return true;
    return at_any_name(extra_end);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, EndRules extra_end, bool explicit_parens,
                      bool with_namespace) {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail_here(fmt::format("Expected an expression, got '{}'", describe(cur())));
    }
    auto tuple = std::make_unique<Sequence>(ExprKind::Tuple, line);
    tuple->items = std::move(args);
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr test = parse_or();
      ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
      expr1 = std::make_unique<CondExpr>(line, std::move(test), std::move(expr1), std::move(expr3));
      line = cur().line;
    }
    return expr1;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      left = std::make_unique<Binary>(ExprKind::Or, line, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      left = std::make_unique<Binary>(ExprKind::And, line, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      return std::make_unique<Not>(line, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      static constexpr std::string_view kCompare[] = {"==", "!=", "<", "<=", ">", ">="};
      std::string op;
      for (std::string_view c : kCompare) {
        if (at_op(c)) op = c;
      }
      if (!op.empty()) {
        next();
      } else if (skip_name("in")) {
        op = "in";
      } else if (at_name("not") && look().type == TokenType::Name && look().text == "in") {
        next(), next();
        op = "notin";
      } else {
        break;
      }
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return first;
    auto node = std::make_unique<Compare>(line, std::move(first));
    node->ops = std::move(ops);
    return node;
  }

  ExprPtr parse_binary_level(std::initializer_list<std::string_view> ops, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (true) {
      std::string op;
      for (std::string_view o : ops) {
        if (at_op(o)) op = o;
      }
      if (op.empty()) return left;
      const int line = next().line;
      left = std::make_unique<Binary>(ExprKind::Binary, line, op, std::move(left), (this->*operand)());
    }
  }

  ExprPtr parse_math1() { return parse_binary_level({"+", "-"}, &Parser::parse_concat); }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!at_op("~")) return first;
    auto node = std::make_unique<Concat>(line);
    node->parts.push_back(std::move(first));
    while (skip_op("~")) node->parts.push_back(parse_math2());
    return node;
  }

  ExprPtr parse_math2() { return parse_binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      node = std::make_unique<Unary>(t.line, t.text[0], parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::Name: {
        const std::string name = next().text;
        if (name == "true" || name == "True") return std::make_unique<Const>(line, Value::boolean(true));
        if (name == "false" || name == "False") return std::make_unique<Const>(line, Value::boolean(false));
        if (name == "none" || name == "None") return std::make_unique<Const>(line, Value::none());
        if (with_namespace && skip_op(".")) {
          return std::make_unique<Getattr>(line, std::make_unique<Name>(line, name), expect_name());
        }
        return std::make_unique<Name>(line, name);
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) s += next().text;  // adjacent literals concatenate
        return std::make_unique<Const>(line, Value::string(std::move(s)));
      }
      case TokenType::Integer:
        return std::make_unique<Const>(line, Value::integer(next().int_value));
      case TokenType::Float:
        return std::make_unique<Const>(line, Value::floating(next().float_value));
      case TokenType::Operator:
        if (skip_op("(")) {
          ExprPtr e = parse_tuple(false, true, {}, true, false);
          expect_op(")");
          return e;
        }
        if (at_op("[")) return parse_list();
        if (at_op("{")) return parse_dict();
        break;
      default:
        break;
    }
    fail_here(fmt::format("unexpected '{}'", describe(t)));
  }

  ExprPtr parse_list() {
    auto node = std::make_unique<Sequence>(ExprKind::List, next().line);
    while (!at_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (at_op("]")) break;
      node->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return node;
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<DictLit>(next().line);
    while (!at_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (at_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return node;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    const int line = t.line;
    if (t.text == ".") {
      if (cur().type == TokenType::Name) return std::make_unique<Getattr>(line, std::move(node), next().text);
      if (cur().type != TokenType::Integer) fail_here("expected name or number");
      auto index = std::make_unique<Const>(cur().line, Value::integer(next().int_value));
      return std::make_unique<Getitem>(line, std::move(node), std::move(index));
    }
    std::vector<ExprPtr> args;
    while (!at_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1) return std::make_unique<Getitem>(line, std::move(node), std::move(args[0]));
    auto tuple = std::make_unique<Sequence>(ExprKind::Tuple, line);
    tuple->items = std::move(args);
    return std::make_unique<Getitem>(line, std::move(node), std::move(tuple));
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    auto slice = std::make_unique<Slice>(line);
    if (!skip_op(":")) {
      ExprPtr e = parse_expression(true);
      if (!skip_op(":")) return e;
      slice->start = std::move(e);
    }
    auto part = [&]() -> ExprPtr {
      if (at_op("]") || at_op(",") || at_op(":")) return nullptr;
      return parse_expression(true);
    };
    slice->stop = part();
    if (skip_op(":")) slice->step = part();
    return slice;
  }

  CallArgsExpr parse_call_args() {
    CallArgsExpr a;
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_here("invalid syntax for function call expression");
    };
    while (!at_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (at_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!a.dyn_args && !a.dyn_kwargs);
        a.dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!a.dyn_kwargs);
        a.dyn_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::Name && look().type == TokenType::Operator && look().text == "=") {
        ensure(!a.dyn_kwargs);
        std::string key = next().text;
        next();
        a.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!a.dyn_args && !a.dyn_kwargs && a.kwargs.empty());
        a.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto node = std::make_unique<Call>(cur().line, std::move(callee));
    node->args = parse_call_args();
    return node;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (at_op("|") || start_inline) {
      if (!start_inline) next();
      const int line = cur().line;
      auto f = std::make_unique<Filter>(line, std::move(node), parse_dotted_name());
      if (at_op("(")) f->args = parse_call_args();
      node = std::move(f);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;
    const bool negated = skip_name("not");
    auto t = std::make_unique<Test>(line, std::move(node), parse_dotted_name());
    const TokenType ty = cur().type;
    if (at_op("(")) {
      t->args = parse_call_args();
    } else if ((ty == TokenType::Name || ty == TokenType::String || ty == TokenType::Integer ||
                ty == TokenType::Float || at_op("[") || at_op("{")) &&
               !at_any_name({"else", "or", "and"})) {
      if (at_name("is")) fail_here("You cannot chain multiple tests with is");
      t->args.args.push_back(parse_postfix(parse_primary(false)));
    }
    if (negated) return std::make_unique<Not>(line, std::move(t));
    return t;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<ast::TemplateNode> parse_template(std::string_view source) {
  auto root = Parser(tokenize(source)).parse();
  check_filters_and_tests(root->body);
  return root;
}

}  // namespace rill::text::jinja
