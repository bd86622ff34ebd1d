#include "text/parsers/parser_harness.h"
#include "test_seed.h"

#include <cstdio>
#include <cstdlib>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

namespace rill::text {

void PrintTo(const ToolCall& call, std::ostream* os) {
  *os << fmt::format("{{id={} name={} arguments={}}}", call.id, call.name, call.arguments);
}

void PrintTo(const OutputDelta& d, std::ostream* os) {
  *os << testing::describe(std::vector<OutputDelta>{d});
}

}  // namespace rill::text

namespace rill::text::testing {
namespace {

const char* kind_name(DeltaKind kind) {
  switch (kind) {
    case DeltaKind::Reasoning:
      return "reasoning";
    case DeltaKind::ReasoningEnd:
      return "reasoning_end";
    case DeltaKind::Content:
      return "content";
    case DeltaKind::ToolCall:
      return "tool_call";
  }
  return "?";
}

// Checks one delta against the running state; "" when it is fine.
struct InvariantState {
  const ParseResult* result = nullptr;
  std::string reasoning{}, content{};
  std::vector<std::string> arguments{};
  int n_started = 0;
  int active = -1;
  bool ended = false;

  std::string check(const OutputDelta& d) {
    bool text_kind = d.kind == DeltaKind::Reasoning || d.kind == DeltaKind::Content;
    if (text_kind && d.text.empty()) return "empty text increment";
    if (result->reasoning_ended && !ended &&
        (d.kind == DeltaKind::Content || d.kind == DeltaKind::ToolCall)) {
      return "content or tool call before the reasoning end boundary";
    }
    switch (d.kind) {
      case DeltaKind::Reasoning:
        if (ended) return "reasoning after the end boundary";
        reasoning += d.text;
        return "";
      case DeltaKind::ReasoningEnd:
        if (ended || !d.text.empty()) return "second or non-empty reasoning end boundary";
        ended = true;
        return "";
      case DeltaKind::Content:
        content += d.text;
        return "";
      case DeltaKind::ToolCall:
        return check_tool_call(d);
    }
    return "unknown delta kind";
  }

