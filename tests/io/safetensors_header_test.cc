// parse_safetensors_header: what it accepts and, above all, how it rejects bad headers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/safetensors.h"

namespace rill::io {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::string_view kLabel = "model-00001.safetensors";

// Parses a header expected to fail and returns its message (checked to start with the label).
std::string error_of(std::string_view header, uint64_t data_bytes = 1 << 20) {
  Result<SafetensorsHeader> r = parse_safetensors_header(header, data_bytes, kLabel);
  EXPECT_FALSE(r.ok()) << "accepted: " << header;
  if (r.ok()) return {};
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  // (the prefix built by append: GCC 12 at -O2 flags std::string(kLabel) + ": " with a false -Warray-bounds
  // once the string headers come from the precompiled header)
  std::string prefix(kLabel);
  prefix.append(": ");
  EXPECT_THAT(r.status().message(), StartsWith(prefix));
  return r.status().message();
}

TEST(SafetensorsHeader, ParsesTensorsAndMetadata) {
  Result<SafetensorsHeader> r =
      parse_safetensors_header(R"({"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
                               R"("__metadata__":{"format":"pt","note":""},)"
                               R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}   )",
                               28, kLabel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[0].name, "a");  // sorted by offset, not by header order
  EXPECT_EQ(r->tensors[0].dtype, DType::F32);
  EXPECT_EQ(r->tensors[0].shape, Shape({4}));
  EXPECT_EQ(r->tensors[1].name, "b");
  EXPECT_EQ(r->tensors[1].shape, Shape({2, 3}));
  EXPECT_EQ(r->tensors[1].offset, 16u);
  EXPECT_EQ(r->tensors[1].nbytes, 12u);
  EXPECT_EQ(r->metadata.at("format"), "pt");
  EXPECT_EQ(r->metadata.at("note"), "");
}

TEST(SafetensorsHeader, AcceptsScalarsEmptyTensorsAndGaps) {
  Result<SafetensorsHeader> r =
      parse_safetensors_header(R"({"s":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                               R"("e1":{"dtype":"F32","shape":[0,4],"data_offsets":[12,12]},)"
                               R"("e2":{"dtype":"BOOL","shape":[3,0],"data_offsets":[12,12]},)"
                               R"("g":{"dtype":"U8","shape":[1],"data_offsets":[40,41]}})",
                               64, kLabel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tensors.size(), 4u);
  EXPECT_TRUE(r->metadata.empty());
}

TEST(SafetensorsHeader, AcceptsEmptyHeaderObject) {
  Result<SafetensorsHeader> r = parse_safetensors_header("{}", 0, kLabel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->tensors.empty());
}

TEST(SafetensorsHeader, RejectsCorruptJson) {
  EXPECT_THAT(error_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})"),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of(R"({"a":{"dtype":"F32",,"shape":[1]}})"), HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} trailing)"),
              HasSubstr("not valid JSON"));
  // Invalid UTF-8 inside a string; raw bytes never reach the message.
  const std::string bad_utf8 = error_of("{\"a\xff\":{}}");
  EXPECT_THAT(bad_utf8, AllOf(HasSubstr("not valid JSON"), HasSubstr("UTF-8")));
  EXPECT_EQ(bad_utf8.find('\xff'), std::string::npos);
  EXPECT_EQ(error_of("{\"a\":\x01}").find('\x01'), std::string::npos);
}

TEST(SafetensorsHeader, RejectsNonObjectHeader) {
  EXPECT_THAT(error_of("[1,2,3]"), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(error_of("\"str\""), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(error_of(""), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(error_of("\xEF\xBB\xBF{}"), HasSubstr("header is not a JSON object"));  // BOM
}

TEST(SafetensorsHeader, RejectsNonObjectEntry) {
  EXPECT_THAT(error_of(R"({"w":[1,2]})"), HasSubstr("tensor 'w': entry must be an object, got an array"));
  EXPECT_THAT(error_of(R"({"w":null})"), HasSubstr("tensor 'w': entry must be an object, got null"));
}

TEST(SafetensorsHeader, RejectsUnknownDtype) {
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})"),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("unknown dtype 'F64'")));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})"),
              HasSubstr("unknown dtype 'bf16'"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})"),
              HasSubstr("tensor 'w': dtype must be a string, got 4"));
}

TEST(SafetensorsHeader, RejectsByteLengthThatDisagreesWithDtypeAndShape) {
  EXPECT_EQ(
      error_of(R"({"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,10]}})"),
      "model-00001.safetensors: tensor 'model.norm.weight': data_offsets [0, 10] hold 10 bytes but F32[4] "
      "needs 16");
  EXPECT_THAT(error_of(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})"),
              HasSubstr("hold 24 bytes but BF16[2, 3] needs 12"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"I64","shape":[],"data_offsets":[0,4]}})"),
              HasSubstr("hold 4 bytes but I64[] needs 8"));
}

TEST(SafetensorsHeader, RejectsOffsetsPastTheData) {
  EXPECT_THAT(
      error_of(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 20),
      AllOf(HasSubstr("tensor 'w': data_offsets [8, 24] run past the end of the data section (20 bytes"),
            HasSubstr("truncated")));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[21,21]}})", 20),
              HasSubstr("run past the end"));
}

