#include "text/constraint/grammar.h"

#include <algorithm>

namespace rill::text::constraint {

// ---- builder ----

NodeId GrammarBuilder::add(Node n) {
  if (over_limit_.ok()) {
    literal_bytes_ += n.bytes.size();
    if (nodes_.size() >= limits_.max_nodes)
      over_limit_ = invalid_argument("the grammar needs more than {} nodes", limits_.max_nodes);
    else if (literal_bytes_ > limits_.max_literal_bytes)
      over_limit_ =
          invalid_argument("the grammar's literal texts exceed {} bytes", limits_.max_literal_bytes);
    else if (n.kind == Node::Kind::Alt && n.children.size() > limits_.max_alternatives)
      over_limit_ = invalid_argument("a choice of {} alternatives exceeds the limit of {}", n.children.size(),
                                     limits_.max_alternatives);
  }
  if (!over_limit_.ok()) return 0;
  nodes_.push_back(std::move(n));
  return NodeId(nodes_.size() - 1);
}

NodeId GrammarBuilder::bytes(std::string_view text) {
  if (text.empty()) return empty();
  Node n;
  n.kind = Node::Kind::Bytes;
  n.bytes = std::string(text);
  return add(std::move(n));
}

NodeId GrammarBuilder::special(int32_t token_id) {
  Node n;
  n.kind = Node::Kind::Special;
  n.token = token_id;
  return add(std::move(n));
}

NodeId GrammarBuilder::byte_class(const std::bitset<256>& set) {
  Node n;
  n.kind = Node::Kind::ByteClass;
  n.byte_class = set;
  return add(std::move(n));
}

NodeId GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  std::bitset<256> set;
  for (int c = lo; c <= hi; ++c) set.set(size_t(c));
  return byte_class(set);
}

NodeId GrammarBuilder::seq(std::vector<NodeId> children) {
  Node n;
  n.kind = Node::Kind::Seq;
  n.children = std::move(children);
  return add(std::move(n));
}

NodeId GrammarBuilder::alt(std::vector<NodeId> children) {
  if (children.size() == 1) return children[0];
  Node n;
  n.kind = Node::Kind::Alt;
  n.children = std::move(children);
  return add(std::move(n));
}

NodeId GrammarBuilder::repeat(NodeId child, int32_t min, int32_t max) {
  Node n;
  n.kind = Node::Kind::Repeat;
  n.children = {child};
  n.min = min;
  n.max = max;
  return add(std::move(n));
}

// One terminal rather than the nine-way choice of RFC 3629's table: a JSON string is a repeat of these, and
// one parse stack per position instead of nine is most of what a vocabulary walk costs there.
NodeId GrammarBuilder::utf8_char(std::string_view excluded_ascii) {
  Node n;
  n.kind = Node::Kind::Utf8Char;
  for (int c = 0x20; c < 0x80; ++c) n.byte_class.set(size_t(c));
  for (char c : excluded_ascii) n.byte_class.reset(uint8_t(c));
  return add(std::move(n));
}

NodeId GrammarBuilder::any_bytes() {
  std::bitset<256> all;
  all.set();
  return repeat(byte_class(all), 0, -1);
}

NodeId GrammarBuilder::declare_rule() {
  Node n;
  n.kind = Node::Kind::Rule;
  return add(std::move(n));
}

void GrammarBuilder::define_rule(NodeId rule, NodeId body) {
  if (over_limit_.ok()) nodes_[size_t(rule)].children = {body};
}

namespace {

// Whether a node can match the empty string (a fixed point, so recursive rules settle).
std::vector<bool> nullable_nodes(const std::vector<Node>& nodes) {
  std::vector<bool> nullable(nodes.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nullable[i]) continue;
      const Node& n = nodes[i];
      bool v = false;
      switch (n.kind) {
        case Node::Kind::Bytes:
        case Node::Kind::Special:
        case Node::Kind::ByteClass:
        case Node::Kind::Utf8Char: v = false; break;
        case Node::Kind::Seq:
          v = std::all_of(n.children.begin(), n.children.end(), [&](NodeId c) { return bool(nullable[size_t(c)]); });
          break;
        case Node::Kind::Alt:
          v = std::any_of(n.children.begin(), n.children.end(), [&](NodeId c) { return bool(nullable[size_t(c)]); });
          break;
        case Node::Kind::Repeat: v = n.min == 0 || nullable[size_t(n.children[0])]; break;
        case Node::Kind::Rule: v = !n.children.empty() && nullable[size_t(n.children[0])]; break;
      }
      if (v) nullable[i] = true, changed = true;
    }
  }
  return nullable;
}

}  // namespace

