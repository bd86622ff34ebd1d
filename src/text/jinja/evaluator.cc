#include "text/jinja/evaluator.h"

#include "text/jinja/builtins.h"
#include "text/jinja/error.h"
#include "text/jinja/filters.h"
#include "text/jinja/methods.h"
#include "text/jinja/operators.h"
#include "text/jinja/tests.h"

namespace rill::text::jinja {

using namespace ast;  // NOLINT: the evaluator walks nothing but ast nodes

// One scope. Frames live on the C++ stack of the statement that opened them; a frame that defines a macro
// is also kept alive by the Interpreter so the macro can reach it for the rest of the render.
struct Frame {
  explicit Frame(const Frame* p) : parent(p) {}
  const Frame* parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find_local(std::string_view name) const {
    for (const auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(v));
  }
};

namespace {

// Sets a member for the lifetime of a scope, restoring it on every exit path (errors are exceptions here).
template <typename T>
class Restore {
 public:
  Restore(T& slot, T value) : slot_(slot), saved_(slot) { slot_ = value; }
  ~Restore() { slot_ = saved_; }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  T& slot_;
  T saved_;
};

std::shared_ptr<Frame> child_of(const std::shared_ptr<Frame>& parent) {
  return std::make_shared<Frame>(parent.get());
}

std::optional<int64_t> slice_part(const Value& v, bool& ok) {
  if (v.is_none()) return std::nullopt;
  if (!v.is_integral()) ok = false;
  return ok ? std::optional<int64_t>(v.as_int()) : std::nullopt;
}

bool is_indexable(const Value& v) {
  return v.is_string() || v.is_flavor(SeqFlavor::List) || v.is_flavor(SeqFlavor::Tuple) ||
         v.is_flavor(SeqFlavor::Range);
}

std::string no_attribute(const Value& obj, std::string_view name) {
  if (obj.is_none()) return fmt::format("'None' has no attribute '{}'", name);
  return fmt::format("'{} object' has no attribute '{}'", type_name(obj), name);
}

}  // namespace

Interpreter::Interpreter(const RenderLimits& limits, const DictData& variables)
    : limits_(limits), variables_(variables), globals_(make_globals()) {}

Interpreter::~Interpreter() = default;

std::string Interpreter::render(const TemplateNode& root) {
  std::string result;
  out_ = &result;
  auto frame = std::make_shared<Frame>(nullptr);
  exec_body(root.body, frame);
  return result;
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    fail("the template built a string of more than {} bytes (render limit)", limits_.max_output_bytes);
  }
}

void Interpreter::count_step() {
  if (++steps_ > limits_.max_steps) {
    fail("the template ran more than {} loop iterations and calls (render limit)", limits_.max_steps);
  }
}

void Interpreter::append(std::string_view text) {
  out_->append(text);
  check_size(out_->size());
}

// --- statements -------------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Frame>& frame) {
  for (const StmtPtr& s : body) {
    const Flow flow = exec(*s, frame);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  try {
    switch (s.kind) {
      case StmtKind::Output:
        exec_output(static_cast<const Output&>(s), frame);
        return Flow::Normal;
      case StmtKind::If:
        return exec_if(static_cast<const If&>(s), frame);
      case StmtKind::For:
        exec_for(static_cast<const For&>(s), frame);
        return Flow::Normal;
      case StmtKind::Set: {
        const auto& n = static_cast<const Set&>(s);
        assign(*n.target, eval(*n.value, frame), *frame);
        return Flow::Normal;
      }
      case StmtKind::SetBlock: {
        const auto& n = static_cast<const SetBlock&>(s);
        Value body = Value::string(capture(n.body, child_of(frame)));
        if (n.filter) body = eval_filter(static_cast<const Filter&>(*n.filter), frame, &body);
        assign(*n.target, body, *frame);
        return Flow::Normal;
      }
      case StmtKind::Macro:
        exec_macro_def(static_cast<const Macro&>(s), frame);
        return Flow::Normal;
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::With: {
        const auto& n = static_cast<const With&>(s);
        auto inner = child_of(frame);
        for (const auto& [target, value] : n.assignments) assign(*target, eval(*value, frame), *inner);
        return exec_body(n.body, inner);
      }
      case StmtKind::FilterBlock: {
        const auto& n = static_cast<const FilterBlock&>(s);
        const Value body = Value::string(capture(n.body, child_of(frame)));
        append(to_str(eval_filter(static_cast<const Filter&>(*n.filter), frame, &body)));
        return Flow::Normal;
      }
    }
  } catch (Error& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  }
  return Flow::Normal;
}

void Interpreter::exec_output(const Output& s, const std::shared_ptr<Frame>& frame) {
  for (const Output::Part& p : s.parts) {
    if (p.expr) {
      append(to_str(eval(*p.expr, frame)));
    } else {
      append(p.data);
    }
  }
}

