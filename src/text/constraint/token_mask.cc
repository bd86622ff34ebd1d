#include "text/constraint/token_mask.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/thread_pool.h"

namespace rill::text::constraint {
namespace {

// Walks of fewer tokens than this stay on the calling thread (waking the pool costs more than they do).
constexpr size_t kMinParallelTokens = 4096;
constexpr size_t kMaxSplitDepth = 3;

}  // namespace

TokenMasker::TokenMasker(const Tokenizer& tokenizer) : vocab_size_(tokenizer.vocab_size()) {
  bytes_.resize(size_t(vocab_size_));
  special_.resize(size_t(vocab_size_));
  for (int32_t id = 0; id < vocab_size_; ++id) {
    special_[size_t(id)] = tokenizer.is_special(id);
    if (special_[size_t(id)]) {
      specials_.push_back(id);
    } else {
      bytes_[size_t(id)] = tokenizer.token_bytes(id);
      if (!bytes_[size_t(id)].empty()) sorted_.push_back(id);
    }
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
}

bool TokenMasker::advance(Matcher& m, int32_t token) const {
  if (token < 0 || token >= vocab_size_) return false;
  if (special_[size_t(token)]) return m.advance(special_symbol(token));
  return m.advance_bytes(bytes_[size_t(token)]);
}

void TokenMasker::mark(const Matcher& m, int32_t token, const Out& out) const {
  set_bit(out.mask, token);
  if (out.started.empty()) return;
  const int32_t n = m.min_started();
  if (n >= 0xffff) out.inexact->store(true, std::memory_order_relaxed);
  // Threads write different tokens' entries (bytes, so no word is shared between them).
  out.started[size_t(token)] = uint16_t(std::min(n, 0xffff));
}

template <typename Visit>
void TokenMasker::for_each_child(const Subtree& s, const Out& out, Visit&& visit) const {
  size_t lo = s.lo;
  // A token that ends here sorts first (a prefix sorts before its extensions).
  while (lo < s.hi && bytes_[size_t(sorted_[lo])].size() == s.depth) mark(s.m, sorted_[lo++], out);
  while (lo < s.hi) {
    const uint8_t c = uint8_t(bytes_[size_t(sorted_[lo])][s.depth]);
    // The group of tokens whose next byte is c.
    const size_t end =
        size_t(std::partition_point(sorted_.begin() + long(lo), sorted_.begin() + long(s.hi),
                                    [&](int32_t id) { return uint8_t(bytes_[size_t(id)][s.depth]) <= c; }) -
               sorted_.begin());
    if (s.m.can_advance(c)) {
      Subtree child{s.m.borrow(), lo, end, s.depth + 1};
      // can_advance looks at the next terminals only; a grammar whose every continuation after c is dead
      // would fail here (the builders avoid such dead ends), and its tokens must not be offered.
      if (child.m.advance(c)) visit(child);
      else if (child.m.over_work() && out.inexact) out.inexact->store(true, std::memory_order_relaxed);
    }
    lo = end;
  }
}

void TokenMasker::walk(const Subtree& s, const Out& out) const {
  for_each_child(s, out, [&](const Subtree& child) { walk(child, out); });
}

void TokenMasker::split(const Subtree& root, size_t limit, std::vector<Subtree>& parts, const Out& out) const {
  if (root.hi - root.lo <= limit || root.depth >= kMaxSplitDepth) {
    parts.push_back(root);
    return;
  }
  for_each_child(root, out, [&](const Subtree& child) { split(child, limit, parts, out); });
}

void TokenMasker::allowed(const Matcher& m, std::span<uint32_t> mask, bool parallel) const {
  walk_all(m, Out{mask, {}, nullptr}, parallel);
}

bool TokenMasker::allowed_counted(const Matcher& m, std::span<uint32_t> mask, std::span<uint16_t> started,
                                  bool parallel) const {
  std::atomic<bool> inexact{false};
  walk_all(m, Out{mask, started, &inexact}, parallel);
  return !inexact.load();
}

void TokenMasker::walk_all(const Matcher& m, const Out& out, bool parallel) const {
  const std::span<uint32_t> mask = out.mask;
  std::fill(mask.begin(), mask.end(), 0u);
  ThreadPool& pool = default_thread_pool();
  const Subtree all{m.borrow(), 0, sorted_.size(), 0};
  if (!parallel || pool.size() == 1) {
    walk(all, out);
  } else {
    // Subtrees of at most 1/8 of a thread's share, largest first, taken by whichever thread is free.
    std::vector<Subtree> parts;
    split(all, std::max<size_t>(sorted_.size() / (8 * size_t(pool.size())), 256), parts, out);
    size_t tokens = 0;
    for (const Subtree& s : parts) tokens += s.hi - s.lo;
    if (tokens < kMinParallelTokens) {
      for (const Subtree& s : parts) walk(s, out);
    } else {
      std::sort(parts.begin(), parts.end(),
                [](const Subtree& a, const Subtree& b) { return a.hi - a.lo > b.hi - b.lo; });
      // Each thread sets bits in its own mask (token ids under one prefix are scattered over the whole mask:
      // shared words would bounce between cores), OR-ed together at the end.
      std::vector<std::vector<uint32_t>> masks(size_t(pool.size()), std::vector<uint32_t>(mask.size(), 0u));
      std::atomic<size_t> next{0};
      pool.parallel_for(pool.size(), 1, [&](int64_t slot, int64_t) {
        const Out own{masks[size_t(slot)], out.started, out.inexact};
        for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < parts.size();)
          walk(parts[i], own);
      });
      for (const std::vector<uint32_t>& own : masks)
        for (size_t w = 0; w < mask.size(); ++w) mask[w] |= own[w];
    }
  }
  // A special token is allowed when a stack's top takes it (as can_advance says: not what follows). A counting
  // matcher's stacks have started nothing yet, and they are the stacks it stands for, so the same test holds
  // whatever the count: zero repetitions.
  for (int32_t id : specials_) {
    if (!m.can_advance(special_symbol(id))) continue;
    set_bit(mask, id);
    if (!out.started.empty()) out.started[size_t(id)] = 0;
  }
}

}  // namespace rill::text::constraint
