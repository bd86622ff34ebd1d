// Unit tests for src/text/tokenizer: loading (and refusing malformed files), specials, decode errors, the
// incremental detokenizer, the pre-tokenizer on the spec's vectors, and the two BPE merge strategies.
// Ids against OpenAI's tiktoken are checked by tiktoken_reference_test.mjs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "shared_data.h"
#include "test_seed.h"
#include "text/tokenizer/bpe_ranks.h"
#include "text/tokenizer/kimi_pretokenizer.h"
#include "text/tokenizer/mixed_corpus.h"
#include "text/tokenizer/tiktoken_file.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"

namespace rill::text {
namespace {

namespace fs = std::filesystem;
const fs::path kKimiDir = rill::testing::shared_path(rill::testing::kKimiTokenizerDir);

// The real Kimi vocabulary; a test calls RILL_REQUIRE_KIMI_TOKENIZER() first.
const Tokenizer& kimi() {
  static const Tokenizer* tokenizer = [] {
    auto t = Tokenizer::load(kKimiDir);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("rill_tok_" + std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path write(const std::string& name, const std::string& contents) const {
    std::ofstream(path_ / name, std::ios::binary) << contents;
    return path_ / name;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A minimal valid tiktoken.model: the 256 bytes, then `extra` tokens.
std::string byte_ranks(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> ranks;
  for (int b = 0; b < 256; ++b) ranks.emplace_back(1, static_cast<char>(b));
  ranks.insert(ranks.end(), extra.begin(), extra.end());
  return format_tiktoken_model(ranks);
}

TEST(TokenizerLoad, RealKimiFiles) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& t = kimi();
  // tiktoken.model has one line per rank; the control block follows.
  std::ifstream in(kKimiDir / "tiktoken.model");
  int32_t lines = 0;
  for (std::string line; std::getline(in, line);) lines += !line.empty();
  EXPECT_EQ(t.n_ranks(), lines);
  EXPECT_EQ(t.vocab_size(), lines + 256);
  // Every named entry of the config resolves to its id; the rest are reserved names.
  const auto config = nlohmann::json::parse(std::ifstream(kKimiDir / "tokenizer_config.json"));
  for (const auto& [key, entry] : config["added_tokens_decoder"].items()) {
    const int32_t id = std::stoi(key);
    EXPECT_EQ(t.token_id(entry["content"].get<std::string>()), id);
    EXPECT_EQ(t.token_bytes(id), entry["content"].get<std::string>());
    EXPECT_TRUE(t.is_special(id));
    // skip_special_tokens drops what the config flags special (K2's tool-call markers and think tags are
    // not).
    EXPECT_EQ(t.is_skipped_special(id), entry["special"].get<bool>()) << entry["content"];
  }
  EXPECT_FALSE(t.is_skipped_special(*t.token_id("<|tool_call_begin|>")));
  EXPECT_TRUE(t.is_skipped_special(*t.token_id("<|im_end|>")));
  const int32_t reserved = t.n_ranks() + 200;
  EXPECT_TRUE(t.is_skipped_special(reserved)) << "reserved ids are special";
  EXPECT_FALSE(t.is_skipped_special(t.n_ranks() - 1));
  EXPECT_FALSE(t.is_skipped_special(t.vocab_size()));
  EXPECT_EQ(t.token_id("<|reserved_token_" + std::to_string(reserved) + "|>"), reserved);
  EXPECT_FALSE(t.token_id("<|not_a_token|>").has_value());
  EXPECT_FALSE(t.is_special(t.n_ranks() - 1));
  EXPECT_FALSE(t.is_special(t.vocab_size()));
}

void expect_load_error(const std::string& model, const std::string& config, const std::string& needle) {
  TempDir dir;
  dir.write("tiktoken.model", model);
  dir.write("tokenizer_config.json", config);
  auto t = Tokenizer::load(dir.path());
  ASSERT_FALSE(t.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
}

TEST(TokenizerLoad, MalformedModelFileNamesFileAndLine) {
  const std::string ok_config = "{}";
  std::string model = byte_ranks();
  expect_load_error(model + "!!!= 256\n", ok_config, "tiktoken.model:257: bad base64");
  expect_load_error(model + "YWI= x12\n", ok_config, "tiktoken.model:257: bad rank 'x12'");
  expect_load_error(model + "YWI= -3\n", ok_config, "tiktoken.model:257: bad rank");
  expect_load_error(model + "YWI=256\n", ok_config, "tiktoken.model:257: expected '<base64 token> <rank>'");
  expect_load_error(model + "YWI= 255\n", ok_config,
                    "tiktoken.model:257: duplicate rank 255 (first on line 256)");
  expect_load_error(model + "YQ== 256\n", ok_config, "duplicate token 'YQ=='");
  expect_load_error(model + "YWI= 300\n", ok_config, "rank 256 is missing");
  expect_load_error(format_tiktoken_model({"a", "b"}), ok_config, "byte 0x00 has no token");
  expect_load_error("", ok_config, "no ranks");
  // Non-canonical base64 (non-zero padding bits) is refused rather than silently accepted.
  expect_load_error(model + "YWJ= 256\n", ok_config, "bad base64");
  // A missing file is NotFound and names the path.
  TempDir dir;
  dir.write("tokenizer_config.json", ok_config);
  auto t = Tokenizer::load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::NotFound);
  EXPECT_NE(t.status().message().find("tiktoken.model"), std::string::npos);
}

TEST(TokenizerLoad, CrlfAndBlankLinesAreAccepted) {
  std::string model = byte_ranks({"ab"});
  std::string crlf;
  for (char c : model) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  TempDir dir;
  dir.write("tiktoken.model", crlf + "\n\n");
  dir.write("tokenizer_config.json", "{}");
  auto t = Tokenizer::load(dir.path());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->n_ranks(), 257);
  EXPECT_EQ(t->encode("ab", false), std::vector<int32_t>{256});
}

TEST(TokenizerLoad, MalformedConfig) {
  const std::string model = byte_ranks();
  expect_load_error(model, "{\"added_tokens_decoder\": {\n  \"256\": {\"content\": \"[BOS]\",}\n}}",
                    "tokenizer_config.json: [json.exception.parse_error.101] parse error at line 2");
  expect_load_error(model, R"({"added_tokens_decoder": {"255": {"content": "[BOS]"}}})",
                    "id 255 is outside the control block [256, 512)");
  expect_load_error(model, R"({"added_tokens_decoder": {"x": {"content": "[BOS]"}}})",
                    "key 'x' is not a token id");
  expect_load_error(model, R"({"added_tokens_decoder": {"256": {"content": ""}}})",
                    "must be a non-empty string");
  expect_load_error(model, R"({"added_tokens_decoder": {"256": {"content": 3}}})",
                    "must be a non-empty string");
  expect_load_error(model, R"({"added_tokens_decoder": {"256": {"content": "[A]", "special": "yes"}}})",
                    "added_tokens_decoder[\"256\"].special must be a boolean");
  expect_load_error(model,
                    R"({"added_tokens_decoder": {"256": {"content": "[A]"}, "300": {"content": "[A]"}}})",
                    "special token '[A]' names both id 256 and id 300");
  expect_load_error(model, R"({"added_tokens_decoder": {"256": {"content": "<|reserved_token_300|>"}}})",
                    "names both id 256 and id 300");
  expect_load_error(model, "[1, 2]", "expected a JSON object");
}

TEST(TokenizerEncode, EmptyInput) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  EXPECT_TRUE(kimi().encode("", false).empty());
  EXPECT_TRUE(kimi().encode("", true).empty());
  auto text = kimi().decode({});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "");
}

TEST(TokenizerEncode, SpecialsOnlyWhenAllowed) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& t = kimi();
  const int32_t im_end = *t.token_id("<|im_end|>");
  const std::string text = "hi<|im_end|>there<|im_end";
  const auto allowed = t.encode(text, true);
  const auto plain = t.encode(text, false);
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), im_end), 1);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_end), 0);
  for (int32_t id : plain) EXPECT_FALSE(t.is_special(id));
  // Text around a special is encoded as if the special were the end / start of the text.
  std::vector<int32_t> expected = t.encode("hi", false);
  expected.push_back(im_end);
  const auto rest = t.encode("there<|im_end", false);
  expected.insert(expected.end(), rest.begin(), rest.end());
  EXPECT_EQ(allowed, expected);
  EXPECT_EQ(*t.decode(allowed), text);
  EXPECT_EQ(*t.decode(plain), text);
}

