// SafetensorsFile and write_safetensors: round trips, files written by Python, and damaged files on disk.
#include <cstring>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "io/test_files.h"

namespace rill::io {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::read_bytes;
using testing::safetensors_bytes;
using ::testing::StartsWith;
using testing::TempDir;
using testing::test_data_dir;
using testing::write_bytes;

constexpr DType kAllDtypes[] = {DType::BF16, DType::F16, DType::F32, DType::F8E4M3, DType::U8,
                                DType::I8,   DType::I32, DType::I64, DType::Bool};

HostTensor random_tensor(DType dtype, Shape shape, std::mt19937_64& rng) {
  HostTensor t = HostTensor::zeros(dtype, shape);
  auto* bytes = static_cast<uint8_t*>(t.buffer.data());
  for (size_t i = 0; i < t.view.nbytes(); ++i) bytes[i] = uint8_t(rng());
  if (dtype == DType::Bool) {
    for (size_t i = 0; i < t.view.nbytes(); ++i) bytes[i] &= 1;
  }
  return t;
}

std::string open_error(const std::filesystem::path& path) {
  Result<SafetensorsFile> r = SafetensorsFile::open(path);
  EXPECT_FALSE(r.ok()) << path;
  if (r.ok()) return {};
  EXPECT_THAT(r.status().message(), StartsWith(path.string() + ": "));
  return r.status().message();
}

TEST(SafetensorsFile, RoundTripsEveryDtypeAndShape) {
  std::mt19937_64 rng(1234);
  const Shape shapes[] = {
      Shape{}, Shape{1}, Shape{7}, Shape{3, 5}, Shape{0}, Shape{4, 0, 2}, Shape{2, 3, 1, 2, 3}};
  std::vector<HostTensor> owned;
  std::vector<NamedTensor> tensors;
  for (DType dtype : kAllDtypes) {
    for (const Shape& shape : shapes) {
      owned.push_back(random_tensor(dtype, shape, rng));
      tensors.push_back({fmt::format("{}.{}", dtype_name(dtype), shape.to_string()), owned.back().view});
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"empty", ""}, {"unicode", "k\u00e9y \u4e2d"}};
  TempDir dir;
  const auto path = dir / "rt.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors, metadata).ok());

  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata(), metadata);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (const NamedTensor& t : tensors) {
    SCOPED_TRACE(t.name);
    const TensorInfo* info = f->find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, t.view.dtype);
    EXPECT_EQ(info->shape, t.view.shape);
    EXPECT_EQ(info->nbytes, t.view.nbytes());
    EXPECT_EQ(info->offset % dtype_size(info->dtype), 0u);  // every tensor naturally aligned
    const TensorView v = f->view(*info);
    EXPECT_EQ(v.device, Device::Cpu);
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.shape, t.view.shape);
    EXPECT_EQ(std::memcmp(v.data, t.view.data, t.view.nbytes()), 0);
  }
  EXPECT_EQ(f->find("missing"), nullptr);
  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.substr(8, 16), R"({"__metadata__":)");
}

TEST(SafetensorsFile, WritesNoMetadataKeyWhenEmptyAndKeepsGivenOrder) {
  HostTensor a = HostTensor::zeros(DType::U8, {3});
  HostTensor b = HostTensor::zeros(DType::F32, {2});
  const NamedTensor tensors[] = {{"z.first", a.view}, {"a.second", b.view}};
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir / "x.safetensors", tensors).ok());
  const std::string bytes = read_bytes(dir / "x.safetensors");
  // Header in the caller's order; data by decreasing element size (the F32 first), as Python lays it out.
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  std::string header = bytes.substr(8, header_len);
  header.erase(header.find_last_not_of(' ') + 1);
  EXPECT_EQ(header, R"({"z.first":{"dtype":"U8","shape":[3],"data_offsets":[8,11]},)"
                    R"("a.second":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  Result<SafetensorsFile> f = SafetensorsFile::open(dir / "x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(f->metadata().empty());
}

TEST(SafetensorsFile, WriterMatchesPythonBytesExactly) {
  // Re-writing a Python-written file in its own data order must reproduce it byte for byte: same JSON
  // spelling, same padding, same layout.
  const std::string src = test_data_dir() + "/kimi_linear_tiny_a/model.safetensors";
  Result<SafetensorsFile> f = SafetensorsFile::open(src);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<NamedTensor> tensors;
  for (const TensorInfo& t : f->tensors()) tensors.push_back({t.name, f->view(t)});
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir / "copy.safetensors", tensors, f->metadata()).ok());
  EXPECT_TRUE(read_bytes(dir / "copy.safetensors") == read_bytes(src));
}

TEST(SafetensorsFile, WriterRefusesBadViews) {
  HostTensor t = HostTensor::zeros(DType::F32, {4, 4});
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  const NamedTensor strided[] = {{"w", t.view.narrow(1, 0, 2)}};
  Status s = write_safetensors(path, strided);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tensor 'w'"), HasSubstr("F32[4, 2] is not contiguous")));
  TensorView on_gpu = t.view;
  on_gpu.device = Device::Cuda;
  const NamedTensor gpu[] = {{"g", on_gpu}};
  EXPECT_THAT(write_safetensors(path, gpu).message(), HasSubstr("tensor 'g': is on cuda; only host tensors"));
  const NamedTensor twice[] = {{"w", t.view}, {"w", t.view}};
  EXPECT_THAT(write_safetensors(path, twice).message(), HasSubstr("tensor 'w': appears twice"));
  const NamedTensor reserved[] = {{"__metadata__", t.view}};
  EXPECT_THAT(write_safetensors(path, reserved).message(), HasSubstr("reserved"));
  const NamedTensor bad_utf8[] = {{"w\xff", t.view}};
  EXPECT_THAT(write_safetensors(path, bad_utf8).message(), HasSubstr("cannot encode the header"));
  EXPECT_FALSE(std::filesystem::exists(path));
  const NamedTensor ok[] = {{"w", t.view}};
  EXPECT_THAT(write_safetensors(dir / "no/such/dir/x.safetensors", ok).message(), HasSubstr("cannot create"));
}