Interpreter::Flow Interpreter::exec_if(const If& s, const std::shared_ptr<Frame>& frame) {
  for (const auto& [test, body] : s.branches) {
    if (truthy(eval(*test, frame))) return exec_body(body, frame);
  }
  return exec_body(s.else_body, frame);
}

void Interpreter::exec_for(const For& s, const std::shared_ptr<Frame>& frame) {
  const Value iterable = eval(*s.iter, frame);
  if (!iterable.is_undefined() && !iterable.is_string() && !iterable.is_dict() && !iterable.is_seq()) {
    fail("'{}' object is not iterable", type_name(iterable));
  }
  std::vector<Value> items = iterate(iterable);
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      count_step();
      auto f = child_of(frame);
      assign(*s.target, item, *f);
      if (truthy(eval(*s.filter, f))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, child_of(frame));
    return;
  }
  auto loop = std::make_shared<LoopState>();
  loop->items = items;
  for (size_t i = 0; i < items.size(); ++i) {
    count_step();
    loop->index0 = i;
    auto f = child_of(frame);
    f->set("loop", Value::loop(loop));
    assign(*s.target, items[i], *f);
    if (exec_body(s.body, f) == Flow::Break) break;
  }
}

void Interpreter::exec_macro_def(const Macro& m, const std::shared_ptr<Frame>& frame) {
  // The macro reads its defining scope at call time (like a Python closure), so that scope must outlive
  // this statement; the Interpreter owns it until the render ends (a frame -> macro -> frame cycle
  // through shared_ptr would leak).
  keep_alive_.push_back(frame);
  const Macro* node = &m;
  std::weak_ptr<Frame> scope = frame;
  frame->set(m.name,
             Value::function(m.name, Function::Kind::Macro, [node, scope](Interpreter& in, CallArgs& args) {
               return in.call_macro(*node, scope.lock(), args);
             }));
}

Value Interpreter::call_macro(const Macro& m, const std::shared_ptr<Frame>& scope, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth)
    fail("macro calls nested deeper than {} (render limit)", limits_.max_call_depth);
  count_step();
  const size_t n = m.params.size();
  if (args.positional.size() > n && !m.uses_varargs) {
    fail("macro '{}' takes not more than {} argument(s)", m.name, n);
  }
  auto frame = child_of(scope);
  std::vector<bool> used(args.keyword.size(), false);
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = m.params[i];
    std::optional<Value> v;
    if (i < args.positional.size()) v = args.positional[i];
    for (size_t k = 0; k < args.keyword.size(); ++k) {
      if (args.keyword[k].first != p) continue;
      if (v) fail("macro '{}' got multiple values for argument '{}'", m.name, p);
      v = args.keyword[k].second;
      used[k] = true;
    }
    const size_t first_default = n - m.defaults.size();
    if (!v && i >= first_default) v = eval(*m.defaults[i - first_default], frame);
    frame->set(p, v ? *v : Value::undefined(fmt::format("parameter '{}' was not provided", p)));
  }
  DictData extra_kwargs;
  for (size_t k = 0; k < args.keyword.size(); ++k) {
    if (used[k]) continue;
    if (!m.uses_kwargs) fail("macro '{}' takes no keyword argument '{}'", m.name, args.keyword[k].first);
    extra_kwargs.set(string_value(args.keyword[k].first), args.keyword[k].second);
  }
  if (m.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    frame->set("varargs", tuple_value(std::move(rest)));
  }
  if (m.uses_kwargs) frame->set("kwargs", Value::dict(std::move(extra_kwargs)));
  Restore<int> depth(call_depth_, call_depth_ + 1);
  return Value::string(capture(m.body, frame));
}

std::string Interpreter::capture(const Body& body, const std::shared_ptr<Frame>& frame) {
  std::string buffer;
  {
    Restore<std::string*> redirect(out_, &buffer);
    exec_body(body, frame);
  }
  return buffer;
}

void Interpreter::assign(const Expr& target, const Value& value, Frame& frame) {
  switch (target.kind) {
    case ExprKind::Name:
      frame.set(static_cast<const Name&>(target).name, value);
      return;
    case ExprKind::Tuple: {
      const auto& names = static_cast<const Sequence&>(target).items;
      const std::vector<Value> items = iterate(value);
      if (items.size() < names.size()) {
        fail("not enough values to unpack (expected {}, got {})", names.size(), items.size());
      }
      if (items.size() > names.size()) fail("too many values to unpack (expected {})", names.size());
      for (size_t i = 0; i < names.size(); ++i) assign(*names[i], items[i], frame);
      return;
    }
    case ExprKind::Getattr: {  // `set ns.attr = value`
      const auto& g = static_cast<const Getattr&>(target);
      const Value ns = lookup(static_cast<const Name&>(*g.object).name, frame);
      if (ns.kind() != Value::Kind::Namespace) fail("cannot assign attribute on non-namespace object");
      ns.as_namespace().attrs.set(string_value(g.attr), value);
      return;
    }
    default:
      fail("can't assign to this expression");
  }
}