TEST(TokenizerDecode, OutOfVocabularyIdsAreNamed) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& t = kimi();
  for (const int32_t bad : {-1, t.vocab_size(), t.vocab_size() + 7, 1 << 30}) {
    const std::vector<int32_t> ids = {100, bad};
    auto text = t.decode(ids);
    ASSERT_FALSE(text.ok());
    EXPECT_EQ(text.status().code(), StatusCode::OutOfRange);
    EXPECT_NE(text.status().message().find("token id " + std::to_string(bad)), std::string::npos);
    IncrementalDetokenizer detok(t);
    EXPECT_FALSE(detok.push(bad).ok());
  }
}

// Ids of single-byte tokens, so text can be split into tokens at every byte.
std::vector<int32_t> byte_token_ids(const Tokenizer& t) {
  std::vector<int32_t> ids(256, -1);
  for (int32_t id = 0; id < t.n_ranks(); ++id) {
    const std::string_view b = t.token_bytes(id);
    if (b.size() == 1) ids[static_cast<unsigned char>(b[0])] = id;
  }
  return ids;
}

TEST(IncrementalDetokenizer, EverySplitOfMultiByteSequences) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& t = kimi();
  const std::vector<int32_t> byte_ids = byte_token_ids(t);
  const std::string text = "aé中😀\u0301 ok 한국어 𝔘";
  // Split the text at every pair of byte positions: [0, i) [i, j) [j, n), each part byte-tokenized or
  // encoded normally, so multi-byte characters straddle token boundaries in every way.
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      std::vector<int32_t> ids = t.encode(text.substr(0, i), false);
      for (size_t k = i; k < j; ++k) ids.push_back(byte_ids[static_cast<unsigned char>(text[k])]);
      const auto tail = t.encode(text.substr(j), false);
      ids.insert(ids.end(), tail.begin(), tail.end());
      IncrementalDetokenizer detok(t);
      std::string streamed;
      for (int32_t id : ids) {
        auto piece = detok.push(id);
        ASSERT_TRUE(piece.ok());
        ASSERT_TRUE(utf8_is_valid(*piece)) << "split " << i << "," << j;
        streamed += *piece;
      }
      streamed += detok.flush();
      ASSERT_EQ(streamed, text) << "split " << i << "," << j;
    }
  }
}

