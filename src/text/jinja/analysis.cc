#include "text/jinja/analysis.h"

#include <set>
#include <string>

#include "text/jinja/error.h"
#include "text/jinja/filters.h"
#include "text/jinja/tests.h"

namespace rill::text::jinja {
namespace {

using namespace ast;  // NOLINT: this file reads nothing but ast nodes

void visit_expr(const Expr* e, bool soft, const ExprVisitor& fn);

void visit_args(const CallArgsExpr& a, bool soft, const ExprVisitor& fn) {
  for (const auto& x : a.args) visit_expr(x.get(), soft, fn);
  for (const auto& kv : a.kwargs) visit_expr(kv.second.get(), soft, fn);
  visit_expr(a.dyn_args.get(), soft, fn);
  visit_expr(a.dyn_kwargs.get(), soft, fn);
}

// Calls fn on every expression; `soft` marks those inside an if/elif test or body or a conditional
// expression, where jinja2 defers the unknown-filter check to run time.
void visit_expr(const Expr* e, bool soft, const ExprVisitor& fn) {
  if (!e) return;
  fn(*e, soft);
  switch (e->kind) {
    case ExprKind::Const:
    case ExprKind::Name:
      return;
    case ExprKind::Getattr:
      visit_expr(static_cast<const Getattr*>(e)->object.get(), soft, fn);
      return;
    case ExprKind::Getitem: {
      const auto* g = static_cast<const Getitem*>(e);
      visit_expr(g->object.get(), soft, fn);
      visit_expr(g->index.get(), soft, fn);
      return;
    }
    case ExprKind::Slice: {
      const auto* s = static_cast<const Slice*>(e);
      for (const Expr* p : {s->start.get(), s->stop.get(), s->step.get()}) visit_expr(p, soft, fn);
      return;
    }
    case ExprKind::Call:
      visit_expr(static_cast<const Call*>(e)->callee.get(), soft, fn);
      visit_args(static_cast<const Call*>(e)->args, soft, fn);
      return;
    case ExprKind::Filter:
      visit_expr(static_cast<const Filter*>(e)->operand.get(), soft, fn);
      visit_args(static_cast<const Filter*>(e)->args, soft, fn);
      return;
    case ExprKind::Test:
      visit_expr(static_cast<const Test*>(e)->operand.get(), soft, fn);
      visit_args(static_cast<const Test*>(e)->args, soft, fn);
      return;
    case ExprKind::Unary:
      visit_expr(static_cast<const Unary*>(e)->operand.get(), soft, fn);
      return;
    case ExprKind::Not:
      visit_expr(static_cast<const Not*>(e)->operand.get(), soft, fn);
      return;
    case ExprKind::Binary:
    case ExprKind::And:
    case ExprKind::Or:
      visit_expr(static_cast<const Binary*>(e)->left.get(), soft, fn);
      visit_expr(static_cast<const Binary*>(e)->right.get(), soft, fn);
      return;
    case ExprKind::Concat:
      for (const auto& p : static_cast<const Concat*>(e)->parts) visit_expr(p.get(), soft, fn);
      return;
    case ExprKind::Compare:
      visit_expr(static_cast<const Compare*>(e)->first.get(), soft, fn);
      for (const auto& op : static_cast<const Compare*>(e)->ops) visit_expr(op.second.get(), soft, fn);
      return;
    case ExprKind::CondExpr: {
      const auto* c = static_cast<const CondExpr*>(e);
      for (const Expr* p : {c->test.get(), c->then_expr.get(), c->else_expr.get()}) visit_expr(p, true, fn);
      return;
    }
    case ExprKind::List:
    case ExprKind::Tuple:
      for (const auto& p : static_cast<const Sequence*>(e)->items) visit_expr(p.get(), soft, fn);
      return;
    case ExprKind::Dict:
      for (const auto& [k, v] : static_cast<const DictLit*>(e)->items) {
        visit_expr(k.get(), soft, fn);
        visit_expr(v.get(), soft, fn);
      }
      return;
  }
}

void visit_statements(const Body& body, bool soft, const ExprVisitor& fn) {
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::Output:
        for (const auto& p : static_cast<const Output&>(*s).parts) visit_expr(p.expr.get(), soft, fn);
        break;
      case StmtKind::If: {
        const auto& n = static_cast<const If&>(*s);
        for (const auto& [test, b] : n.branches) {
          visit_expr(test.get(), true, fn);
          visit_statements(b, true, fn);
        }
        visit_statements(n.else_body, true, fn);
        break;
      }
      case StmtKind::For: {
        const auto& n = static_cast<const For&>(*s);
        visit_expr(n.iter.get(), soft, fn);
        visit_expr(n.filter.get(), false, fn);
        visit_statements(n.body, false, fn);
        visit_statements(n.else_body, false, fn);
        break;
      }
      case StmtKind::Set:
        visit_expr(static_cast<const Set&>(*s).value.get(), soft, fn);
        break;
      case StmtKind::SetBlock:
        visit_expr(static_cast<const SetBlock&>(*s).filter.get(), soft, fn);
        visit_statements(static_cast<const SetBlock&>(*s).body, false, fn);
        break;
      case StmtKind::Macro: {
        const auto& m = static_cast<const Macro&>(*s);
        for (const auto& d : m.defaults) visit_expr(d.get(), false, fn);
        visit_statements(m.body, false, fn);
        break;
      }
      case StmtKind::With:
        for (const auto& a : static_cast<const With&>(*s).assignments) visit_expr(a.second.get(), soft, fn);
        visit_statements(static_cast<const With&>(*s).body, false, fn);
        break;
      case StmtKind::FilterBlock:
        visit_expr(static_cast<const FilterBlock&>(*s).filter.get(), soft, fn);
        visit_statements(static_cast<const FilterBlock&>(*s).body, false, fn);
        break;
      case StmtKind::Break:
      case StmtKind::Continue:
        break;
    }
  }
}

