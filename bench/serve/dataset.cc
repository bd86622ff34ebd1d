#include "bench/serve/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <tuple>

namespace rill::bench::serve {
namespace {

using Json = nlohmann::ordered_json;

// vLLM's rule: lengths uniform in [floor(len * (1 - r)), ceil(len * (1 + r))], here at least 1.
std::uniform_int_distribution<int> length_range(int len, double ratio) {
  const int lo = std::max(1, int(std::floor(len * (1 - ratio))));
  const int hi = std::max(lo, int(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi);
}

bool is_id_array(const Json& j) {
  if (!j.is_array() || j.empty()) return false;
  for (const Json& e : j)
    if (!e.is_number_integer() || e.get<int64_t>() < 0) return false;
  return true;
}

Result<BenchPrompt> parse_line(const std::string& line, const std::string& where, int default_output_len) {
  BenchPrompt p{Json(line), default_output_len};
  const char first = line[0];
  if (first != '{' && first != '"' && first != '[') return p;
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    if (first == '{')
      return invalid_argument("{}: not valid JSON (a line starting with '{{' must be an object)", where);
    return p;  // text that happens to start with a quote or a bracket
  }
  if (j.is_string() || is_id_array(j)) {
    p.prompt = std::move(j);
    return p;
  }
  if (!j.is_object()) return p;
  const auto prompt = j.find("prompt");
  if (prompt == j.end() || !(prompt->is_string() || is_id_array(*prompt)))
    return invalid_argument("{}: \"prompt\" must be a string or a list of token ids", where);
  p.prompt = *prompt;
  for (const char* key : {"output_len", "max_tokens"}) {
    const auto v = j.find(key);
    if (v == j.end()) continue;
    if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > INT32_MAX)
      return invalid_argument("{}: \"{}\" must be a positive integer", where, key);
    p.output_len = int(v->get<int64_t>());
    break;
  }
  return p;
}

}  // namespace

Result<std::vector<BenchPrompt>> random_dataset(const RandomDatasetOptions& o, int n, int32_t n_plain_ids,
                                                uint64_t seed) {
  if (o.range_ratio < 0 || o.range_ratio >= 1)
    return invalid_argument("--random-range-ratio: must be in [0, 1), got {}", o.range_ratio);
  if (n_plain_ids < 1)
    return invalid_argument("the tokenizer has no plain (BPE) tokens to draw prompts from");
  std::mt19937_64 rng(seed);
  auto in_len = length_range(o.input_len, o.range_ratio), out_len = length_range(o.output_len, o.range_ratio);
  std::uniform_int_distribution<int32_t> id(0, n_plain_ids - 1);
  std::vector<BenchPrompt> out;
  out.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    const int len = in_len(rng);
    Json ids = Json::array();
    for (int t = 0; t < len; ++t) ids.push_back(id(rng));
    out.push_back({std::move(ids), out_len(rng)});
  }
  return out;
}

Result<std::vector<BenchPrompt>> file_dataset(const std::filesystem::path& path, int n,
                                              int default_output_len) {
  std::vector<BenchPrompt> out;
  while (int(out.size()) < n) {
    std::ifstream f(path);
    if (!f) return not_found("--dataset-path {}: cannot open it", path.string());
    const size_t before = out.size();
    std::string line;
    for (int line_no = 1; int(out.size()) < n && std::getline(f, line); ++line_no) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();
      const size_t start = line.find_first_not_of(" \t");
      if (start == std::string::npos) continue;
      auto p =
          parse_line(line.substr(start), path.string() + ":" + std::to_string(line_no), default_output_len);
      if (!p.ok()) return p.status();
      out.push_back(std::move(p).value());
    }
    if (out.size() == before) return invalid_argument("--dataset-path {}: holds no prompt", path.string());
  }
  return out;
}

Result<std::vector<BenchPrompt>> sharegpt_dataset(const std::filesystem::path& path, int n,
                                                  const std::function<int(const std::string&)>& count_tokens,
                                                  int fixed_output_len) {
  std::ifstream f(path);
  if (!f) return not_found("--dataset-path {}: cannot open it", path.string());
  const Json all = Json::parse(f, nullptr, false);
  if (!all.is_array())
    return invalid_argument("--dataset-path {}: a ShareGPT file is a JSON array of {{\"conversations\": [...]}}",
                            path.string());
  std::vector<BenchPrompt> out;
  for (size_t i = 0; i < all.size() && int(out.size()) < n; ++i) {
    const Json& e = all[i];
    if (!e.is_object() || !e.contains("conversations")) continue;
    const Json& turns = e["conversations"];
    if (!turns.is_array() || turns.size() < 2 || !turns[0].is_object() || !turns[1].is_object()) continue;
    const Json prompt = turns[0].value("value", Json()), reply = turns[1].value("value", Json());
    if (!prompt.is_string() || !reply.is_string()) continue;
    const int prompt_len = count_tokens(prompt.get<std::string>());
    const int output_len = fixed_output_len > 0 ? fixed_output_len : count_tokens(reply.get<std::string>());
    if (fixed_output_len <= 0 && (prompt_len < 4 || output_len < 4 || prompt_len > 1024 ||
                                  prompt_len + output_len > 2048))
      continue;
    out.push_back(BenchPrompt{prompt, std::max(1, output_len)});
  }
  if (out.empty()) return invalid_argument("--dataset-path {}: no usable ShareGPT conversation", path.string());
  return out;
}

