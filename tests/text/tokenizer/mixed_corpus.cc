#include "text/tokenizer/mixed_corpus.h"

#include <cstdint>
#include <vector>

namespace rill::text::testing {
namespace {

// Fixed-seed generator: the corpus must be the same on every machine and run.
class Lcg {
 public:
  uint32_t next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state_ >> 33);
  }
  size_t below(size_t n) { return next() % n; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

 private:
  uint64_t state_ = 0x5EED5EED5EEDull;
};

const std::vector<std::string> kEnglish = {
    "the",       "quick",   "brown",      "fox",        "jumps",   "over",      "lazy",        "dog",
    "inference", "engine",  "serves",     "tokens",     "model",   "attention", "linear",      "latent",
    "expert",    "router",  "weights",    "cache",      "prefix",  "decode",    "prefill",     "batch",
    "request",   "stream",  "server",     "throughput", "latency", "memory",    "bandwidth",   "kernel",
    "a",         "an",      "of",         "to",         "in",      "is",        "was",         "for",
    "on",        "with",    "as",         "by",         "at",      "from",      "that",        "this",
    "people",    "history", "government", "university", "between", "important", "development", "information",
    "naïve",     "café",    "résumé",     "coöperate",  "façade",  "jalapeño",  "über",        "Zürich",
    "São",       "Paulo"};
const std::vector<std::string> kContractions = {
    "don't",   "can't", "I'm",  "I'M",  "you're", "YOU'RE",  "we've",
    "They'll", "she'd", "it's", "IT'S", "won't",  "o'clock", "rock'n'roll",
    "'tis",    "y'all", "it'ſ", "he'D", "we'Ve",  "'s",      "''"};
const std::vector<std::string> kChinese = {
    "中国", "北京", "首都", "人工智能", "模型", "推理", "引擎", "我们", "你好", "世界", "数据", "计算",
    "语言", "的",   "了",   "是",       "在",   "有",   "和",   "不",   "这",   "个",   "上",   "们",
    "来",   "到",   "时",   "大",       "地",   "为",   "请用", "格式", "回答", "答案", "需要", "包含",
    "。",   "，",   "！",   "？",       "：",   "“",    "”",    "、",   "《",   "》"};
const std::vector<std::string> kJapanese = {
    "こんにちは", "ありがとう", "日本語", "です", "ます", "東京", "カタカナ", "ひらがな", "漢字",
    "テスト",     "の",         "は",     "が",   "を",   "に",   "で",       "と",       "コンピューター",
    "ー",         "々",         "〆",     "。",   "、",   "「",   "」"};
const std::vector<std::string> kKorean = {"안녕하세요", "감사합니다", "한국어", "서울", "모델",
                                          "추론",       "엔진",       "데이터", "는",   "이",
                                          "가",         "을",         "를"};
const std::vector<std::string> kArabic = {"مرحبا",     "العالم", "اللغة", "العربية",    "نموذج", "الذكاء",
                                          "الاصطناعي", "كتاب",   "مدرسة", "٠١٢٣٤٥٦٧٨٩", "،",     "؟"};
const std::vector<std::string> kOther = {"Привет",
                                         "мир",
                                         "Москва",
                                         "Ελληνικά",
                                         "γλώσσα",
                                         "नमस्ते",
                                         "हिन्दी",
                                         "ภาษาไทย",
                                         "עברית",
                                         "Ω",
                                         "ǅungla",
                                         "e\u0301",
                                         "a\u0308\u0301",
                                         "\u0301",
                                         "ﬁ",
                                         "ＡＢＣ",
                                         "０１２３４",
                                         "Ⅻ",
                                         "½",
                                         "²³",
                                         "〇",
                                         "ꓐꓑ"};
const std::vector<std::string> kEmoji = {"😀",
                                         "🎉",
                                         "👍🏽",
                                         "👨‍👩‍👧‍👦",
                                         "🏳️‍🌈",
                                         "❤️",
                                         "🚀",
                                         "🤖",
                                         "✅",
                                         "🇨🇳",
                                         "🇺🇸",
                                         "©",
                                         "™",
                                         "→",
                                         "∑",
                                         "≠",
                                         "∞"};
const std::vector<std::string> kCamel = {
    "getHTTPResponse", "HelloWorld", "XMLHttpRequest", "parseJSONValue", "camelCase",     "snake_case_name",
    "SCREAMING_SNAKE", "iPhone",     "eBay",           "macOS",          "KdaStateSlots", "MlaBlockPool",
    "IOError",         "x86_64",     "HTMLParser",     "ABCdefGHI",      "aBcDeF",        "中文abc混合Test",
    "abc中文def",      "Привет世界", "ABC한국DEF"};
const std::vector<std::string> kCode = {
    "int main(int argc, char** argv) {\n  return 0;\n}\n",
    "for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];\n",
    "def encode(self, text: str) -> list[int]:\n    return self._model.encode(text)\n",
    "if (x != nullptr && x->ok()) { std::cout << \"ok\\n\"; }\n",
    "#include <vector>\n#include \"core/status.h\"\n\n",
    "const result = await fetch(`/v1/chat/completions`, { method: 'POST' });\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n",
    "    \t// TODO(rill): handle the empty case\r\n",
    "<div class=\"note\">&nbsp;&lt;tag&gt;</div>\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}\n",
    "$ ./build/rill tokenize /models/kimi < input.txt | jq .\n",
    "x = y**2 + 3*z - 4/w  # comment with 'quotes' and \"double\"\n"};
const std::vector<std::string> kSpaces = {" ",    "  ",       "   ",    "    ",   "\t",         "\t\t",
                                          " \t ", "\n",       "\n\n",   "\n\n\n", "\r\n",       "\r\n\r\n",
                                          " \n ", "  \n\n  ", "\u00a0", "\u3000", "\u2003",     "\u200b",
                                          "\x1c", "\x0b",     "\x0c",   "\u2028", "        \n", "\n    "};
const std::vector<std::string> kSpecials = {"<|im_end|>", "[BOS]", "<|im_user|>", "<|reserved_token_163700|>",
                                            "<think>",    "[EOS",  "<|im_end",    "<|open|>"};

std::string number(Lcg& rng) {
  switch (rng.below(5)) {
    case 0:
      return std::to_string(rng.next());
    case 1:
      return std::to_string(rng.below(100)) + "." + std::to_string(rng.below(1000));
    case 2:
      return "20" + std::to_string(10 + rng.below(20)) + "-0" + std::to_string(1 + rng.below(9)) + "-1" +
             std::to_string(rng.below(10));
    case 3:
      return "$" + std::to_string(rng.below(100000)) + ",000";
    default:
      return std::to_string(rng.below(10));
  }
}

}  // namespace

