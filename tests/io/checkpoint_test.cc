// Checkpoint (single file, sharded with and without an index) and read_json_file.
#include <initializer_list>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/checkpoint.h"
#include "io/test_files.h"

namespace rill::io {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::test_data_dir;
using testing::write_bytes;

// Writes a shard holding one F32[2] tensor per name, filled with `value`.
void write_shard(const std::filesystem::path& path, std::initializer_list<const char*> names,
                 float value = 1.0f) {
  std::vector<HostTensor> owned;
  std::vector<NamedTensor> tensors;
  for (const char* name : names) {
    owned.push_back(HostTensor::zeros(DType::F32, {2}));
    owned.back().view.ptr<float>()[0] = owned.back().view.ptr<float>()[1] = value;
    tensors.push_back({name, owned.back().view});
  }
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).ok());
}

std::string open_error(const std::filesystem::path& dir) {
  Result<Checkpoint> r = Checkpoint::open(dir);
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.status().message();
}

TEST(Checkpoint, OpensSingleFileCheckpoint) {
  Result<Checkpoint> ck = Checkpoint::open(test_data_dir() + "/kimi_linear_tiny_a");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_TRUE(ck->has_weights());
  ASSERT_EQ(ck->files().size(), 1u);  // reference.safetensors beside it is not a weight file
  EXPECT_EQ(ck->files()[0]->path().filename(), "model.safetensors");
  EXPECT_EQ(ck->n_tensors(), 151u);
  EXPECT_EQ(ck->total_bytes(), 2123512u);
  const std::vector<std::string> names = ck->names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.front(), "lm_head.weight");
  EXPECT_EQ(ck->find("reference_logits"), nullptr);
}

TEST(Checkpoint, OpensIndexedShards) {
  Result<Checkpoint> ck = Checkpoint::open(test_data_dir() + "/kimi_linear_tiny_b");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->files().size(), 2u);
  Result<nlohmann::ordered_json> index =
      read_json_file(test_data_dir() + "/kimi_linear_tiny_b/model.safetensors.index.json");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(ck->n_tensors(), (*index)["weight_map"].size());
  EXPECT_EQ(ck->n_tensors(), 237u);
  EXPECT_EQ(ck->total_bytes(), (*index)["metadata"]["total_size"].get<uint64_t>());

  const Checkpoint::Entry* lm = ck->find("lm_head.weight");
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(lm->file->path().filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(lm->info->dtype, DType::BF16);
  EXPECT_EQ(lm->info->shape, Shape({512, 64}));
  const Checkpoint::Entry* kv = ck->find("model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->info->shape, Shape({576, 64}));
  const Checkpoint::Entry* a_log = ck->find("model.layers.0.self_attn.A_log");
  ASSERT_NE(a_log, nullptr);
  EXPECT_EQ(a_log->info->dtype, DType::F32);
  EXPECT_EQ(a_log->info->shape, Shape({1, 1, 2, 1}));
  EXPECT_FLOAT_EQ(ck->view(*a_log).ptr<float>()[0], 0.6523179411888123f);

  const Checkpoint::Entry* norm = ck->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->file->path().filename(), "model-00002-of-00002.safetensors");
  const TensorView v = ck->view(*norm);
  ASSERT_EQ(v.dtype, DType::BF16);
  ASSERT_EQ(v.shape, Shape({64}));
  EXPECT_EQ(load_as_f32(v.data, v.dtype, 0), 1.0703125f);
  double sum = 0;
  for (int64_t i = 0; i < v.numel(); ++i) {
    const float x = load_as_f32(v.data, v.dtype, size_t(i));
    EXPECT_NEAR(x, 1.0f, 0.25f) << i;
    sum += x;
  }
  EXPECT_NEAR(sum / double(v.numel()), 1.0, 0.05);
}

TEST(Checkpoint, OpensUnindexedShardsSorted) {
  TempDir dir;
  write_shard(dir / "b.safetensors", {"y", "z"});
  write_shard(dir / "a.safetensors", {"x"});
  write_bytes(dir / "notes.txt", "not a weight file");
  Result<Checkpoint> ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ASSERT_EQ(ck->files().size(), 2u);
  EXPECT_EQ(ck->files()[0]->path().filename(), "a.safetensors");
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(ck->find("z")->file->path().filename(), "b.safetensors");
  EXPECT_EQ(ck->total_bytes(), 24u);
}

TEST(Checkpoint, DirectoryWithoutWeightsHasNone) {
  TempDir dir;
  write_bytes(dir / "config.json", R"({"model_type": "kimi_linear"})");
  Result<Checkpoint> ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_FALSE(ck->has_weights());
  EXPECT_EQ(ck->n_tensors(), 0u);
  EXPECT_EQ(ck->find("x"), nullptr);
}

TEST(Checkpoint, MissingDirectory) {
  TempDir dir;
  Result<Checkpoint> ck = Checkpoint::open(dir / "absent");
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::NotFound);
  EXPECT_THAT(ck.status().message(), HasSubstr("no such directory"));
  write_bytes(dir / "file", "x");
  EXPECT_THAT(open_error(dir / "file"), HasSubstr("not a directory"));
}