TEST(IncrementalDetokenizer, MatchesDecodeOnArbitraryBytes) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& t = kimi();
  const std::vector<int32_t> byte_ids = byte_token_ids(t);
  const uint32_t seed = rill::testing::test_seed();
  std::mt19937 rng(seed);
  const std::vector<int32_t> specials = {*t.token_id("<|im_end|>"), *t.token_id("[BOS]")};
  for (int round = 0; round < 3000; ++round) {
    std::vector<int32_t> ids;
    const int n = rng() % 12;
    for (int k = 0; k < n; ++k) {
      const uint32_t r = rng() % 10;
      if (r < 5) {
        ids.push_back(byte_ids[0x80 + rng() % 0x80]);  // continuation and lead bytes, often ill-formed
      } else if (r < 8) {
        ids.push_back(rng() % t.n_ranks());
      } else if (r < 9) {
        ids.push_back(specials[rng() % 2]);
      } else {
        ids.push_back(byte_ids[rng() % 0x80]);
      }
    }
    IncrementalDetokenizer detok(t);
    std::string streamed;
    for (int32_t id : ids) {
      auto piece = detok.push(id);
      ASSERT_TRUE(piece.ok());
      ASSERT_TRUE(utf8_is_valid(*piece));
      streamed += *piece;
    }
    streamed += detok.flush();
    ASSERT_EQ(streamed, *t.decode(ids)) << "seed " << seed << " round " << round;
  }
}

