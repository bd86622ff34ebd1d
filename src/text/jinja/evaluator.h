// Interpreter: renders a parsed template. Scoping follows jinja2: `set` inside a for-loop body or a macro
// stays there (each iteration starts from the enclosing scope), `if` opens no scope, namespaces are the
// way to carry state out of loops, and a macro sees the scope it was defined in at call time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/render_limits.h"
#include "text/jinja/value.h"

namespace rill::text::jinja {

struct Frame;

class Interpreter {
 public:
  // variables: the render arguments (jinja2's context); they shadow the builtin globals.
  Interpreter(const RenderLimits& limits, const DictData& variables);
  ~Interpreter();

  std::string render(const ast::TemplateNode& root);

  // The sandboxed environment's operations, for filters, tests and builtins.
  Value call(const Value& callee, CallArgs& args);
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value filter(std::string_view name, const Value& operand, CallArgs& args);
  bool test(std::string_view name, const Value& operand, CallArgs& args);

  // Fails when a string the template builds would pass the output limit.
  void check_size(size_t bytes) const;
  // Counts one unit of work (an iteration, a call) against max_steps.
  void count_step();

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const ast::Body& body, const std::shared_ptr<Frame>& frame);
  Flow exec(const ast::Stmt& s, const std::shared_ptr<Frame>& frame);
  void exec_output(const ast::Output& s, const std::shared_ptr<Frame>& frame);
  Flow exec_if(const ast::If& s, const std::shared_ptr<Frame>& frame);
  void exec_for(const ast::For& s, const std::shared_ptr<Frame>& frame);
  void exec_macro_def(const ast::Macro& s, const std::shared_ptr<Frame>& frame);
  std::string capture(const ast::Body& body, const std::shared_ptr<Frame>& frame);
  void assign(const ast::Expr& target, const Value& value, Frame& frame);

  Value eval(const ast::Expr& e, const std::shared_ptr<Frame>& frame);
  Value eval_inner(const ast::Expr& e, const std::shared_ptr<Frame>& frame);
  Value eval_getitem(const ast::Getitem& e, const std::shared_ptr<Frame>& frame);
  Value eval_compare(const ast::Compare& e, const std::shared_ptr<Frame>& frame);
  Value eval_filter(const ast::Filter& e, const std::shared_ptr<Frame>& frame, const Value* block_body);
  Value eval_sequence(const ast::Sequence& e, const std::shared_ptr<Frame>& frame);
  Value eval_dict(const ast::DictLit& e, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const ast::CallArgsExpr& a, const std::shared_ptr<Frame>& frame);
  Value lookup(std::string_view name, const Frame& frame) const;
  Value call_macro(const ast::Macro& m, const std::shared_ptr<Frame>& scope, CallArgs& args);

  void append(std::string_view text);

  RenderLimits limits_;
  const DictData& variables_;
  DictData globals_;
  std::vector<std::shared_ptr<Frame>> keep_alive_;  // scopes that defined macros (see exec_macro_def)
  std::string* out_ = nullptr;  // where output goes: the result, or a macro's / set block's buffer
  int call_depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace rill::text::jinja
