// The seed of a randomised test: $RILL_TEST_SEED when set (to replay a failure), else a fresh one. Each test
// shows the seed it used (SCOPED_TRACE or a printed line), so a failing run names the value that replays it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>

namespace rill::testing {

inline uint32_t test_seed() {
  const char* env = std::getenv("RILL_TEST_SEED");
  if (env != nullptr && *env != '\0') return static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
  return std::random_device{}();
}

}  // namespace rill::testing