// U+FFFD placement must be Python's bytes.decode("utf-8", "replace"): compare with python3 itself.
TEST(Utf8, SanitizeMatchesPython) {
  const uint32_t seed = rill::testing::test_seed();
  std::mt19937 rng(seed);
  const unsigned char interesting[] = {0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                                       0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
  TempDir dir;
  std::string hex_lines;
  std::vector<std::string> inputs;
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    const int n = rng() % 9;
    for (int k = 0; k < n; ++k) s += static_cast<char>(interesting[rng() % sizeof(interesting)]);
    inputs.push_back(s);
    for (unsigned char c : s) hex_lines += fmt::format("{:02x}", c);
    hex_lines += '\n';
  }
  const fs::path in = dir.write("in.hex", hex_lines);
  const fs::path out = dir.path() / "out.hex";
  const std::string cmd = fmt::format(
      "python3 -c \"import sys\nfor l in open(sys.argv[1]): "
      "print(bytes.fromhex(l.strip()).decode('utf-8','replace')"
      ".encode().hex())\" {} > {}",
      in.string(), out.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream expected(out);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string want;
    ASSERT_TRUE(std::getline(expected, want));
    std::string got;
    utf8_append_sanitized(inputs[i], got);
    std::string got_hex;
    for (unsigned char c : got) got_hex += fmt::format("{:02x}", c);
    ASSERT_EQ(got_hex, want) << "seed " << seed << " input #" << i;
  }
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  KimiPreTokenizer().split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

// The pre-token vectors of serving.md §2.1 (computed there with Python `regex`).
TEST(KimiPreTokenizer, SpecVectors) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("HelloWorld"), (V{"Hello", "World"}));
  EXPECT_EQ(pieces("getHTTPResponse"), (V{"get", "HTTPResponse"}));
  EXPECT_EQ(pieces("I'M here"), (V{"I'M", " here"}));
  EXPECT_EQ(pieces("中文abc混合Test"), (V{"中文", "abc", "混合", "Test"}));
  EXPECT_EQ(pieces("12345 67"), (V{"123", "45", " ", "67"}));
  EXPECT_EQ(pieces("hello   world\n\n  x"), (V{"hello", "  ", " world", "\n\n", " ", " x"}));
  EXPECT_EQ(pieces("naïve café"), (V{"naïve", " café"}));
  EXPECT_TRUE(pieces("").empty());
}

TEST(BpeRanks, ScanAndHeapMergeAgree) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& t = kimi();
  std::vector<std::string> tokens;
  for (int32_t id = 0; id < t.n_ranks(); ++id) tokens.emplace_back(t.token_bytes(id));
  const BpeRanks ranks(tokens);
  const std::string corpus = testing::make_mixed_corpus(1 << 16);
  const uint32_t seed = rill::testing::test_seed();
  std::mt19937 rng(seed);
  for (int i = 0; i < 300; ++i) {
    // Long pieces (as a pathological pre-token would be) taken from real text and random bytes.
    const size_t len = 1 + rng() % 600, start = rng() % (corpus.size() - len);
    std::string piece = corpus.substr(start, len);
    if (i % 3 == 0)
      for (char& c : piece) c = static_cast<char>(rng() % 4 == 0 ? rng() : c);
    std::vector<int32_t> scan, heap;
    ranks.merge_scan(piece, scan);
    ranks.merge_heap(piece, heap);
    ASSERT_EQ(scan, heap) << "seed " << seed << " piece #" << i;
    std::string joined;
    for (int32_t id : heap) joined += ranks.token(id);
    ASSERT_EQ(joined, piece);
  }
}

TEST(Base64, RoundTrip) {
  std::mt19937 rng(7);
  for (int n = 0; n < 40; ++n) {
    std::string bytes;
    for (int k = 0; k < n; ++k) bytes += static_cast<char>(rng());
    std::string back;
    if (n == 0) continue;  // an empty token is not valid in tiktoken.model
    ASSERT_TRUE(base64_decode(base64_encode(bytes), &back));
    EXPECT_EQ(back, bytes);
  }
  std::string out;
  EXPECT_FALSE(base64_decode("YQ=", &out));
  EXPECT_FALSE(base64_decode("Y=Q=", &out));
  EXPECT_FALSE(base64_decode("YQ==YQ==", &out));
}

}  // namespace
}  // namespace rill::text
