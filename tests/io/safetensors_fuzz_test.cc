// Randomised tests of the safetensors reader: mutated headers fed to parse_safetensors_header, and mutated
// files fed to SafetensorsFile::open. Every rejection must be a clear Status; every acceptance is checked
// against invariants computed here, independently of the parser, and against nlohmann's DOM parse.
//
// The seed is the commit's (tests/test_seed.h) and printed; replay a failure with RILL_TEST_SEED=<seed>,
// explore with RILL_TEST_SEED=random. RILL_FUZZ_ITERATIONS scales the header fuzz (default 200000) for longer
// local runs.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/test_files.h"
#include "test_seed.h"

namespace rill::io {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::test_data_dir;
using testing::write_bytes;

constexpr std::string_view kLabel = "fuzz.safetensors";

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::strtoull(s, nullptr, 0) : fallback;
}

uint64_t fuzz_seed(const char* test) {
  const uint64_t seed = rill::testing::test_seed();
  std::printf("[fuzz] %s seed %llu (replay: RILL_TEST_SEED=%llu)\n", test, (unsigned long long)seed,
              (unsigned long long)seed);
  std::fflush(stdout);
  ::testing::Test::RecordProperty("fuzz_seed", std::to_string(seed));
  return seed;
}

class Fuzzer {
 public:
  explicit Fuzzer(uint64_t seed) : rng_(seed) {}

  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  // A valid header (as JSON text, fields as editable text) and the data size it needs, then structural
  // mutations (duplicates, wrong types, deep nesting, bad numbers) applied with some probability.
  std::string header(uint64_t* data_bytes) {
    struct Entry {
      std::string key;                                          // JSON text of the key
      std::vector<std::pair<std::string, std::string>> fields;  // (key text, value text); empty: raw value
      std::string raw;                                          // used when fields is empty
    };
    static const std::vector<std::string> kNames = {"w",
                                                    "model.norm.weight",
                                                    "",
                                                    "a.b.c",
                                                    "\u00e9\u4e2d",
                                                    "\"q\"",
                                                    "x\\y",
                                                    "__metadata",
                                                    "t\u0001",
                                                    "layers.0.mlp.down_proj.weight"};
    static const std::vector<DType> kDtypes = {DType::BF16, DType::F16, DType::F32, DType::F8E4M3, DType::U8,
                                               DType::I8,   DType::I32, DType::I64, DType::Bool};
    std::vector<Entry> entries;
    std::set<std::string> used;
    const uint64_t n = below(7);
    uint64_t offset = 0;
    for (uint64_t i = 0; i < n; ++i) {
      std::string name = pick(kNames) + (chance(0.5) ? std::to_string(i) : "");
      if (!used.insert(name).second) continue;
      const DType dtype = pick(kDtypes);
      std::string shape = "[";
      uint64_t numel = 1;
      const uint64_t rank = below(6);
      for (uint64_t d = 0; d < rank; ++d) {
        const uint64_t dim = chance(0.1) ? 0 : 1 + below(5);
        numel *= dim;
        shape += (d ? "," : "") + std::to_string(dim);
      }
      shape += "]";
      if (chance(0.2)) offset += below(9);            // gaps are legal
      if (chance(0.04)) offset -= below(offset + 1);  // overlaps are not, sizes still consistent
      const uint64_t end = offset + numel * dtype_size(dtype);
      Entry e{nlohmann::json(name).dump(), {}, {}};
      e.fields = {{"\"dtype\"", "\"" + std::string(dtype_name(dtype)) + "\""},
                  {"\"shape\"", shape},
                  {"\"data_offsets\"", "[" + std::to_string(offset) + "," + std::to_string(end) + "]"}};
      std::shuffle(e.fields.begin(), e.fields.end(), rng_);
      entries.push_back(std::move(e));
      offset = end;
    }
    if (chance(0.5)) {
      std::string meta = "{";
      const uint64_t m = below(4);
      for (uint64_t i = 0; i < m; ++i) meta += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
      entries.push_back({"\"__metadata__\"", {}, meta + "}"});
    }
    std::shuffle(entries.begin(), entries.end(), rng_);
    *data_bytes = offset;

    // Structural mutations: each is rare, so many headers stay valid and acceptance is exercised too.
    static const std::vector<std::string> kBadValues = {"-1",
                                                        "1.5",
                                                        "2.0",
                                                        "1e3",
                                                        "-0",
                                                        "18446744073709551615",
                                                        "18446744073709551616",
                                                        "9223372036854775807",
                                                        "9223372036854775808",
                                                        "4294967296",
                                                        "null",
                                                        "true",
                                                        "\"3\"",
                                                        "[]",
                                                        "{}",
                                                        "[1,2,3]",
                                                        "-9223372036854775809"};
    static const std::vector<std::string> kBadDtypes = {"\"F64\"", "\"bf16\"",    "\"\"",
                                                        "\"I16\"", "\"F8_E5M2\"", "7"};
    auto random_entry = [&]() -> Entry* {
      std::vector<Entry*> tensors;
      for (Entry& e : entries)
        if (!e.fields.empty()) tensors.push_back(&e);
      return tensors.empty() ? nullptr : tensors[below(tensors.size())];
    };
    if (chance(0.06) && !entries.empty()) entries.push_back(entries[below(entries.size())]);  // duplicate key
    if (Entry* e = random_entry(); e && chance(0.05)) e->fields.push_back(e->fields[below(e->fields.size())]);
    if (Entry* e = random_entry(); e && chance(0.05)) e->fields.erase(e->fields.begin() + long(below(3)));
    if (Entry* e = random_entry(); e && chance(0.04)) e->fields.push_back({"\"extra\"", "1"});
    if (Entry* e = random_entry(); e && chance(0.06)) field(*e, "\"dtype\"") = pick(kBadDtypes);
    if (Entry* e = random_entry(); e && chance(0.1))
      field(*e, chance(0.5) ? "\"shape\"" : "\"data_offsets\"") = array_with_bad_number();
    if (Entry* e = random_entry(); e && chance(0.06)) {  // make it overlap or collide with another
      Entry* other = random_entry();
      field(*e, "\"data_offsets\"") = field(*other, "\"data_offsets\"");
    }
    if (Entry* e = random_entry(); e && chance(0.03)) field(*e, "\"shape\"") = "[1,1,1,1,1,1]";
    if (Entry* e = random_entry(); e && chance(0.03)) *e = Entry{e->key, {}, deep_nesting()};
    if (chance(0.03))
      entries.push_back(
          {"\"__metadata__\"", {}, chance(0.5) ? "{\"k\":" + pick(kBadValues) + "}" : deep_nesting()});
    if (chance(0.02)) entries.push_back({"\"w" + std::to_string(below(9)) + "\"", {}, pick(kBadValues)});

    const char* sep = chance(0.2) ? " \n\t" : "";
    std::string out = "{";
    for (size_t i = 0; i < entries.size(); ++i) {
      out += (i ? "," : "") + std::string(sep) + entries[i].key + sep + ":";
      if (entries[i].fields.empty()) {
        out += entries[i].raw;
        continue;
      }
      out += "{";
      for (size_t f = 0; f < entries[i].fields.size(); ++f) {
        out += (f ? "," : "") + entries[i].fields[f].first + ":" + sep + entries[i].fields[f].second;
      }
      out += "}";
    }
    out += std::string(sep) + "}";
    if (chance(0.3)) out.append(below(8), ' ');  // the Python writer's padding
    return out;
  }