  std::string check_tool_call(const OutputDelta& d) {
    if (d.tool_index < 0 || d.tool_index >= static_cast<int>(result->tool_calls.size()))
      return "bad tool index";
    const ToolCall& call = result->tool_calls[static_cast<size_t>(d.tool_index)];
    if (!d.tool_id.empty()) {
      if (d.tool_index != n_started) return "tool indices must start at 0 and grow by 1";
      if (!d.text.empty()) return "first tool-call delta must carry arguments \"\"";
      if (d.tool_id != call.id || d.tool_name != call.name)
        return "first tool-call delta id/name differ from result";
      if (!is_valid_utf8(d.tool_id) || !is_valid_utf8(d.tool_name)) return "tool id/name not UTF-8";
      ++n_started;
      active = d.tool_index;
      return "";
    }
    if (d.tool_index != active) return "tool-call deltas not clustered by index";
    if (!d.tool_name.empty() || d.text.empty()) return "continuation must carry only an arguments piece";
    arguments[static_cast<size_t>(d.tool_index)] += d.text;
    return "";
  }
};

std::string cuts_text(const std::vector<size_t>& cuts) {
  if (cuts.size() > 40)
    return fmt::format("{} cuts [{}, ...]", cuts.size(), fmt::join(cuts.begin(), cuts.begin() + 40, ","));
  return fmt::format("[{}]", fmt::join(cuts, ","));
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    auto lead = static_cast<unsigned char>(text[i]);
    size_t n = lead < 0x80             ? 1
               : (lead & 0xE0) == 0xC0 ? 2
               : (lead & 0xF0) == 0xE0 ? 3
               : (lead & 0xF8) == 0xF0 ? 4
                                       : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

Run run_chunked(const ParserConfig& config, std::string_view text, const std::vector<size_t>& cuts) {
  Run run;
  auto parser = make_output_parser(config);
  EXPECT_TRUE(parser.ok()) << parser.status().to_string();
  if (!parser.ok()) return run;
  size_t start = 0;
  auto take = [&](std::vector<OutputDelta> deltas) {
    for (OutputDelta& d : deltas) run.deltas.push_back(std::move(d));
  };
  for (size_t cut : cuts) {
    take((*parser)->feed(text.substr(start, cut - start)));
    start = cut;
  }
  take((*parser)->feed(text.substr(start)));
  take((*parser)->finish());
  run.result = (*parser)->result();
  return run;
}

std::string check_invariants(const Run& run) {
  InvariantState state{.result = &run.result};
  state.arguments.resize(run.result.tool_calls.size());
  for (size_t i = 0; i < run.deltas.size(); ++i) {
    if (!is_valid_utf8(run.deltas[i].text)) return fmt::format("delta #{} cuts a UTF-8 sequence", i);
    std::string problem = state.check(run.deltas[i]);
    if (!problem.empty()) return fmt::format("delta #{} ({}): {}", i, kind_name(run.deltas[i].kind), problem);
  }
  if (state.reasoning != run.result.reasoning) return "reasoning deltas do not concatenate to the result";
  if (state.content != run.result.content) return "content deltas do not concatenate to the result";
  if (state.ended != run.result.reasoning_ended) return "reasoning_ended disagrees with the deltas";
  if (state.n_started != static_cast<int>(run.result.tool_calls.size())) return "a tool call without deltas";
  for (size_t i = 0; i < state.arguments.size(); ++i) {
    if (state.arguments[i] != run.result.tool_calls[i].arguments) {
      return fmt::format("arguments deltas of call {} do not concatenate to the result", i);
    }
  }
  return "";
}

std::vector<OutputDelta> normalized(const std::vector<OutputDelta>& deltas) {
  std::vector<OutputDelta> out;
  for (const OutputDelta& d : deltas) {
    bool merge = !out.empty() && out.back().kind == d.kind &&
                 (d.kind == DeltaKind::Reasoning || d.kind == DeltaKind::Content ||
                  (d.kind == DeltaKind::ToolCall && d.tool_id.empty() && out.back().tool_id.empty() &&
                   out.back().tool_index == d.tool_index));
    if (merge) {
      out.back().text += d.text;
    } else {
      out.push_back(d);
    }
  }
  return out;
}

void expect_matches(const ParseResult& result, const Expected& expected) {
  EXPECT_EQ(result.reasoning, expected.reasoning);
  EXPECT_EQ(result.content, expected.content);
  EXPECT_EQ(result.tool_calls, expected.tool_calls);
  std::vector<std::pair<ParseErrorKind, int>> errors;
  for (const ParseError& e : result.errors) errors.emplace_back(e.kind, e.tool_index);
  EXPECT_EQ(errors, expected.errors) << describe(result);
  EXPECT_EQ(result.reasoning_ended, expected.reasoning_ended);
  EXPECT_EQ(result.stop_seen, expected.stop_seen);
  for (const ParseError& e : result.errors) EXPECT_FALSE(e.message.empty());
}

std::string describe(const ParseResult& r) {
  std::string out = fmt::format("reasoning=\"{}\" content=\"{}\" reasoning_ended={} stop_seen={}",
                                r.reasoning, r.content, r.reasoning_ended, r.stop_seen);
  for (const ToolCall& c : r.tool_calls)
    out += fmt::format(" call{{id={} name={} args={}}}", c.id, c.name, c.arguments);
  for (const ParseError& e : r.errors) {
    out += fmt::format(" error{{{} #{}: {}}}", parse_error_kind_name(e.kind), e.tool_index, e.message);
  }
  return out;
}

std::string describe(const std::vector<OutputDelta>& deltas) {
  std::string out;
  for (const OutputDelta& d : deltas) {
    out += fmt::format("[{} #{} {} {} \"{}\"] ", kind_name(d.kind), d.tool_index, d.tool_id, d.tool_name,
                       d.text);
  }
  return out;
}

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const uint64_t s = rill::testing::test_seed();
    std::printf("[ parsers ] random chunkings use seed %llu (RILL_TEST_SEED=%llu replays them)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

Run check_all_chunkings(const ParserConfig& config, std::string_view text, int n_random, uint64_t seed) {
  Run whole = run_chunked(config, text, {});
  std::string whole_problem = check_invariants(whole);
  EXPECT_EQ(whole_problem, "") << "whole text: " << describe(whole.deltas);
  std::vector<OutputDelta> whole_deltas = normalized(whole.deltas);
  auto same = [&](const std::vector<size_t>& cuts, const char* label) {
    Run run = run_chunked(config, text, cuts);
    std::string problem = check_invariants(run);
    if (problem.empty() && !(run.result == whole.result)) {
      problem = fmt::format("result differs:\n  chunked {}\n  whole   {}", describe(run.result),
                            describe(whole.result));
    }
    if (problem.empty() && normalized(run.deltas) != whole_deltas) {
      problem = fmt::format("delta order differs:\n  chunked {}\n  whole   {}",
                            describe(normalized(run.deltas)), describe(whole_deltas));
    }
    if (!problem.empty())
      ADD_FAILURE() << label << " (seed " << seed << ", cuts " << cuts_text(cuts) << "): " << problem;
    return problem.empty();
  };
  for (size_t i = 0; i <= text.size(); ++i) {
    if (!same({i}, "2-way split")) return whole;
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  if (!same(bytes, "byte by byte")) return whole;
  std::mt19937_64 rng(seed);
  constexpr size_t kMaxChunk[] = {2, 3, 5, 8, 16, 64};
  for (int k = 0; k < n_random; ++k) {
    std::uniform_int_distribution<size_t> chunk(1, kMaxChunk[static_cast<size_t>(k) % std::size(kMaxChunk)]);
    std::vector<size_t> cuts;
    for (size_t at = chunk(rng); at < text.size(); at += chunk(rng)) cuts.push_back(at);
    if (!same(cuts, "random chunking")) return whole;
  }
  return whole;
}

}  // namespace rill::text::testing
