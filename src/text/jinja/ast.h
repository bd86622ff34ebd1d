// The parsed template: jinja2's node types for the constructs rill supports. Nodes are immutable after
// parsing, so one parsed Template can render on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace rill::text::jinja::ast {

enum class ExprKind {
  Const,
  Name,
  Getattr,
  Getitem,
  Slice,
  Call,
  Filter,
  Test,
  Unary,
  Binary,
  Concat,
  Compare,
  And,
  Or,
  Not,
  CondExpr,
  List,
  Tuple,
  Dict,
};

struct Expr {
  Expr(ExprKind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Const : Expr {
  Const(int l, Value v) : Expr(ExprKind::Const, l), value(std::move(v)) {}
  Value value;
};

struct Name : Expr {
  Name(int l, std::string n) : Expr(ExprKind::Name, l), name(std::move(n)) {}
  std::string name;
};

// `a.b`; as an assignment target (`set ns.b = ...`) it is jinja2's NSRef.
struct Getattr : Expr {
  Getattr(int l, ExprPtr o, std::string a)
      : Expr(ExprKind::Getattr, l), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct Getitem : Expr {
  Getitem(int l, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::Getitem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;  // a Slice for `a[1:]`
};

struct Slice : Expr {
  explicit Slice(int l) : Expr(ExprKind::Slice, l) {}
  ExprPtr start, stop, step;  // each may be null
};

struct CallArgsExpr {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;    // *args
  ExprPtr dyn_kwargs;  // **kwargs
};

struct Call : Expr {
  Call(int l, ExprPtr c) : Expr(ExprKind::Call, l), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgsExpr args;
};

// `x | name(args)`; operand is null for the filter of `{% filter %}` / `{% set x | f %}` blocks, whose
// rendered body takes its place.
struct Filter : Expr {
  Filter(int l, ExprPtr o, std::string n)
      : Expr(ExprKind::Filter, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  CallArgsExpr args;
};

struct Test : Expr {
  Test(int l, ExprPtr o, std::string n)
      : Expr(ExprKind::Test, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  CallArgsExpr args;
};

struct Unary : Expr {
  Unary(int l, char o, ExprPtr e) : Expr(ExprKind::Unary, l), op(o), operand(std::move(e)) {}
  char op;  // '-' or '+'
  ExprPtr operand;
};

// Arithmetic (+ - * / // % **) and the short-circuit And/Or (op "and"/"or", kind And/Or).
struct Binary : Expr {
  Binary(ExprKind k, int l, std::string o, ExprPtr a, ExprPtr b)
      : Expr(k, l), op(std::move(o)), left(std::move(a)), right(std::move(b)) {}
  std::string op;
  ExprPtr left, right;
};

struct Concat : Expr {
  explicit Concat(int l) : Expr(ExprKind::Concat, l) {}
  std::vector<ExprPtr> parts;
};

// Chained comparison `a < b <= c`; ops are "==", "!=", "<", "<=", ">", ">=", "in", "notin".
struct Compare : Expr {
  Compare(int l, ExprPtr f) : Expr(ExprKind::Compare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> ops;
};

struct Not : Expr {
  Not(int l, ExprPtr e) : Expr(ExprKind::Not, l), operand(std::move(e)) {}
  ExprPtr operand;
};

struct CondExpr : Expr {
  CondExpr(int l, ExprPtr t, ExprPtr a, ExprPtr b)
      : Expr(ExprKind::CondExpr, l), test(std::move(t)), then_expr(std::move(a)), else_expr(std::move(b)) {}
  ExprPtr test, then_expr, else_expr;  // else_expr may be null: the result is then undefined
};

// List and Tuple literals (kind tells which); a Tuple is also an unpacking target.
struct Sequence : Expr {
  Sequence(ExprKind k, int l) : Expr(k, l) {}
  std::vector<ExprPtr> items;
};

struct DictLit : Expr {
  explicit DictLit(int l) : Expr(ExprKind::Dict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

// --- statements -------------------------------------------------------------------------------------

enum class StmtKind { Output, If, For, Set, SetBlock, Macro, Break, Continue, With, FilterBlock };

struct Stmt {
  Stmt(StmtKind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Template text and `{{ }}` expressions, in order: a part is either data or an expression.
struct Output : Stmt {
  explicit Output(int l) : Stmt(StmtKind::Output, l) {}
  struct Part {
    std::string data;
    ExprPtr expr;
  };
  std::vector<Part> parts;
};

struct If : Stmt {
  explicit If(int l) : Stmt(StmtKind::If, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif, elif, ...
  Body else_body;
};

struct For : Stmt {
  explicit For(int l) : Stmt(StmtKind::For, l) {}
  ExprPtr target, iter, filter;  // filter: `for x in xs if cond` (may be null)
  Body body, else_body;
};

struct Set : Stmt {
  Set(int l, ExprPtr t, ExprPtr v) : Stmt(StmtKind::Set, l), target(std::move(t)), value(std::move(v)) {}
  ExprPtr target, value;
};

struct SetBlock : Stmt {
  explicit SetBlock(int l) : Stmt(StmtKind::SetBlock, l) {}
  ExprPtr target;
  ExprPtr filter;  // may be null
  Body body;
};

struct Macro : Stmt {
  explicit Macro(int l) : Stmt(StmtKind::Macro, l) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_varargs = false;  // the body reads `varargs` / `kwargs`: extra arguments are accepted
  bool uses_kwargs = false;
};

struct LoopControl : Stmt {
  LoopControl(StmtKind k, int l) : Stmt(k, l) {}  // Break or Continue
};

struct With : Stmt {
  explicit With(int l) : Stmt(StmtKind::With, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;  // target = value
  Body body;
};

struct FilterBlock : Stmt {
  explicit FilterBlock(int l) : Stmt(StmtKind::FilterBlock, l) {}
  ExprPtr filter;
  Body body;
};

struct TemplateNode {
  Body body;
};

}  // namespace rill::text::jinja::ast