  // Byte-level mutations: flips, insertions of JSON-significant tokens, deletions, truncation, and
  // replacing a number with an extreme one.
  void mutate_bytes(std::string& s) {
    static const std::vector<std::string> kTokens = {"{",
                                                     "}",
                                                     "[",
                                                     "]",
                                                     "\"",
                                                     ",",
                                                     ":",
                                                     "0",
                                                     "-1",
                                                     "1.5",
                                                     "1e309",
                                                     "18446744073709551615",
                                                     "18446744073709551616",
                                                     "null",
                                                     "true",
                                                     "\\",
                                                     "\\u0000",
                                                     "\\ud800",
                                                     "\xff",
                                                     "\xc3",
                                                     "\xe2\x82",
                                                     " ",
                                                     "\n",
                                                     "\"__metadata__\"",
                                                     "\"dtype\"",
                                                     "\"shape\"",
                                                     "\"data_offsets\"",
                                                     "\"F32\"",
                                                     "\"BOOL\"",
                                                     std::string(1, '\0')};
    static const std::vector<std::string> kNumbers = {"0",
                                                      "-1",
                                                      "-0",
                                                      "1.5",
                                                      "1e2",
                                                      "18446744073709551615",
                                                      "18446744073709551616",
                                                      "9223372036854775807",
                                                      "4294967297",
                                                      "99999999999999999999999",
                                                      "-9223372036854775808"};
    switch (below(7)) {
      case 0:
        if (!s.empty()) s[below(s.size())] = char(below(256));
        break;
      case 1:
        if (!s.empty()) s[below(s.size())] ^= char(1u << below(8));
        break;
      case 2:
        s.insert(below(s.size() + 1), pick(kTokens));
        break;
      case 3:
        if (!s.empty()) {
          const uint64_t at = below(s.size());
          s.erase(at, 1 + below(std::min<uint64_t>(16, s.size() - at)));
        }
        break;
      case 4:
        s.resize(below(s.size() + 1));
        break;
      case 5: {  // replace one run of digits (with its sign) by an extreme number
        std::vector<std::pair<size_t, size_t>> runs;
        for (size_t i = 0; i < s.size();) {
          if (std::isdigit(static_cast<unsigned char>(s[i])) || (s[i] == '-' && i + 1 < s.size())) {
            size_t j = i + 1;
            while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
            runs.emplace_back(i, j - i);
            i = j;
          } else {
            ++i;
          }
        }
        if (!runs.empty()) {
          const auto [at, len] = runs[below(runs.size())];
          s.replace(at, len, pick(kNumbers));
        }
        break;
      }
      case 6: {  // duplicate a ","-delimited span (a field, an array element or a whole entry)
        const size_t at = s.find(',', below(s.size() + 1));
        if (at == std::string::npos) break;
        const size_t next = s.find_first_of(",}]", at + 1);
        if (next != std::string::npos) s.insert(next, s.substr(at, next - at));
        break;
      }
    }
  }

