// The lane arithmetic of the decode router's block selection (route.cu moe_select_wide_kernel), host and
// device: the key order, and at each step of its networks which lane a lane compares with and which key of
// the pair it keeps. No CUDA headers, so the CPU test binary runs the whole selection over lanes held in
// arrays against a brute-force top-k (tests/backend/cpu/moe_select_network_test.cc).
#pragma once

#if defined(__CUDACC__)
#define RILL_SELECT_HD __host__ __device__
#else
#define RILL_SELECT_HD
#endif

namespace rill::cuda::moe {

// A CTA of 8 warps, an expert a thread; each warp's best eight go to warp 0's merge.
constexpr int kSelectWideThreads = 256, kSelectWideTopK = 8;
constexpr int kSelectWideCandidates = kSelectWideThreads / 32 * kSelectWideTopK;  // 64: the warps' best eight

// The selection's order on (score, expert id) keys: the higher score, then the lower id. The callers turn NaN
// scores and ids past E into (-inf, INT_MAX), so it is a total order on the keys they compare.
RILL_SELECT_HD constexpr bool select_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The bitonic sort of a warp's 32 keys, best at lane 0: at stage k (2, 4, .. 32) and distance j (k / 2 .. 1)
// lane `lane` exchanges keys with lane ^ j and keeps the better of the two where this says so, the other one
// elsewhere.
RILL_SELECT_HD constexpr bool sort32_keeps_better(int lane, int k, int j) {
  return ((lane & j) == 0) == ((lane & k) == 0);
}

// The bitonic merge of a bitonic sequence of eight in each group of eight lanes (distances 4, 2, 1), best
// first.
RILL_SELECT_HD constexpr bool merge8_keeps_better(int lane, int j) {
  return (lane & j) == 0;
}

// Warp 0's first merge round: lane l (list g = l / 8 of the candidates, element r = l % 8) takes the better
// of candidate 8 g + r and this one, element 7 - r of list g + 4 (the best eight of two sorted lists: the
// elementwise better of one and the other reversed, a bitonic eight).
RILL_SELECT_HD constexpr int select_first_partner(int lane) {
  return ((lane >> 3) + 4) * kSelectWideTopK + (kSelectWideTopK - 1 - (lane & 7));
}

// The next rounds (m = 1, then 2): the lane whose key lane l compares with, element 7 - r of group g ^ m.
RILL_SELECT_HD constexpr int select_merge_partner(int lane, int m) {
  return (((lane >> 3) ^ m) << 3) | (kSelectWideTopK - 1 - (lane & 7));
}

}  // namespace rill::cuda::moe
