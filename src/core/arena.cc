#include "core/arena.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <execinfo.h>

namespace rill {

TensorView Arena::alloc(DType dtype, Shape shape) {
  const size_t bytes = footprint(size_t(shape.numel()) * dtype_size(dtype));
  const size_t offset = used_;
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  if (measuring()) return TensorView::make(nullptr, dtype, shape, device_);
  if (used_ > capacity_) {
    std::fprintf(stderr, "rill: workspace arena exhausted (%zu of %zu bytes, this view %zu): planning bug\n", used_,
                 capacity_, bytes);
    // Which op asked is the finding (the planning passes of Model::reserve_workspace missed its shape): the stack,
    // addresses resolvable with `addr2line -f -C -e BINARY` when the binary has no symbol table entries.
    void* frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    std::abort();
  }
  return TensorView::make(base_ + offset, dtype, shape, device_);
}

}  // namespace rill