  uint64_t data_bytes_for(uint64_t needed) {
    switch (below(8)) {
      case 0:
        return needed == 0 ? 0 : below(needed);  // too short
      case 1:
        return needed + below(32);
      case 2:
        return std::numeric_limits<uint64_t>::max() - below(4);
      case 3:
        return below(1 << 20);
      default:
        return needed;
    }
  }

 private:
  template <typename E>
  static std::string& field(E& e, const std::string& key) {
    for (auto& [k, v] : e.fields)
      if (k == key) return v;
    e.fields.push_back({key, ""});
    return e.fields.back().second;
  }
  std::string array_with_bad_number() {
    static const std::vector<std::string> kValues = {"-1",
                                                     "1.5",
                                                     "2.0",
                                                     "1e3",
                                                     "-0",
                                                     "18446744073709551615",
                                                     "18446744073709551616",
                                                     "9223372036854775808",
                                                     "4294967296",
                                                     "null",
                                                     "\"3\"",
                                                     "[1]",
                                                     "{}",
                                                     "0"};
    std::string out = "[";
    const uint64_t n = below(4);
    for (uint64_t i = 0; i < n; ++i)
      out += (i ? "," : "") + (chance(0.5) ? pick(kValues) : std::to_string(below(64)));
    return out + "]";
  }
  std::string deep_nesting() {
    const uint64_t depth = 1 + below(chance(0.1) ? 100000 : 64);
    const bool arrays = chance(0.5);
    std::string out;
    for (uint64_t i = 0; i < depth; ++i) out += arrays ? "[" : "{\"a\":";
    if (chance(0.8)) {
      out += "1";
      for (uint64_t i = 0; i < depth; ++i) out += arrays ? "]" : "}";
    }
    return out;
  }