bool is_key_const(const Expr* e, std::string_view key) {
  if (!e || e->kind != ExprKind::Const) return false;
  const Value& v = static_cast<const Const*>(e)->value;
  return v.is_string() && v.as_string() == key;
}

// x[key], x.key or x.get(key, ...)
bool reads_key(const Expr& e, std::string_view key) {
  switch (e.kind) {
    case ExprKind::Getitem:
      return is_key_const(static_cast<const Getitem&>(e).index.get(), key);
    case ExprKind::Getattr:
      return static_cast<const Getattr&>(e).attr == key;
    case ExprKind::Call: {
      const auto& c = static_cast<const Call&>(e);
      return c.callee->kind == ExprKind::Getattr && static_cast<const Getattr&>(*c.callee).attr == "get" &&
             !c.args.args.empty() && is_key_const(c.args.args[0].get(), key);
    }
    default:
      return false;
  }
}

class LoopFinder {
 public:
  explicit LoopFinder(std::string_view key) : key_(key) { names_.insert(std::string(key)); }

  // Two passes: the first collects variables assigned from a key read, the second finds loops over them.
  bool run(const Body& body) {
    collecting_ = true;
    walk(body);
    collecting_ = false;
    walk(body);
    return found_;
  }

 private:
  bool matches(const Expr& e) const {
    return reads_key(e, key_) || (e.kind == ExprKind::Name && names_.count(static_cast<const Name&>(e).name));
  }

  void walk(const Body& body) {
    for (const StmtPtr& s : body) walk(*s);
  }

  void walk(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Set: {
        const auto& n = static_cast<const Set&>(s);
        if (collecting_ && n.target->kind == ExprKind::Name && reads_key(*n.value, key_)) {
          names_.insert(static_cast<const Name&>(*n.target).name);
        }
        return;
      }
      case StmtKind::For: {
        const auto& n = static_cast<const For&>(s);
        if (!collecting_ && matches(*n.iter)) found_ = true;
        walk(n.body);
        walk(n.else_body);
        return;
      }
      case StmtKind::If:
        for (const auto& branch : static_cast<const If&>(s).branches) walk(branch.second);
        walk(static_cast<const If&>(s).else_body);
        return;
      case StmtKind::Macro:
        walk(static_cast<const Macro&>(s).body);
        return;
      case StmtKind::SetBlock:
        walk(static_cast<const SetBlock&>(s).body);
        return;
      case StmtKind::With:
        walk(static_cast<const With&>(s).body);
        return;
      case StmtKind::FilterBlock:
        walk(static_cast<const FilterBlock&>(s).body);
        return;
      case StmtKind::Output:
      case StmtKind::Break:
      case StmtKind::Continue:
        return;
    }
  }

  std::string_view key_;
  std::set<std::string, std::less<>> names_;
  bool collecting_ = false;
  bool found_ = false;
};

}  // namespace

void visit_expressions(const Body& body, bool soft, const ExprVisitor& fn) {
  visit_statements(body, soft, fn);
}

void check_filters_and_tests(const Body& body) {
  visit_statements(body, false, [](const Expr& e, bool soft) {
    if (soft) return;
    if (e.kind == ExprKind::Filter && !filter_exists(static_cast<const Filter&>(e).name)) {
      throw Error{fmt::format("No filter named '{}'.", static_cast<const Filter&>(e).name), e.line};
    }
    if (e.kind == ExprKind::Test && !test_exists(static_cast<const Test&>(e).name)) {
      throw Error{fmt::format("No test named '{}'.", static_cast<const Test&>(e).name), e.line};
    }
  });
}

bool loops_over(const TemplateNode& root, std::string_view key) {
  return LoopFinder(key).run(root.body);
}

}  // namespace rill::text::jinja