TEST(SafetensorsFile, ReadsPythonWrittenFile) {
  Result<SafetensorsFile> f =
      SafetensorsFile::open(test_data_dir() + "/kimi_linear_tiny_a/model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), 151u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->file_size(), 2140672u);
  const TensorInfo* emb = f->find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::BF16);
  EXPECT_EQ(emb->shape, Shape({512, 64}));
  EXPECT_EQ(emb->offset, 105592u);
  const TensorInfo* a_log = f->find("model.layers.0.self_attn.A_log");
  ASSERT_NE(a_log, nullptr);
  EXPECT_EQ(a_log->dtype, DType::F32);
  EXPECT_EQ(a_log->shape, Shape({1, 1, 2, 1}));
  const TensorView a = f->view(*a_log);
  EXPECT_FLOAT_EQ(a.ptr<float>()[0], 0.9265514016151428f);
  EXPECT_FLOAT_EQ(a.ptr<float>()[1], 0.32519665360450745f);
  const TensorInfo* norm = f->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, DType::BF16);
  EXPECT_EQ(norm->shape, Shape({64}));
  const TensorView n = f->view(*norm);
  EXPECT_EQ(load_as_f32(n.data, n.dtype, 0), 1.1015625f);
  for (int64_t i = 0; i < n.numel(); ++i) {
    const float x = load_as_f32(n.data, n.dtype, size_t(i));
    EXPECT_GE(x, 0.74f);
    EXPECT_LE(x, 1.26f);
  }
}

class DamagedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    HostTensor a = HostTensor::zeros(DType::F32, {4});
    HostTensor b = HostTensor::zeros(DType::BF16, {2, 3});
    const NamedTensor tensors[] = {{"a", a.view}, {"b", b.view}};
    ASSERT_TRUE(write_safetensors(dir_ / "good.safetensors", tensors).ok());
    good_ = read_bytes(dir_ / "good.safetensors");
    std::memcpy(&header_len_, good_.data(), 8);
  }
  std::filesystem::path write(std::string_view bytes) {
    const auto path = dir_ / "damaged.safetensors";
    write_bytes(path, bytes);
    return path;
  }
  TempDir dir_;
  std::string good_;
  uint64_t header_len_ = 0;
};

TEST_F(DamagedFile, TruncatedInsideLengthPrefix) {
  EXPECT_THAT(open_error(write(good_.substr(0, 5))),
              HasSubstr("file is 5 bytes, too short for the 8-byte header"));
  EXPECT_THAT(open_error(write("")), HasSubstr("file is 0 bytes"));
}

TEST_F(DamagedFile, TruncatedInsideHeader) {
  EXPECT_THAT(open_error(write(good_.substr(0, 8 + header_len_ / 2))),
              AllOf(HasSubstr(fmt::format("header length {} runs past the end", header_len_)),
                    HasSubstr("truncated")));
}

TEST_F(DamagedFile, TruncatedInsideData) {
  EXPECT_THAT(
      open_error(write(good_.substr(0, good_.size() - 3))),
      AllOf(HasSubstr("tensor 'b': data_offsets [16, 28] run past the end of the data section (25 bytes"),
            HasSubstr("truncated")));
}

TEST_F(DamagedFile, HeaderLengthLargerThanFile) {
  std::string bytes = good_;
  const uint64_t huge = 1ull << 62;
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_THAT(open_error(write(bytes)), HasSubstr(fmt::format("header length {} runs past the end", huge)));
}

TEST_F(DamagedFile, HeaderLengthTooSmallOrTooLarge) {
  EXPECT_THAT(open_error(write(safetensors_bytes("{", "xxxx"))), HasSubstr("header length 1 is too small"));
  // A sparse file, so the test does not write 100 MB.
  std::string bytes = safetensors_bytes("{}", "");
  const uint64_t n = 100'000'001;
  std::memcpy(bytes.data(), &n, 8);
  const auto path = write(bytes);
  std::filesystem::resize_file(path, 100'000'016);
  EXPECT_THAT(open_error(path), HasSubstr("exceeds the 100000000-byte limit"));
}

TEST_F(DamagedFile, CorruptHeaderJson) {
  std::string bytes = good_;
  bytes[8 + 5] = '\x07';
  EXPECT_THAT(open_error(write(bytes)), HasSubstr("header is not valid JSON"));
}

TEST_F(DamagedFile, MissingFileAndDirectory) {
  Result<SafetensorsFile> r = SafetensorsFile::open(dir_ / "absent.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::NotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("absent.safetensors: cannot open"));
  EXPECT_THAT(open_error(dir_.path()), HasSubstr("not a regular file"));
}

TEST_F(DamagedFile, MoveKeepsViewsValid) {
  Result<SafetensorsFile> r = SafetensorsFile::open(dir_ / "good.safetensors");
  ASSERT_TRUE(r.ok());
  SafetensorsFile f = std::move(r).value();
  SafetensorsFile g = std::move(f);
  const TensorInfo* a = g.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(g.view(*a).ptr<float>()[3], 0.0f);
}

}  // namespace
}  // namespace rill::io
