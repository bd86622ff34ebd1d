// runner/wire_format: what the leader process sends its worker processes must come back field for field
// (random steps from the commit's seed, every optional part present), and bytes that are not a whole message
// of the expected kind — every truncation, a wrong tag, trailing bytes, an out-of-range enum or a count
// larger than the message — are refused with a message instead of being read past.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "runner/wire_format.h"
#include "test_seed.h"

namespace rill::runner {
namespace {

model::StepBatch random_batch(std::mt19937& rng) {
  model::StepBatch b;
  const int n_seqs = int(rng() % 6);
  for (int q = 0; q < n_seqs; ++q) {
    model::SequenceStep s;
    s.start_pos = int32_t(rng() % 5000);
    s.n_new = 1 + int32_t(rng() % 300);
    s.state_slot = int32_t(rng() % 64);
    s.logits = model::LogitsNeeded(rng() % 4);
    s.n_logits = s.logits == model::LogitsNeeded::LastN ? 1 + int32_t(rng() % s.n_new) : 0;
    s.block_table.resize(size_t((s.start_pos + s.n_new + 63) / 64));
    for (int32_t& blk : s.block_table) blk = int32_t(rng() % 100000);
    for (int k = int(rng() % 3); k > 0; --k)
      s.kda_snapshots.push_back({int32_t(rng() % 4096), int32_t(rng() % 80)});
    for (int t = 0; t < s.n_new; ++t) b.token_ids.push_back(int32_t(rng() % 200000) - 5);  // negatives too
    b.seqs.push_back(std::move(s));
  }
  return b;
}

void expect_same(const model::StepBatch& a, const model::StepBatch& b) {
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.seqs.size(), b.seqs.size());
  for (size_t q = 0; q < a.seqs.size(); ++q) {
    const model::SequenceStep &x = a.seqs[q], &y = b.seqs[q];
    EXPECT_EQ(x.start_pos, y.start_pos) << "sequence " << q;
    EXPECT_EQ(x.n_new, y.n_new) << "sequence " << q;
    EXPECT_EQ(x.state_slot, y.state_slot) << "sequence " << q;
    EXPECT_EQ(x.logits, y.logits) << "sequence " << q;
    EXPECT_EQ(x.n_logits, y.n_logits) << "sequence " << q;
    EXPECT_EQ(x.block_table, y.block_table) << "sequence " << q;
    ASSERT_EQ(x.kda_snapshots.size(), y.kda_snapshots.size()) << "sequence " << q;
    for (size_t k = 0; k < x.kda_snapshots.size(); ++k) {
      EXPECT_EQ(x.kda_snapshots[k].pos, y.kda_snapshots[k].pos);
      EXPECT_EQ(x.kda_snapshots[k].slot, y.kda_snapshots[k].slot);
    }
  }
}

TEST(WireFormat, RandomStepsComeBackFieldForField) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const model::StepBatch batch = random_batch(rng);
    cache::CacheOps ops;
    for (int k = int(rng() % 4); k > 0; --k)
      ops.kda_slot_copies.push_back({int32_t(rng() % 90), int32_t(rng() % 90)});
    auto got = decode_step(encode_step(batch, ops));
    ASSERT_TRUE(got.ok()) << "step " << i << ": " << got.status().to_string();
    expect_same(got->batch, batch);
    ASSERT_EQ(got->ops.kda_slot_copies.size(), ops.kda_slot_copies.size());
    for (size_t k = 0; k < ops.kda_slot_copies.size(); ++k) {
      EXPECT_EQ(got->ops.kda_slot_copies[k].from, ops.kda_slot_copies[k].from);
      EXPECT_EQ(got->ops.kda_slot_copies[k].to, ops.kda_slot_copies[k].to);
    }
  }
}

TEST(WireFormat, EveryTruncationAndTrailingByteIsRefused) {
  std::mt19937 rng(testing::test_seed());
  model::StepBatch batch;
  while (batch.seqs.size() < 2) batch = random_batch(rng);
  batch.seqs[0].kda_snapshots = {{64, 3}};
  const Bytes whole = encode_step(batch, cache::CacheOps{{{1, 2}}});
  for (size_t n = 0; n < whole.size(); ++n) {
    auto got = decode_step(std::span<const uint8_t>(whole.data(), n));
    ASSERT_FALSE(got.ok()) << "the first " << n << " of " << whole.size() << " bytes were accepted";
    EXPECT_NE(got.status().message().find("step message"), std::string::npos) << got.status().to_string();
  }
  Bytes longer = whole;
  longer.push_back(0);
  auto got = decode_step(longer);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("1 bytes past the end"), std::string::npos)
      << got.status().to_string();
}