std::string make_mixed_corpus(size_t min_bytes) {
  Lcg rng;
  std::string out;
  out.reserve(min_bytes + 4096);
  while (out.size() < min_bytes) {
    const size_t kind = rng.below(100);
    const size_t n_words = 5 + rng.below(40);
    for (size_t w = 0; w < n_words; ++w) {
      const size_t r = rng.below(100);
      if (kind < 40) {  // English-heavy prose
        if (r < 70) {
          std::string word = rng.pick(kEnglish);
          if (w == 0 || rng.below(20) == 0) word[0] = static_cast<char>(std::toupper(word[0]));
          if (rng.below(40) == 0)
            for (char& c : word) c = static_cast<char>(std::toupper(c));
          out += (w ? " " : "") + word;
        } else if (r < 80) {
          out += " " + rng.pick(kContractions);
        } else if (r < 88) {
          out += " " + number(rng);
        } else if (r < 94) {
          out += rng.pick(std::vector<std::string>{",", ".", "!", "?", ";", ":", " -", " (", ")", "\"", "'"});
        } else {
          out += " " + rng.pick(kCamel);
        }
      } else if (kind < 55) {  // Chinese without spaces
        out += r < 90 ? rng.pick(kChinese) : r < 95 ? number(rng) : rng.pick(kEnglish);
      } else if (kind < 63) {
        out += r < 90 ? rng.pick(kJapanese) : number(rng);
      } else if (kind < 69) {
        out += (w ? " " : "") + rng.pick(kKorean);
      } else if (kind < 74) {
        out += (w ? " " : "") + rng.pick(kArabic);
      } else if (kind < 80) {
        out += (w ? " " : "") + rng.pick(kOther);
      } else if (kind < 90) {
        out += rng.pick(kCode);
        if (w > 3) break;
      } else if (kind < 95) {
        out += rng.pick(r < 50 ? kEmoji : kCamel);
        out += r % 3 == 0 ? " " : "";
      } else {
        out += rng.pick(kSpaces);
        out += r < 50 ? rng.pick(kEnglish) : rng.pick(kCamel);
        if (r < 5) out += rng.pick(kSpecials);
      }
    }
    out += rng.pick(kSpaces);
    if (rng.below(10) == 0) out += "\n\n";
  }
  return out;
}

}  // namespace rill::text::testing