// --- expressions ------------------------------------------------------------------------------------

Value Interpreter::lookup(std::string_view name, const Frame& frame) const {
  for (const Frame* f = &frame; f; f = f->parent) {
    if (const Value* v = f->find_local(name)) return *v;
  }
  if (const Value* v = variables_.find(name)) return *v;
  if (const Value* v = globals_.find(name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  try {
    return eval_inner(e, frame);
  } catch (Error& err) {
    if (err.line == 0) err.line = e.line;
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Frame>& frame) {
  switch (e.kind) {
    case ExprKind::Const:
      return static_cast<const Const&>(e).value;
    case ExprKind::Name:
      return lookup(static_cast<const Name&>(e).name, *frame);
    case ExprKind::Getattr: {
      const auto& g = static_cast<const Getattr&>(e);
      return getattr(eval(*g.object, frame), g.attr);
    }
    case ExprKind::Getitem:
      return eval_getitem(static_cast<const Getitem&>(e), frame);
    case ExprKind::Slice:
      fail("a slice is only valid inside []");
    case ExprKind::Call: {
      const auto& c = static_cast<const Call&>(e);
      const Value callee = eval(*c.callee, frame);
      CallArgs args = eval_args(c.args, frame);
      return call(callee, args);
    }
    case ExprKind::Filter:
      return eval_filter(static_cast<const Filter&>(e), frame, nullptr);
    case ExprKind::Test: {
      const auto& t = static_cast<const Test&>(e);
      const Value operand = eval(*t.operand, frame);
      CallArgs args = eval_args(t.args, frame);
      return Value::boolean(test(t.name, operand, args));
    }
    case ExprKind::Unary: {
      const auto& u = static_cast<const Unary&>(e);
      return unary_op(u.op, eval(*u.operand, frame));
    }
    case ExprKind::Binary: {
      const auto& b = static_cast<const Binary&>(e);
      const Value left = eval(*b.left, frame);
      return binary_op(*this, b.op, left, eval(*b.right, frame));
    }
    case ExprKind::And:
    case ExprKind::Or: {
      const auto& b = static_cast<const Binary&>(e);
      Value left = eval(*b.left, frame);
      if (truthy(left) == (e.kind == ExprKind::Or)) return left;
      return eval(*b.right, frame);
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*static_cast<const Not&>(e).operand, frame)));
    case ExprKind::Concat: {
      std::string out;
      for (const ExprPtr& p : static_cast<const Concat&>(e).parts) {
        out += to_str(eval(*p, frame));
        check_size(out.size());
      }
      return Value::string(std::move(out));
    }
    case ExprKind::Compare:
      return eval_compare(static_cast<const Compare&>(e), frame);
    case ExprKind::CondExpr: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (truthy(eval(*c.test, frame))) return eval(*c.then_expr, frame);
      if (c.else_expr) return eval(*c.else_expr, frame);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
    }
    case ExprKind::List:
    case ExprKind::Tuple:
      return eval_sequence(static_cast<const Sequence&>(e), frame);
    case ExprKind::Dict:
      return eval_dict(static_cast<const DictLit&>(e), frame);
  }
  fail("unknown expression");
}

Value Interpreter::eval_getitem(const Getitem& e, const std::shared_ptr<Frame>& frame) {
  const Value obj = eval(*e.object, frame);
  if (e.index->kind != ExprKind::Slice) return getitem(obj, eval(*e.index, frame));
  const auto& s = static_cast<const Slice&>(*e.index);
  const Value start = s.start ? eval(*s.start, frame) : Value::none();
  const Value stop = s.stop ? eval(*s.stop, frame) : Value::none();
  const Value step = s.step ? eval(*s.step, frame) : Value::none();
  if (obj.is_undefined()) fail(obj.as_undefined().message);
  // jinja2 compiles slicing to a plain Python subscript (not the sandbox's forgiving getitem), so a bad
  // slice raises instead of giving undefined.
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  if (!is_indexable(obj)) fail("'{}' object is not subscriptable", type_name(obj));
  bool ok = true;
  const auto a = slice_part(start, ok), b = slice_part(stop, ok), c = slice_part(step, ok);
  if (!ok) fail("slice indices must be integers or None or have an __index__ method");
  return slice_value(obj, a, b, c);
}