  std::mt19937_64 rng_;
};

// What an accepted header must satisfy, checked without the parser's own code. Returns "" when it holds.
std::string check_invariants(const SafetensorsHeader& h, std::string_view text, uint64_t data_bytes) {
  std::set<std::string> names;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorInfo& t = h.tensors[i];
    if (!names.insert(t.name).second) return "duplicate name " + t.name;
    if (t.name == "__metadata__") return "tensor named __metadata__";
    if (t.shape.rank() > kMaxRank) return "rank";
    unsigned __int128 numel = 1;
    for (int d = 0; d < t.shape.rank(); ++d) {
      if (t.shape[d] < 0) return "negative dim in " + t.name;
      numel *= uint64_t(t.shape[d]);
    }
    if (numel * dtype_size(t.dtype) != t.nbytes) return "nbytes != numel * dtype size for " + t.name;
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset) return "tensor past the data: " + t.name;
    if (i > 0 && h.tensors[i - 1].offset > t.offset) return "not sorted by offset";
    for (size_t j = 0; j < i; ++j) {
      const TensorInfo& u = h.tensors[j];
      if (t.nbytes && u.nbytes &&
          std::max(t.offset, u.offset) < std::min(t.offset + t.nbytes, u.offset + u.nbytes)) {
        return "overlap " + u.name + " / " + t.name;
      }
    }
  }
  // Differential: nlohmann's DOM must agree on every entry (it would also accept duplicates; we must not).
  const nlohmann::json dom = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!dom.is_object()) return "accepted, but nlohmann does not parse an object";
  size_t n_tensors = 0;
  for (const auto& [key, value] : dom.items()) {
    if (key == "__metadata__") {
      if (value.get<std::map<std::string, std::string>>() != h.metadata) return "metadata differs";
      continue;
    }
    ++n_tensors;
    const auto it =
        std::find_if(h.tensors.begin(), h.tensors.end(), [&](const TensorInfo& t) { return t.name == key; });
    if (it == h.tensors.end()) return "missing tensor " + key;
    if (value.at("dtype").get<std::string>() != dtype_name(it->dtype)) return "dtype differs for " + key;
    const auto shape = value.at("shape").get<std::vector<int64_t>>();
    if (!(Shape(std::span<const int64_t>(shape)) == it->shape)) return "shape differs for " + key;
    const auto offs = value.at("data_offsets").get<std::vector<uint64_t>>();
    if (offs.size() != 2 || offs[0] != it->offset || offs[1] - offs[0] != it->nbytes)
      return "offsets differ for " + key;
  }
  if (n_tensors != h.tensors.size()) return "tensor count differs from nlohmann's";
  return "";
}

TEST(SafetensorsFuzz, MutatedHeaders) {
  const uint64_t seed = fuzz_seed("MutatedHeaders");
  const uint64_t iterations = env_u64("RILL_FUZZ_ITERATIONS", 200000);
  Fuzzer fz(seed);
  // A real Python-written header joins the corpus now and then.
  const std::string python_file = read_bytes(test_data_dir() + "/kimi_linear_tiny_a/model.safetensors");
  uint64_t python_len = 0;
  std::memcpy(&python_len, python_file.data(), 8);
  const std::string python_header = python_file.substr(8, python_len);
  const uint64_t python_data = python_file.size() - 8 - python_len;

  uint64_t accepted = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t it = 0; it < iterations; ++it) {
    uint64_t needed = 0;
    std::string text;
    if (fz.chance(0.002)) {
      text = python_header;
      needed = python_data;
    } else {
      text = fz.header(&needed);
    }
    const uint64_t n_mutations = fz.chance(0.5) ? 0 : 1 + fz.below(4);
    for (uint64_t m = 0; m < n_mutations; ++m) fz.mutate_bytes(text);
    const uint64_t data_bytes = fz.data_bytes_for(needed);

    Result<SafetensorsHeader> r = parse_safetensors_header(text, data_bytes, kLabel);
    if (r.ok()) {
      ++accepted;
      const std::string broken = check_invariants(*r, text, data_bytes);
      ASSERT_EQ(broken, "") << "seed " << seed << " iteration " << it << " data_bytes " << data_bytes
                            << "\nheader: " << text;
    } else {
      ASSERT_EQ(r.status().code(), StatusCode::InvalidArgument) << r.status().to_string();
      ASSERT_GT(r.status().message().size(), kLabel.size() + 2) << "seed " << seed << " iteration " << it;
      ASSERT_EQ(r.status().message().rfind(std::string(kLabel) + ": ", 0), 0u) << r.status().message();
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[fuzz] %llu headers, %llu accepted, %.1f s\n", (unsigned long long)iterations,
              (unsigned long long)accepted, secs);
  // Both outcomes must be explored, or the fuzzer is not testing what it claims.
  EXPECT_GT(accepted, iterations / 10);
  EXPECT_LT(accepted, iterations * 9 / 10);
}

