// The seed of a randomised test (design.md §6). By default it is derived from the commit being tested, so a
// CI run is reproducible and a red run is caused by its change, not by the draw:
//   RILL_TEST_SEED unset    the first 8 hex digits of `git -C RILL_SOURCE_DIR rev-parse HEAD` as a number,
//                           read when the test runs (a new commit needs no re-configure); kNoCommitSeed
//                           where the source has no .git (a tarball);
//   RILL_TEST_SEED=N        N, to replay a run;
//   RILL_TEST_SEED=random   a fresh draw, to explore (scripts/explore_seeds.sh: `ctest -L random` over K).
// The node tests follow the same rule (tests/test_seed.mjs). Each test shows the seed it used (SCOPED_TRACE
// or a printed line), so a failing run names the value that replays it; the program prints its origin.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>

#include "test_paths.h"

namespace rill::testing {

inline constexpr uint32_t kNoCommitSeed = 1;

struct SeedChoice {
  uint32_t seed = kNoCommitSeed;
  std::string origin;  // how it was chosen, for the printed line
};

// The commit's seed: the first 8 hex digits of HEAD; kNoCommitSeed when `source_dir` is not a git checkout
// (checked first: git would otherwise find an enclosing repository) or git cannot say.
inline SeedChoice commit_seed(const std::filesystem::path& source_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(source_dir / ".git", ec)) {
    return {kNoCommitSeed, "no git checkout at " + source_dir.string() + ": the fixed seed"};
  }
  const std::string cmd = "git -C '" + source_dir.string() + "' rev-parse HEAD 2>/dev/null";
  std::string head;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, pipe) != nullptr) head += buf;
    if (pclose(pipe) != 0) head.clear();
  }
  if (head.size() < 8 || head.find_first_not_of("0123456789abcdef") < 8) {
    return {kNoCommitSeed, "git rev-parse HEAD failed in " + source_dir.string() + ": the fixed seed"};
  }
  return {static_cast<uint32_t>(std::stoul(head.substr(0, 8), nullptr, 16)), "commit " + head.substr(0, 8)};
}

// The seed for an RILL_TEST_SEED value (nullptr or "" when unset).
inline SeedChoice choose_seed(const char* env, const std::filesystem::path& source_dir) {
  if (env == nullptr || *env == '\0') return commit_seed(source_dir);
  if (std::string_view(env) == "random") return {std::random_device{}(), "RILL_TEST_SEED=random"};
  char* end = nullptr;
  const unsigned long n = std::strtoul(env, &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr, "RILL_TEST_SEED=%s is neither a number nor 'random'\n", env);
    std::exit(2);
  }
  return {static_cast<uint32_t>(n), "RILL_TEST_SEED"};
}

// One seed per test program, chosen on first use and printed once.
inline uint32_t test_seed() {
  static const uint32_t seed = [] {
    const SeedChoice c = choose_seed(std::getenv("RILL_TEST_SEED"), source_dir());
    std::printf("[ seed     ] %u (%s; RILL_TEST_SEED=%u replays it)\n", c.seed, c.origin.c_str(), c.seed);
    std::fflush(stdout);
    return c.seed;
  }();
  return seed;
}

}  // namespace rill::testing