TEST(Checkpoint, TensorInTwoShardsWithoutIndex) {
  TempDir dir;
  write_shard(dir / "a.safetensors", {"x", "dup"});
  write_shard(dir / "b.safetensors", {"dup", "y"});
  EXPECT_THAT(open_error(dir.path()), HasSubstr("tensor 'dup' is in both a.safetensors and b.safetensors"));
}

TEST(Checkpoint, IndexNamingMissingShard) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00002.safetensors", {"x"});
  write_bytes(
      dir / "model.safetensors.index.json",
      R"({"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}})");
  Result<Checkpoint> ck = Checkpoint::open(dir.path());
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::NotFound);
  EXPECT_THAT(ck.status().message(),
              AllOf(HasSubstr("model.safetensors.index.json: weight_map maps tensor 'y' to "
                              "'model-00002-of-00002.safetensors', which does not exist")));
}

TEST(Checkpoint, IndexNamingTensorTheShardLacks) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"x"});
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})");
  EXPECT_THAT(open_error(dir.path()),
              HasSubstr("weight_map maps tensor 'y' to 's1.safetensors', but that file has no such tensor"));
}

TEST(Checkpoint, ShardTensorMissingFromIndex) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"x", "stray"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "s1.safetensors"}})");
  EXPECT_THAT(open_error(dir.path()), AllOf(HasSubstr("s1.safetensors: tensor 'stray' is not listed in"),
                                            HasSubstr("inconsistent checkpoint")));
}

TEST(Checkpoint, ShardHoldsTensorTheIndexPutsElsewhere) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"x", "y"});
  write_shard(dir / "s2.safetensors", {"y"});
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  EXPECT_THAT(open_error(dir.path()), HasSubstr("s1.safetensors: holds tensor 'y', which"));
}

TEST(Checkpoint, MalformedIndex) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"x"});
  const auto index = dir / "model.safetensors.index.json";
  write_bytes(index, R"({"metadata": {}})");
  EXPECT_THAT(open_error(dir.path()), HasSubstr("missing object 'weight_map'"));
  write_bytes(index, R"({"weight_map": {"x": 3}})");
  EXPECT_THAT(open_error(dir.path()), HasSubstr("weight_map['x'] must be a file name string"));
  write_bytes(index, R"({"weight_map": {"x": "../s1.safetensors"}})");
  EXPECT_THAT(open_error(dir.path()), HasSubstr("is not a file name inside the checkpoint"));
  write_bytes(index, R"({"weight_map": {"x": "/etc/passwd"}})");
  EXPECT_THAT(open_error(dir.path()), HasSubstr("is not a file name inside the checkpoint"));
  write_bytes(index, "{\"weight_map\": {\n  \"x\": \"s1.safetensors\",\n}}");
  EXPECT_THAT(open_error(dir.path()), HasSubstr("model.safetensors.index.json: invalid JSON at line 3"));
}

TEST(Checkpoint, DamagedShardNamesTheFile) {
  TempDir dir;
  write_bytes(dir / "model.safetensors", std::string("\x02\0\0\0\0\0\0\0{}", 10).substr(0, 9));
  EXPECT_THAT(open_error(dir.path()), HasSubstr("model.safetensors: header length 2 runs past the end"));
}

TEST(ReadJsonFile, ReadsConfigInOrder) {
  Result<nlohmann::ordered_json> cfg = read_json_file(test_data_dir() + "/kimi_linear_tiny_a/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ((*cfg)["model_type"], "kimi_linear");
  EXPECT_EQ((*cfg)["hidden_size"], 64);
  EXPECT_EQ(cfg->begin().key(), "architectures");  // file order kept
}

TEST(ReadJsonFile, SyntaxErrorNamesFileLineAndColumn) {
  TempDir dir;
  const auto path = dir / "config.json";
  write_bytes(path, "{\n  \"hidden_size\": 64,\n  \"vocab_size\": 5x\n}\n");
  Result<nlohmann::ordered_json> r = read_json_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr(path.string() + ": invalid JSON at line 3, column 18"),
                                          HasSubstr("syntax error")));
}

TEST(ReadJsonFile, MissingEmptyAndDirectory) {
  TempDir dir;
  Result<nlohmann::ordered_json> r = read_json_file(dir / "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::NotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("config.json: no such file"));
  write_bytes(dir / "empty.json", "  \n");
  EXPECT_THAT(read_json_file(dir / "empty.json").status().message(), HasSubstr("empty.json: file is empty"));
  EXPECT_THAT(read_json_file(dir.path()).status().message(), HasSubstr("not a regular file"));
  write_bytes(dir / "trunc.json", "{\"a\": [1, 2");
  EXPECT_THAT(read_json_file(dir / "trunc.json").status().message(),
              HasSubstr("trunc.json: invalid JSON at line 1"));
}

}  // namespace
}  // namespace rill::io