TEST(SafetensorsFuzz, MutatedFiles) {
  const uint64_t seed = fuzz_seed("MutatedFiles");
  Fuzzer fz(seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  TempDir dir;
  const auto path = dir / "m.safetensors";
  uint64_t accepted = 0;
  const uint64_t iterations = 3000;
  for (uint64_t it = 0; it < iterations; ++it) {
    // A valid file from the writer, then damage to the prefix, the header, the data or the length.
    std::vector<HostTensor> owned;
    std::vector<NamedTensor> tensors;
    const uint64_t n = fz.below(4);
    for (uint64_t i = 0; i < n; ++i) {
      const DType dtype = std::vector<DType>{DType::BF16, DType::F32, DType::U8, DType::I64}[fz.below(4)];
      owned.push_back(HostTensor::zeros(dtype, {int64_t(fz.below(4)), int64_t(1 + fz.below(3))}));
      tensors.push_back({"t" + std::to_string(i), owned.back().view});
    }
    ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).ok());
    std::string bytes = read_bytes(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    std::string header = bytes.substr(8, header_len), data = bytes.substr(8 + header_len);
    switch (fz.below(5)) {
      case 0:
        header_len += fz.below(33) - 16;
        break;  // length prefix off by a little
      case 1:
        header_len = rng() >> fz.below(64);
        break;  // or by a lot
      case 2:
        fz.mutate_bytes(header);
        header_len = header.size();
        break;
      case 3:
        fz.mutate_bytes(header);
        break;  // prefix now stale
      case 4:
        fz.mutate_bytes(data);
        break;  // truncation or growth of the data
    }
    bytes.assign(8, '\0');
    std::memcpy(bytes.data(), &header_len, 8);
    bytes += header + data;
    if (fz.chance(0.2)) bytes.resize(fz.below(bytes.size() + 1));
    write_bytes(path, bytes);

    Result<SafetensorsFile> f = SafetensorsFile::open(path);
    if (!f.ok()) {
      ASSERT_EQ(f.status().message().rfind(path.string() + ": ", 0), 0u) << f.status().message();
      continue;
    }
    ++accepted;
    ASSERT_EQ(f->file_size(), bytes.size());
    std::memcpy(&header_len, bytes.data(), 8);
    const uint64_t data_bytes = bytes.size() - 8 - header_len;
    for (const TensorInfo& t : f->tensors()) {
      ASSERT_LE(t.offset + t.nbytes, data_bytes) << "seed " << seed << " iteration " << it;
      // Touches every byte of the view (a bad offset faults or differs) and checks it maps the right bytes.
      const TensorView v = f->view(t);
      ASSERT_EQ(std::memcmp(v.data, bytes.data() + 8 + header_len + t.offset, t.nbytes), 0)
          << "seed " << seed << " iteration " << it;
    }
  }
  std::printf("[fuzz] %llu files, %llu accepted\n", (unsigned long long)iterations,
              (unsigned long long)accepted);
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace rill::io