TEST(SafetensorsHeader, RejectsBeginAfterEnd) {
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})"),
              HasSubstr("tensor 'w': data_offsets [8, 4]: begin is past end"));
}

TEST(SafetensorsHeader, RejectsOverlappingTensors) {
  EXPECT_THAT(error_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}})"),
              HasSubstr("tensors 'a' [0, 16] and 'b' [12, 28] overlap"));
  // Contained in an earlier, longer tensor, with a non-overlapping one in between in offset order.
  EXPECT_THAT(error_of(R"({"big":{"dtype":"U8","shape":[100],"data_offsets":[0,100]},)"
                       R"("x":{"dtype":"U8","shape":[10],"data_offsets":[10,20]},)"
                       R"("y":{"dtype":"U8","shape":[10],"data_offsets":[50,60]}})"),
              HasSubstr("tensors 'big' [0, 100] and 'x' [10, 20] overlap"));
  EXPECT_THAT(error_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}})"),
              HasSubstr("overlap"));
}

TEST(SafetensorsHeader, RejectsDuplicateNames) {
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
              HasSubstr("tensor 'w' appears twice"));
  EXPECT_THAT(error_of(R"({"__metadata__":{},"__metadata__":{}})"),
              HasSubstr("'__metadata__' appears twice"));
  EXPECT_THAT(error_of(R"({"__metadata__":{"k":"a","k":"b"}})"),
              HasSubstr("__metadata__ key 'k' appears twice"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})"),
              HasSubstr("tensor 'w': field 'dtype' appears twice"));
}

TEST(SafetensorsHeader, RejectsNegativeOrNonIntegerShape) {
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"),
              HasSubstr("tensor 'w': shape must hold non-negative integers, got -1"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})"),
              HasSubstr("shape must hold non-negative integers, got 1.5"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1e2],"data_offsets":[0,400]}})"),
              HasSubstr("got 1e2"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})"),
              HasSubstr("got \"2\""));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})"),
              HasSubstr("got an array"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})"),
              HasSubstr("shape must be an array of integers, got 4"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})"),
              HasSubstr("data_offsets must hold non-negative integers, got -4"));
  // One past uint64: nlohmann reads it as a float.
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})"),
              HasSubstr("non-negative integers"));
}

TEST(SafetensorsHeader, RejectsOversizedShapes) {
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1],"data_offsets":[0,4]}})"),
              HasSubstr("shape has more than 5 dimensions"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
              HasSubstr("has too many elements"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
              HasSubstr("has too many elements"));
  // Fits in int64 elements, but not in uint64 bytes.
  EXPECT_THAT(error_of(R"({"w":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
              HasSubstr("is too large"));
  // An empty tensor with huge other dims is still refused: strides would overflow.
  EXPECT_THAT(error_of(R"({"w":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
              HasSubstr("has too many elements"));
}

TEST(SafetensorsHeader, RejectsMissingAndUnknownFields) {
  EXPECT_THAT(error_of(R"({"w":{"shape":[1],"data_offsets":[0,4]}})"),
              HasSubstr("tensor 'w': missing field 'dtype'"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})"), HasSubstr("missing field 'shape'"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1]}})"), HasSubstr("missing field 'data_offsets'"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})"),
              HasSubstr("tensor 'w': unknown field 'extra'"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})"),
              HasSubstr("data_offsets must be [begin, end], got 1 value(s)"));
  EXPECT_THAT(error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})"),
              HasSubstr("data_offsets must be [begin, end], got more than 2 values"));
}

TEST(SafetensorsHeader, RejectsNonStringMetadata) {
  EXPECT_THAT(error_of(R"({"__metadata__":{"format":"pt","step":100}})"),
              HasSubstr("__metadata__ value of 'step' must be a string, got 100"));
  EXPECT_THAT(error_of(R"({"__metadata__":{"nested":{"a":"b"}}})"),
              HasSubstr("value of 'nested' must be a string, got an object"));
  EXPECT_THAT(error_of(R"({"__metadata__":["pt"]})"), HasSubstr("__metadata__ must be an object of strings"));
  EXPECT_THAT(error_of(R"({"__metadata__":null})"), HasSubstr("__metadata__ must be an object of strings"));
}

TEST(SafetensorsHeader, StopsEarlyOnDeepNesting) {
  const std::string deep = R"({"w":)" + std::string(200000, '[') + std::string(200000, ']') + "}";
  EXPECT_THAT(error_of(deep), HasSubstr("entry must be an object, got an array"));
  const std::string deep_meta = R"({"__metadata__":{"k":)" + std::string(200000, '{');
  EXPECT_THAT(error_of(deep_meta), HasSubstr("must be a string"));
}

TEST(SafetensorsHeader, EscapesHostileNamesInMessages) {
  const std::string long_name(5000, 'x');
  const std::string msg =
      error_of(R"({")" + long_name + R"(\u001b[31m":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})");
  EXPECT_LT(msg.size(), 600u);
  EXPECT_EQ(msg.find('\x1b'), std::string::npos);
  const std::string msg2 = error_of(R"({"a\u001b[31m":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})");
  EXPECT_THAT(msg2, HasSubstr("tensor 'a\\x1b[31m'"));
}

}  // namespace
}  // namespace rill::io
