// KdaSnapshotRequest: prefix caching's in-step KDA snapshot, one request. Plain data, shared by the host
// layout, the model's StepBatch and the kernels (no other include: the CUDA parameter blocks use it as is).
#pragma once

#include <cstdint>

namespace rill::backend {

// Save the KDA state and conv window of a sequence as they are right after position `pos` (the exclusive end
// of the tokens folded in; a 64-token chunk boundary inside its step) into state slot `slot`. The conv window
// is then the K-1 pre-conv q|k|v rows before `pos` (written by kda_prepare), the state the recurrence's after
// them (written by kda_attention).
struct KdaSnapshotRequest {
  int32_t pos = 0;
  int32_t slot = 0;
};

}  // namespace rill::backend