namespace {

// The prompt text of one Hugging Face dataset record (hf_dataset's field order), or "" when it has none.
std::string hf_record_prompt(const Json& r) {
  auto text_of = [](const Json& j, const char* key) -> std::string {
    const auto v = j.find(key);
    return v != j.end() && v->is_string() ? v->get<std::string>() : std::string();
  };
  for (const auto& [list, role_key, text_key] :
       {std::tuple{"messages", "role", "content"}, std::tuple{"conversations", "from", "value"}}) {
    const auto turns = r.find(list);
    if (turns == r.end() || !turns->is_array()) continue;
    for (const Json& t : *turns) {
      if (!t.is_object()) continue;
      const std::string role = text_of(t, role_key);
      if (role == "user" || role == "human") return text_of(t, text_key);
    }
  }
  if (std::string p = text_of(r, "prompt"); !p.empty()) return p;
  if (std::string p = text_of(r, "instruction"); !p.empty()) {
    const std::string input = text_of(r, "input");
    return input.empty() ? p : p + "\n\n" + input;
  }
  for (const char* key : {"question", "problem", "text"})
    if (std::string p = text_of(r, key); !p.empty()) return p;
  return "";
}

Result<std::vector<std::filesystem::path>> hf_files(const std::filesystem::path& path, const std::string& split) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("--dataset-path {}: no such file or directory", path.string());
  std::vector<fs::path> files, parquet;
  auto consider = [&](const fs::path& f) {
    const std::string ext = f.extension().string(), name = f.filename().string();
    if (!split.empty() && name.find(split) == std::string::npos) return;
    if (ext == ".jsonl" || ext == ".json") files.push_back(f);
    if (ext == ".parquet") parquet.push_back(f);
  };
  if (fs::is_directory(path, ec)) {
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_regular_file() && it->path().string().find("/.") == std::string::npos) consider(it->path());
    if (ec) return invalid_argument("--dataset-path {}: cannot list it: {}", path.string(), ec.message());
  } else {
    consider(path);
  }
  std::sort(files.begin(), files.end());
  if (files.empty() && !parquet.empty())
    return invalid_argument(
        "--dataset-path {}: {} is Parquet, which rill does not read; convert it to JSON lines, e.g. "
        "python -c \"import pandas; pandas.read_parquet('{}').to_json('data.jsonl', orient='records', lines=True)\"",
        path.string(), parquet.front().string(), parquet.front().string());
  if (files.empty())
    return invalid_argument("--dataset-path {}: no .jsonl or .json file{}", path.string(),
                            split.empty() ? "" : " named with split '" + split + "' (--hf-split)");
  return files;
}

}  // namespace

Result<std::vector<BenchPrompt>> hf_dataset(const std::filesystem::path& path, int n, int default_output_len,
                                            const std::string& split) {
  RILL_ASSIGN_OR_RETURN(const std::vector<std::filesystem::path> files, hf_files(path, split));
  // Every record of every file, in order: a .json file is one array of records (or one record), a .jsonl file
  // one record a line.
  std::vector<BenchPrompt> all;
  auto take = [&](const Json& r, const std::string& where) -> Status {
    if (!r.is_object()) return invalid_argument("{}: a record must be a JSON object", where);
    std::string prompt = hf_record_prompt(r);
    if (prompt.empty()) return {};
    BenchPrompt p{Json(std::move(prompt)), default_output_len};
    for (const char* key : {"output_len", "max_tokens"}) {
      const auto v = r.find(key);
      if (v != r.end() && v->is_number_integer() && v->get<int64_t>() >= 1 && v->get<int64_t>() <= INT32_MAX) {
        p.output_len = int(v->get<int64_t>());
        break;
      }
    }
    all.push_back(std::move(p));
    return {};
  };
  for (const auto& file : files) {
    std::ifstream f(file);
    if (!f) return not_found("--dataset-path {}: cannot open {}", path.string(), file.string());
    if (file.extension() == ".json") {
      const Json j = Json::parse(f, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return invalid_argument("{}: not valid JSON", file.string());
      if (j.is_array()) {
        for (size_t i = 0; i < j.size(); ++i) RILL_TRY(take(j[i], file.string() + "[" + std::to_string(i) + "]"));
      } else {
        RILL_TRY(take(j, file.string()));
      }
      continue;
    }
    std::string line;
    for (int line_no = 1; std::getline(f, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      const std::string where = file.string() + ":" + std::to_string(line_no);
      if (j.is_discarded()) return invalid_argument("{}: not valid JSON", where);
      RILL_TRY(take(j, where));
    }
  }
  if (all.empty())
    return invalid_argument("--dataset-path {}: no record has a prompt field (messages, conversations, prompt, "
                            "instruction, question, problem or text)",
                            path.string());
  std::vector<BenchPrompt> out;
  for (int i = 0; i < n; ++i) out.push_back(all[size_t(i) % all.size()]);
  return out;
}

}  // namespace rill::bench::serve