Result<std::shared_ptr<const Grammar>> GrammarBuilder::build(NodeId root) {
  RILL_TRY(over_limit_);
  const NodeId n_nodes = NodeId(nodes_.size());
  if (root < 0 || root >= n_nodes) return invalid_argument("grammar: root node {} out of range", root);
  for (NodeId i = 0; i < n_nodes; ++i) {
    const Node& n = nodes_[size_t(i)];
    if (n.kind == Node::Kind::Rule && n.children.empty()) return invalid_argument("grammar: rule {} is never defined", i);
    for (NodeId c : n.children)
      if (c < 0 || c >= n_nodes) return invalid_argument("grammar: node {} refers to node {} out of range", i, c);
    if (n.kind == Node::Kind::Repeat && n.max >= 0 && n.max < n.min)
      return invalid_argument("grammar: repeat node {} has max {} < min {}", i, n.max, n.min);
  }
  const std::vector<bool> nullable = nullable_nodes(nodes_);
  for (NodeId i = 0; i < n_nodes; ++i) {
    const Node& n = nodes_[size_t(i)];
    if (n.kind == Node::Kind::Repeat && n.max < 0 && nullable[size_t(n.children[0])])
      return invalid_argument("grammar: unbounded repeat node {} has a child that matches the empty string", i);
  }
  auto g = std::make_shared<Grammar>();
  g->nodes_ = nodes_;
  g->nullable_ = nullable;
  g->root_ = root;
  std::shared_ptr<const Grammar> grammar = std::move(g);
  if (Matcher(grammar).truncated())
    return invalid_argument("the grammar can start in more than {} ways (choices that share choices)",
                            kMaxExpandWork);
  return grammar;
}

// ---- matcher ----

