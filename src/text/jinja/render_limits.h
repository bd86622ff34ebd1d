// Limits on one render: they stop templates that would hang or exhaust the server where Python would
// recurse or loop without end.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rill::text::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also caps every string the template builds
  int max_call_depth = 200;                    // nested macro calls
  int64_t max_steps = 10'000'000;              // loop iterations + macro calls + filter items
};

}  // namespace rill::text::jinja
