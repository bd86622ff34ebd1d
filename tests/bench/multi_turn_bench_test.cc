// `rill bench --multi-turn` (bench/driver/multi_turn_bench) on the CPU backend at the tiny fixture's shape:
// five conversations through a device pool that holds one of them. Without a tier every second turn is
// computed again; with the host tier each one comes back from it, and after a restart from disk, whole (the
// history's last full block and its snapshot); the report prints the three rows and the tiers' copies and
// reads.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/backend.h"
#include "bench/driver/multi_turn_bench.h"
#include "model/config.h"
#include "model/fixture.h"
#include "model/model.h"
#include "temp_dir.h"

namespace rill::testing {
namespace {

bench::MultiTurnOptions tiny_options(const std::filesystem::path& disk_parent) {
  bench::MultiTurnOptions o;
  o.conversations = 5;
  o.history_tokens = 192;
  o.answer_tokens = 2;
  o.turn_tokens = 32;
  o.max_num_tokens = 512;
  o.disk_parent = disk_parent.string();
  return o;
}

TEST(MultiTurnBench, SecondTurnsComeBackFromTheHostTierAndFromDiskAfterARestart) {
  auto be = backend::make_cpu_backend();
  auto cfg = model::ModelConfig::load(data_dir() / "kimi_linear_tiny_b");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto m = model::load_dummy_model(*cfg, *be, 7);
  ASSERT_TRUE(m.ok()) << m.status().message();
  TempDir parent;
  const bench::MultiTurnOptions o = tiny_options(parent.path);
  auto r = bench::bench_multi_turn(std::move(m).value(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();

  // The sizes the workload chose: one conversation on the device (5 / 4), one snapshot per turn.
  EXPECT_EQ(r->sizes.second_prompt_tokens, 226);
  EXPECT_EQ(r->sizes.snapshot_interval, 192);
  EXPECT_EQ(r->sizes.gpu_conversations, 1);
  EXPECT_GT(r->sizes.host_tier_gib, 0);
  ASSERT_EQ(r->configs.size(), 3u);
  for (const bench::MultiTurnConfig& c : r->configs) {
    EXPECT_EQ(c.first_ttft_ms.size(), 5u) << c.name;
    ASSERT_EQ(c.second_ttft_ms.size(), 5u) << c.name;
    for (double ms : c.second_ttft_ms) EXPECT_GT(ms, 0) << c.name;
  }
  const bench::MultiTurnConfig &none = r->configs[0], &host = r->configs[1], &disk = r->configs[2];
  // Returning in the order they left, each conversation was pushed off the device by the later ones.
  EXPECT_EQ(none.cached_tokens, 0u);
  EXPECT_EQ(none.hits_device + none.hits_host + none.hits_disk, 0u);
  EXPECT_EQ(none.copies.batches, 0u);
  // Every second turn resumes at the history's end (192 tokens: three blocks and the snapshot there).
  EXPECT_EQ(host.turns_with_hits, 5);
  EXPECT_EQ(host.cached_tokens, 5u * 192);
  EXPECT_EQ(host.hits_host, 5u * 192);
  EXPECT_EQ(host.hits_disk, 0u);
  EXPECT_GT(host.copies.bytes_to_device, 0u);
  EXPECT_GT(host.copies.seconds, 0);
  EXPECT_EQ(disk.turns_with_hits, 5);
  EXPECT_EQ(disk.cached_tokens, 5u * 192);
  EXPECT_EQ(disk.hits_disk, 5u * 192);
  EXPECT_EQ(disk.hits_host, 0u);
  EXPECT_GT(disk.disk_bytes_read, 0u);
  EXPECT_GT(disk.disk_read_seconds, 0);
  EXPECT_GT(r->disk_files_at_restart.files, 0);
  EXPECT_EQ(r->disk_files.files, r->disk_files_at_restart.files);
  EXPECT_GT(r->ceiling_to_device_gbps, 0);
  EXPECT_GT(r->ceiling_to_host_gbps, 0);
  // The run's directory is gone; the parent stays.
  EXPECT_FALSE(std::filesystem::exists(r->disk_dir));
  EXPECT_TRUE(std::filesystem::exists(parent.path));

  const std::string text = r->describe(o);
  for (const char* line : {"recompute (no tier)", "host tier", "disk tier, restarted", "copy ceiling",
                           "tier copies, host tier", "disk reads, disk tier, restarted", "5 of 5 turns hit"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  const std::string md = r->markdown(o, "title");
  EXPECT_NE(md.find("| host tier |"), std::string::npos) << md;
  EXPECT_NE(md.find("| disk tier, restarted |"), std::string::npos) << md;
}

TEST(MultiTurnBench, APoolThatHoldsEveryConversationIsRefused) {
  auto be = backend::make_cpu_backend();
  auto cfg = model::ModelConfig::load(data_dir() / "kimi_linear_tiny_b");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto m = model::load_dummy_model(*cfg, *be, 7);
  ASSERT_TRUE(m.ok()) << m.status().message();
  bench::MultiTurnOptions o = tiny_options({});
  o.gpu_blocks = 5 * 4;  // four 64-token blocks per conversation of 226 tokens + its first token
  auto s = bench::multi_turn_sizes(o, **m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--num-kv-blocks 20 holds all 5 conversations"), std::string::npos)
      << s.status().message();
  o.gpu_blocks = 4;  // less than one second turn
  s = bench::multi_turn_sizes(o, **m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cannot hold one second turn"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace rill::testing
