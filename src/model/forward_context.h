// What every block's forward needs besides its weights: the backend, the step workspace, the batch layout.
#pragma once

#include <string>

#include "backend/backend.h"
#include "core/arena.h"
#include "dist/communicator.h"
#include "model/taps.h"

namespace rill::model {

struct ForwardContext {
  backend::Backend& be;
  Arena& ws;  // the step workspace; blocks carve intermediates and give them back when done
  const backend::BatchLayout& layout;
  TapRecorder* taps = nullptr;  // set by tests / debugging only
  int layer = -1;               // the layer being run (names taps)
  dist::Communicator* tp_comm = nullptr;  // tensor parallelism: the group whose partial sums add up
  dist::Communicator* pp_comm = nullptr;  // pipeline parallelism: this tp rank of every stage, in order

  // t = the sum of every tp rank's t (a no-op on one rank and in a planning pass).
  Status reduce(const TensorView& t) const {
    if (!tp_comm || be.plans_only()) return {};
    return tp_comm->all_reduce_sum(t, t);
  }
  // Pipeline stages (no-ops in a planning pass): the stream from the stage before / to the one after, and the
  // logits the last stage computed, sent to and received by stage 0 (which samples); other stages' logits
  // rows stay unwritten.
  Status from_previous_stage(const TensorView& t) const {
    return be.plans_only() ? Status{} : pp_comm->recv(t, pp_comm->rank() - 1);
  }
  Status to_next_stage(const TensorView& t) const {
    return be.plans_only() ? Status{} : pp_comm->send(t, pp_comm->rank() + 1);
  }
  Status logits_from_last_stage(const TensorView& logits) const {
    if (be.plans_only() || pp_comm->rank() != 0) return {};
    return pp_comm->recv(logits, pp_comm->size() - 1);
  }
  Status logits_to_first_stage(const TensorView& logits) const {
    if (be.plans_only() || !pp_comm || pp_comm->size() == 1) return {};
    return pp_comm->send(logits, 0);
  }

  DType act() const { return be.act_dtype(); }
  int n_tokens() const { return layout.n_tokens; }
  void tap(const char* name, const TensorView& v) const {
    if (taps) taps->record(be, (layer >= 0 ? "L" + std::to_string(layer) + "." : std::string()) + name, v);
  }
};

// Gives the workspace back to where it was when the scope opened (a block's intermediates die with it).
class WorkspaceScope {
 public:
  explicit WorkspaceScope(Arena& ws) : ws_(ws), mark_(ws.used()) {}
  ~WorkspaceScope() { ws_.release_to(mark_); }
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  Arena& ws_;
  size_t mark_;
};

// Per-layer views into the caches (empty where the layer kind has none).
struct LayerCache {
  TensorView kda_state;  // F32 [n_slots, Hk, d, d]
  TensorView kda_conv;   // act [n_slots, K-1, 3P]
  TensorView mla_kv;     // act [n_blocks, block_size, kv_lora + rope]
  // Replay records (speculative decoding, kda_rollback "records"; empty otherwise): per sequence slot and fed
  // token of a verify step, every head's (beta k̂, alpha, e) and the token's pre-conv q|k|v row.
  TensorView kda_records;       // F32 [n_record_slots, R, Hk, 3, d]
  TensorView kda_conv_records;  // act [n_record_slots, R, 3P]
};

}  // namespace rill::model
