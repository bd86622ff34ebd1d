#include "text/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "text/tokenizer/kimi_pretokenizer.h"
#include "text/tokenizer/tiktoken_file.h"

namespace rill::text {
namespace {

constexpr ControlToken kKimiLinearLayout[] = {
    {0, "[BOS]", true},
    {1, "[EOS]", true},
    {2, "<|im_end|>", true},
    {3, "<|im_user|>", true},
    {4, "<|im_assistant|>", true},
    {6, "<|start_header_id|>", true},
    {7, "<|end_header_id|>", true},
    {9, "[EOT]", true},
    {10, "<|im_system|>", true},
    {11, "<|tool_calls_section_begin|>", false},
    {12, "<|tool_calls_section_end|>", false},
    {13, "<|tool_call_begin|>", false},
    {14, "<|tool_call_argument_begin|>", false},
    {15, "<|tool_call_end|>", false},
    {17, "<|im_middle|>", true},
    {18, "<|media_begin|>", true},
    {19, "<|media_content|>", true},
    {20, "<|media_end|>", true},
    {21, "<|media_pad|>", true},
    {22, "<think>", false},
    {23, "</think>", false},
    {254, "[UNK]", true},
    {255, "[PAD]", true},
};

// spec/kimi-architecture.md §6.3 and serving.md §0.4; the tag markers are added tokens without the
// special flag in K3's config.
constexpr ControlToken kK3Layout[] = {
    {0, "[BOS]", true},
    {1, "[EOS]", true},
    {2, "<|end_of_msg|>", true},
    {3, "<|open|>", false},
    {4, "<|close|>", false},
    {5, "<|sep|>", false},
    {6, "[start_header_id]", true},
    {7, "[end_header_id]", true},
    {9, "[EOT]", true},
    {18, "<|media_begin|>", true},
    {19, "<|media_content|>", true},
    {20, "<|media_end|>", true},
    {21, "<|media_pad|>", true},
    {65, "<osagent_mode>", true},
    {254, "[UNK]", true},
    {255, "[PAD]", true},
};

struct Word {
  std::vector<int32_t> symbols;
  int64_t freq;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

struct Candidate {
  int64_t count;
  uint64_t key;
  // Max-heap: the higher count first, then the lower key (lower left rank, then lower right rank).
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : key > o.key; }
};

class Trainer {
 public:
  explicit Trainer(std::string_view corpus) {
    std::unordered_map<std::string_view, int64_t> freq;
    KimiPreTokenizer().split(corpus, [&](std::string_view piece) { ++freq[piece]; });
    // Sorted so that word order (and therefore everything after) does not depend on hashing.
    std::vector<std::pair<std::string_view, int64_t>> sorted(freq.begin(), freq.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [piece, n] : sorted) {
      Word w{{}, n};
      for (const char c : piece) w.symbols.push_back(static_cast<unsigned char>(c));
      words_.push_back(std::move(w));
    }
    for (int b = 0; b < 256; ++b) add_token(std::string(1, static_cast<char>(b)));
    for (size_t w = 0; w < words_.size(); ++w) count_pairs(w, +1);
    for (const auto& [key, count] : counts_) heap_.push({count, key});
  }

  std::vector<std::string> run(size_t n_ranks) {
    std::vector<uint32_t> stamp(words_.size(), 0);
    uint32_t round = 0;
    while (tokens_.size() < n_ranks && !heap_.empty()) {
      const Candidate top = heap_.top();
      heap_.pop();
      const auto it = counts_.find(top.key);
      if (it == counts_.end() || it->second != top.count || top.count <= 0) continue;  // stale
      const auto a = static_cast<int32_t>(top.key >> 32), b = static_cast<int32_t>(top.key & 0xFFFFFFFF);
      const int32_t merged = add_token(tokens_[a] + tokens_[b]);
      ++round;
      changed_.clear();
      const std::vector<uint32_t> holders = where_[top.key];
      for (const uint32_t w : holders) {
        if (stamp[w] == round) continue;
        stamp[w] = round;
        count_pairs(w, -1);
        merge_in_word(words_[w].symbols, a, b, merged);
        count_pairs(w, +1);
      }
      for (const uint64_t key : changed_) {
        const int64_t c = counts_[key];
        if (c > 0) heap_.push({c, key});
      }
    }
    return std::move(tokens_);
  }

 private:
  int32_t add_token(std::string bytes) {
    const auto [it, inserted] = index_.emplace(bytes, static_cast<int32_t>(tokens_.size()));
    if (inserted) tokens_.push_back(std::move(bytes));
    return it->second;
  }

  void count_pairs(size_t w, int sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
      counts_[key] += sign * word.freq;
      changed_.push_back(key);
      if (sign > 0) where_[key].push_back(static_cast<uint32_t>(w));
    }
  }

  static void merge_in_word(std::vector<int32_t>& s, int32_t a, int32_t b, int32_t merged) {
    size_t out = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
        s[out++] = merged;
        ++i;
      } else {
        s[out++] = s[i];
      }
    }
    s.resize(out);
  }

  std::vector<Word> words_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where_;
  std::priority_queue<Candidate> heap_;
  std::vector<uint64_t> changed_;
};

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid_argument("cannot write {}", path.string());
  out << text;
  out.close();
  if (!out) return invalid_argument("cannot write {}", path.string());
  return {};
}

}  // namespace

std::vector<std::string> train_bpe(std::string_view corpus, int n_ranks) {
  return Trainer(corpus).run(static_cast<size_t>(std::max(n_ranks, 256)));
}

Status write_tiktoken_model(const std::filesystem::path& path, const std::vector<std::string>& ranks) {
  return write_text(path, format_tiktoken_model(ranks));
}

std::span<const ControlToken> control_block_layout(ControlBlockLayout layout) {
  switch (layout) {
    case ControlBlockLayout::KimiLinear:
      return kKimiLinearLayout;
    case ControlBlockLayout::K3:
      return kK3Layout;
  }
  return {};
}

Status write_tokenizer_config(const std::filesystem::path& path, int32_t n_ranks, ControlBlockLayout layout) {
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  std::vector<std::string> additional;
  for (const ControlToken& t : control_block_layout(layout)) {
    decoder[std::to_string(n_ranks + t.offset)] = {
        {"content", t.name}, {"lstrip", false},      {"normalized", false},
        {"rstrip", false},   {"single_word", false}, {"special", t.special},
    };
    const bool attribute = t.name == "[BOS]" || t.name == "[EOS]" || t.name == "[UNK]" || t.name == "[PAD]";
    if (t.special && !attribute) additional.emplace_back(t.name);
  }
  nlohmann::ordered_json config = {
      {"added_tokens_decoder", decoder},
      {"additional_special_tokens", additional},
      {"bos_token", "[BOS]"},
      {"clean_up_tokenization_spaces", false},
      {"eos_token", "[EOS]"},
      {"model_max_length", 1048576},
      {"pad_token", "[PAD]"},
      {"tokenizer_class", "TikTokenTokenizer"},
      {"unk_token", "[UNK]"},
  };
  return write_text(path, config.dump(2) + "\n");
}

}  // namespace rill::text