TEST(WireFormat, WrongKindsAndValuesAreRefusedByName) {
  const Bytes options = encode_runner_options(RunnerOptions{});
  auto as_step = decode_step(options);
  ASSERT_FALSE(as_step.ok());
  EXPECT_NE(as_step.status().message().find("not one"), std::string::npos) << as_step.status().to_string();

  model::StepBatch batch;
  batch.token_ids = {7};
  batch.seqs.push_back(model::SequenceStep{.start_pos = 0, .n_new = 1, .state_slot = 0, .block_table = {0}});
  Bytes bytes = encode_step(batch, {});
  // The logits kind sits after the tag, version, token list (count + 1 id), sequence count and three ints.
  const size_t logits_at = 4 + 4 + 4 + 4 + 4 + 3 * 4;
  ASSERT_EQ(bytes[logits_at], uint8_t(model::LogitsNeeded::Last));
  bytes[logits_at] = 9;
  auto bad_enum = decode_step(bytes);
  ASSERT_FALSE(bad_enum.ok());
  EXPECT_NE(bad_enum.status().message().find("logits kind 9"), std::string::npos)
      << bad_enum.status().to_string();

  // A sequence count far beyond what the message holds: refused before anything is allocated for it.
  Bytes huge = encode_step(batch, {});
  const uint32_t many = 0xffffffffu;
  std::memcpy(huge.data() + 4 + 4 + 4 + 4, &many, sizeof many);
  auto too_many = decode_step(huge);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("sequence count says 4294967295 items"), std::string::npos)
      << too_many.status().to_string();

  Bytes version = encode_step(batch, {});
  version[4] = 99;
  auto other_version = decode_step(version);
  ASSERT_FALSE(other_version.ok());
  EXPECT_NE(other_version.status().message().find("format version 99"), std::string::npos)
      << other_version.status().to_string();
}

TEST(WireFormat, RunnerOptionsComeBackFieldForField) {
  RunnerOptions o;
  o.max_batch_size = 17;
  o.max_num_tokens = 3001;
  o.max_model_len = 12345;
  o.kv_cache_fraction = 0.625;
  o.gpu_memory_utilization = 0.8125;
  o.num_kv_blocks = 77;
  o.block_size = 64;
  o.prefix.enabled = true;
  o.prefix.snapshot_interval = 512;
  o.prefix.snapshot_budget_bytes = (int64_t(5) << 32) + 3;  // past 32 bits
  o.prefix.staging_slots = 3;
  o.enforce_eager = true;
  o.capture_graphs = false;
  o.num_speculative_tokens = 4;
  o.max_logit_rows = 512;
  auto got = decode_runner_options(encode_runner_options(o));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->max_batch_size, 17);
  EXPECT_EQ(got->max_num_tokens, 3001);
  EXPECT_EQ(got->max_model_len, 12345);
  EXPECT_EQ(got->kv_cache_fraction, 0.625);
  EXPECT_EQ(got->gpu_memory_utilization, 0.8125);
  EXPECT_EQ(got->num_kv_blocks, 77);
  EXPECT_EQ(got->block_size, 64);
  EXPECT_TRUE(got->prefix.enabled);
  EXPECT_EQ(got->prefix.snapshot_interval, 512);
  EXPECT_EQ(got->prefix.snapshot_budget_bytes, (int64_t(5) << 32) + 3);
  EXPECT_EQ(got->prefix.staging_slots, 3);
  EXPECT_TRUE(got->enforce_eager);
  EXPECT_FALSE(got->capture_graphs);
  EXPECT_EQ(got->num_speculative_tokens, 4);
  EXPECT_EQ(got->max_logit_rows, 512);
}

TEST(WireFormat, SetupReportsAndVerdictsCarryTheFailure) {
  const SetupReport failed{invalid_argument("rank 1: tensor x: shape [3] is not [4]"), 0, 0, 0};
  auto r = decode_setup_report(encode_setup_report(failed));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(r->status.message(), "rank 1: tensor x: shape [3] is not [4]");

  auto ok = decode_setup_report(encode_setup_report({Status{}, 64, 8, 3}));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(ok->status.ok());
  EXPECT_EQ(ok->n_blocks, 64);
  EXPECT_EQ(ok->n_slots, 8);
  EXPECT_EQ(ok->n_snapshots, 3);

  auto v = decode_setup_verdict(encode_setup_verdict({Status{}, 48}));
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_TRUE(v->status.ok());
  EXPECT_EQ(v->n_blocks, 48);
  auto stop = decode_setup_verdict(encode_setup_verdict({internal_error("rank 3: exception: boom"), 0}));
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->status.code(), StatusCode::Internal);
  EXPECT_EQ(stop->status.message(), "rank 3: exception: boom");
  // A report is not a verdict.
  EXPECT_FALSE(decode_setup_verdict(encode_setup_report(failed)).ok());
}

}  // namespace
}  // namespace rill::runner
