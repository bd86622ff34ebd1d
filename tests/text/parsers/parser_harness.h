// Test harness for the output parsers: runs a text through a parser under a given chunking, checks
// the streaming invariants of output_parser.h, and compares chunked runs with the whole-text run.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/parsers/output_parser.h"

namespace rill::text {
// gtest printers (found by ADL) so failures show calls, not bytes.
void PrintTo(const ToolCall& call, std::ostream* os);
void PrintTo(const OutputDelta& delta, std::ostream* os);
}  // namespace rill::text

namespace rill::text::testing {

// A hand-written expectation for one model output (independent of the parser under test).
struct Expected {
  std::string reasoning{};
  std::string content{};
  std::vector<ToolCall> tool_calls{};
  std::vector<std::pair<ParseErrorKind, int>> errors{};  // kind and tool index; messages are free text
  bool reasoning_ended = false;
  bool stop_seen = false;
};

struct Case {
  std::string name{};  // gtest parameter name: [A-Za-z0-9_]
  ParserConfig config{};
  std::string text{};
  Expected expected{};
};

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// gtest check that a whole-text result is `expected`.
void expect_matches(const ParseResult& result, const Expected& expected);

struct Run {
  std::vector<OutputDelta> deltas{};
  ParseResult result{};
};

// Feeds text cut at `cuts` (ascending offsets; empty: the whole text in one feed), then finish().
Run run_chunked(const ParserConfig& config, std::string_view text, const std::vector<size_t>& cuts);

// "" when the run keeps every invariant, else the first violation: per-field concatenation equals
// the result, UTF-8-complete deltas, reasoning end boundary order, tool-call delta shape and order.
std::string check_invariants(const Run& run);

// The deltas with adjacent increments of one field merged (what every chunking must agree on).
std::vector<OutputDelta> normalized(const std::vector<OutputDelta>& deltas);

std::string describe(const ParseResult& result);
std::string describe(const std::vector<OutputDelta>& deltas);
bool is_valid_utf8(std::string_view text);

// The seed for random chunkings: $RILL_TEST_SEED when set, else fresh; printed by the caller.
uint64_t test_seed();

// Parses `text` whole, then under every 2-way split, byte by byte and under `n_random` random
// chunkings drawn from `seed`, expecting identical results and invariants everywhere (gtest
// failures name the chunking). Returns the whole-text run.
Run check_all_chunkings(const ParserConfig& config, std::string_view text, int n_random, uint64_t seed);

}  // namespace rill::text::testing