Value Interpreter::eval_compare(const Compare& e, const std::shared_ptr<Frame>& frame) {
  Value left = eval(*e.first, frame);
  for (const auto& [op, expr] : e.ops) {
    Value right = eval(*expr, frame);
    bool ok = false;
    if (op == "==")
      ok = equals(left, right);
    else if (op == "!=")
      ok = !equals(left, right);
    else if (op == "<")
      ok = compare(left, right) < 0;
    else if (op == "<=")
      ok = compare(left, right) <= 0;
    else if (op == ">")
      ok = compare(left, right) > 0;
    else if (op == ">=")
      ok = compare(left, right) >= 0;
    else if (op == "in")
      ok = contains(right, left);
    else
      ok = !contains(right, left);  // "notin"
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_filter(const Filter& f, const std::shared_ptr<Frame>& frame,
                               const Value* block_body) {
  Value operand;
  if (!f.operand) {
    operand = *block_body;
  } else if (block_body && f.operand->kind == ExprKind::Filter) {
    operand = eval_filter(static_cast<const Filter&>(*f.operand), frame, block_body);
  } else {
    operand = eval(*f.operand, frame);
  }
  CallArgs args = eval_args(f.args, frame);
  try {
    return filter(f.name, operand, args);
  } catch (Error& err) {
    if (err.line == 0) err.line = f.line;
    throw;
  }
}

Value Interpreter::eval_sequence(const Sequence& e, const std::shared_ptr<Frame>& frame) {
  std::vector<Value> items;
  items.reserve(e.items.size());
  for (const ExprPtr& item : e.items) items.push_back(eval(*item, frame));
  return Value::seq(std::move(items), e.kind == ExprKind::Tuple ? SeqFlavor::Tuple : SeqFlavor::List);
}

Value Interpreter::eval_dict(const DictLit& e, const std::shared_ptr<Frame>& frame) {
  DictData d;
  for (const auto& [k, v] : e.items) {
    Value key = eval(*k, frame);
    d.set(key, eval(*v, frame));
  }
  return Value::dict(std::move(d));
}

CallArgs Interpreter::eval_args(const CallArgsExpr& a, const std::shared_ptr<Frame>& frame) {
  CallArgs out;
  for (const ExprPtr& x : a.args) out.positional.push_back(eval(*x, frame));
  for (const auto& [k, x] : a.kwargs) out.keyword.emplace_back(k, eval(*x, frame));
  if (a.dyn_args) {
    for (Value& v : iterate(eval(*a.dyn_args, frame))) out.positional.push_back(std::move(v));
  }
  if (a.dyn_kwargs) {
    const Value d = eval(*a.dyn_kwargs, frame);
    if (!d.is_dict()) fail("argument after ** must be a mapping, not {}", type_name(d));
    for (const auto& [k, v] : d.as_dict().items()) {
      if (!k.is_string()) fail("keywords must be strings");
      out.keyword.emplace_back(k.as_string(), v);
    }
  }
  return out;
}

// --- the sandboxed environment's operations -------------------------------------------------------

Value Interpreter::call(const Value& callee, CallArgs& args) {
  switch (callee.kind()) {
    case Value::Kind::Function:
      return callee.as_function().call(*this, args);
    case Value::Kind::Undefined:
      fail(callee.as_undefined().message);
    case Value::Kind::Loop:
      fail("calling `loop` (recursive loops) is not supported by rill's Jinja engine");
    default:
      fail("'{}' object is not callable", type_name(callee));
  }
}

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail(obj.as_undefined().message);
  if (std::optional<Value> attr = builtin_attribute(obj, name)) return *attr;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return Value::undefined(no_attribute(obj, name));
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail(obj.as_undefined().message);
  if (obj.is_dict()) {
    const bool hashable = !key.is_dict() && !(key.is_seq() && !key.is_flavor(SeqFlavor::Tuple));
    if (hashable) {
      if (const Value* v = obj.as_dict().find(key)) return *v;
    }
  } else if (is_indexable(obj) && key.is_integral()) {
    const int64_t n = static_cast<int64_t>(length(obj));
    const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n) return obj.is_string() ? slice_value(obj, i, i + 1, 1) : obj.as_seq().items[i];
    return Value::undefined(fmt::format("'{} object' has no element {}", type_name(obj), key.as_int()));
  }
  // jinja2 falls back to an attribute of that name when item lookup fails.
  if (key.is_string()) {
    if (std::optional<Value> attr = builtin_attribute(obj, key.as_string())) return *attr;
  }
  return Value::undefined(fmt::format("'{} object' has no element {}", type_name(obj), repr(key)));
}

Value Interpreter::filter(std::string_view name, const Value& operand, CallArgs& args) {
  return apply_filter(*this, name, operand, args);
}

bool Interpreter::test(std::string_view name, const Value& operand, CallArgs& args) {
  return apply_test(*this, name, operand, args);
}

}  // namespace rill::text::jinja