namespace {

// Utf8Char progress in a frame's pos: 0 before the first byte, else (bytes still due << 16) | (lowest << 8) |
// highest allowed next byte. RFC 3629's table: the second byte's range depends on the first (no overlong
// forms, no surrogates, nothing above U+10FFFF).
constexpr int32_t utf8_pos(int due, int lo, int hi) { return (due << 16) | (lo << 8) | hi; }

// Whether byte s continues a Utf8Char at `pos`; *next is the new pos, or -1 when the character is complete.
bool utf8_step(const Node& n, int32_t pos, Symbol s, int32_t* next) {
  if (s >= kSpecialBase) return false;
  if (pos != 0) {
    const int due = pos >> 16, lo = (pos >> 8) & 0xff, hi = pos & 0xff;
    if (s < lo || s > hi) return false;
    *next = due == 1 ? -1 : utf8_pos(due - 1, 0x80, 0xBF);
    return true;
  }
  if (s < 0x80) {
    *next = -1;
    return n.byte_class.test(size_t(s));
  }
  if (s >= 0xC2 && s <= 0xDF) *next = utf8_pos(1, 0x80, 0xBF);
  else if (s == 0xE0) *next = utf8_pos(2, 0xA0, 0xBF);
  else if (s == 0xED) *next = utf8_pos(2, 0x80, 0x9F);
  else if (s >= 0xE1 && s <= 0xEF) *next = utf8_pos(2, 0x80, 0xBF);
  else if (s == 0xF0) *next = utf8_pos(3, 0x90, 0xBF);
  else if (s == 0xF4) *next = utf8_pos(3, 0x80, 0x8F);
  else if (s >= 0xF1 && s <= 0xF3) *next = utf8_pos(3, 0x80, 0xBF);
  else return false;
  return true;
}

// Deeper than any grammar rill builds needs (JSON nesting adds a few frames per level); a guard against
// a left-recursive rule, which build() does not detect.
constexpr int kMaxExpandDepth = 4096;
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : owner_(std::move(grammar)), g_(owner_.get()) {
  size_t work = 0;
  expand(Stack{{g_->root(), 0}}, stacks_, 0, work);
  truncated_ = work > kMaxExpandWork;
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

Matcher Matcher::borrow() const {
  Matcher m;
  m.g_ = g_;
  m.stacks_ = stacks_;
  m.base_ = base_;
  m.truncated_ = truncated_;
  return m;
}

std::optional<Matcher> Matcher::counting(NodeId repeat, int32_t count) const {
  if (is_counting()) return std::nullopt;
  Matcher m = *this;
  m.base_ = 1;
  for (Stack& s : m.stacks_) {
    int marked = 0;
    for (Frame& f : s)
      if (f.node == repeat && f.pos == count) f.pos = kCountedPos, ++marked;
    if (marked > 1) return std::nullopt;
    s.insert(s.begin(), Frame{kCounterNode, 0});
  }
  // Marking maps distinct stacks to distinct stacks (only frames at `count` change), so the order is the
  // only thing to restore.
  std::sort(m.stacks_.begin(), m.stacks_.end());
  return m;
}

int32_t Matcher::min_started() const {
  int32_t n = INT32_MAX;
  for (const Stack& s : stacks_) n = std::min(n, s[0].pos);
  return n;
}

// Replaces non-terminal tops until every stack's top is a terminal or the stack is empty (complete).
void Matcher::expand(Stack s, std::vector<Stack>& out, int depth, size_t& work) const {
  if (depth > kMaxExpandDepth) return;
  for (;;) {
    if (++work > kMaxExpandWork) return;
    if (done(s)) {
      out.push_back(std::move(s));
      return;
    }
    const Frame f = s.back();
    const Node& n = g_->node(f.node);
    switch (n.kind) {
      case Node::Kind::Bytes:
      case Node::Kind::Special:
      case Node::Kind::ByteClass:
      case Node::Kind::Utf8Char: out.push_back(std::move(s)); return;
      case Node::Kind::Seq:
        if (size_t(f.pos) == n.children.size()) {
          s.pop_back();
        } else {
          s.back().pos++;
          if (size_t(s.back().pos) == n.children.size()) s.pop_back();  // tail call: nothing left to resume
          s.push_back({n.children[size_t(f.pos)], 0});
        }
        continue;
      case Node::Kind::Rule: s.back() = {n.children[0], 0}; continue;
      case Node::Kind::Alt:
        s.pop_back();
        for (size_t i = 0; i + 1 < n.children.size(); ++i) {
          Stack alt = s;
          alt.push_back({n.children[i], 0});
          expand(std::move(alt), out, depth + 1, work);
        }
        if (n.children.empty()) return;  // matches nothing
        s.push_back({n.children.back(), 0});
        continue;
      case Node::Kind::Repeat: {
        s.pop_back();
        if (f.pos == kCountedPos) {
          // Counting: another repetition whatever the count (the stack's counter says how many were started;
          // the owner of the count compares it with what was left), or stop here.
          Stack more = s;
          more.push_back(f);
          more.push_back({n.children[0], 0});
          ++more[0].pos;
          expand(std::move(more), out, depth + 1, work);
          continue;
        }
        const int32_t done = f.pos;
        if (n.max < 0 || done < n.max) {
          Stack more = s;
          // Once unbounded and past min, every count behaves the same: keep the count at min so states meet.
          more.push_back({f.node, n.max < 0 ? std::min(done + 1, n.min) : done + 1});
          more.push_back({n.children[0], 0});
          if (done >= n.min) {
            expand(std::move(more), out, depth + 1, work);
            continue;  // and also stop here: `s` (the repeat popped) carries on
          }
          s = std::move(more);  // below min: another repetition is the only way on
        }
        continue;
      }
    }
  }
}

bool Matcher::step(Symbol sym, std::vector<Stack>& out, bool& over_work) const {
  out.clear();
  size_t work = 0;
  for (const Stack& st : stacks_) {
    if (done(st)) continue;
    const Frame f = st.back();
    const Node& n = g_->node(f.node);
    bool ok = false;
    int32_t utf8_next = -1;
    switch (n.kind) {
      case Node::Kind::Bytes: ok = sym < kSpecialBase && uint8_t(n.bytes[size_t(f.pos)]) == sym; break;
      case Node::Kind::Special: ok = sym == special_symbol(n.token); break;
      case Node::Kind::ByteClass: ok = sym < kSpecialBase && n.byte_class.test(size_t(sym)); break;
      case Node::Kind::Utf8Char: ok = utf8_step(n, f.pos, sym, &utf8_next); break;
      default: break;
    }
    if (!ok) continue;
    Stack next = st;
    if (utf8_next >= 0) {
      next.back().pos = utf8_next;
      out.push_back(std::move(next));  // inside a multi-byte character
      continue;
    }
    if (n.kind == Node::Kind::Bytes && size_t(f.pos) + 1 < n.bytes.size()) {
      next.back().pos++;
      out.push_back(std::move(next));  // still inside a terminal: nothing to expand
      continue;
    }
    next.pop_back();
    expand(std::move(next), out, 0, work);
    // Past the budget the new state would be missing parses: the symbol is refused instead (tokens that
    // lead there are not offered), so a mask's cost stays bounded whatever the grammar.
    if (work > kMaxExpandWork) return over_work = true, false;
  }
  if (out.empty()) return false;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return true;
}

bool Matcher::advance(Symbol s) {
  std::vector<Stack> next;
  if (!step(s, next, over_work_)) return false;
  stacks_ = std::move(next);
  return true;
}

bool Matcher::advance_bytes(std::string_view text) {
  Matcher trial = *this;
  for (char c : text)
    if (!trial.advance(uint8_t(c))) return false;
  *this = std::move(trial);
  return true;
}

bool Matcher::can_advance(Symbol s) const {
  for (const Stack& st : stacks_) {
    if (done(st)) continue;
    const Frame f = st.back();
    const Node& n = g_->node(f.node);
    switch (n.kind) {
      case Node::Kind::Bytes:
        if (s < kSpecialBase && uint8_t(n.bytes[size_t(f.pos)]) == s) return true;
        break;
      case Node::Kind::Special:
        if (s == special_symbol(n.token)) return true;
        break;
      case Node::Kind::ByteClass:
        if (s < kSpecialBase && n.byte_class.test(size_t(s))) return true;
        break;
      case Node::Kind::Utf8Char: {
        int32_t next;
        if (utf8_step(n, f.pos, s, &next)) return true;
        break;
      }
      default: break;
    }
  }
  return false;
}

bool Matcher::is_complete() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [&](const Stack& s) { return done(s); });
}

bool Matcher::is_finished() const {
  return std::all_of(stacks_.begin(), stacks_.end(), [&](const Stack& s) { return done(s); });
}

}  // namespace rill::text::constraint
