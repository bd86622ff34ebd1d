// A seeded mutation loop around a libFuzzer target (LLVMFuzzerTestOneInput), so every fuzz target also runs
// as a plain CTest test under g++ with no fuzzing runtime. It is deterministic: the seed (tests/test_seed.h,
// printed) and the sorted corpus fix every input, so RILL_TEST_SEED=N replays a run exactly.
//
//   NAME_fuzz CORPUS_DIR [--dict FILE]   run the corpus, then RILL_FUZZ_EXECS mutated inputs (default 5000)
//   NAME_fuzz --replay FILE...           run these inputs once each (a saved crash, a libFuzzer artifact)
//
// Mutations are byte-level: flip a bit, set a byte, insert / delete / duplicate (repeated) a range, splice in
// a range of another corpus entry, insert a token (the target's dictionary, libFuzzer's format, plus JSON
// tokens such as `[`, `{"a":`, `\u0000`). Before each input runs it is kept in memory; a fatal signal or an
// escaping exception writes it to `crash-SEED-EXEC` in the working directory and names the replay commands.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "test_seed.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::string;

// Tokens that make byte mutations reach deeper into a JSON grammar than random bytes do.
const char* const kJsonTokens[] = {
    "[",
    "]",
    "{",
    "}",
    "{\"a\":",
    "\"",
    ",",
    ":",
    "\\u0000",
    "\\ud800",
    "\\udfff",
    "\\\"",
    "null",
    "true",
    "false",
    "-0",
    "1e999",
    "-1e-999",
    "18446744073709551616",
    "-9223372036854775809",
    "0.5",
    "\"\"",
    "[]",
    "{}",
    "\xff",
    "\xc0\x80",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
};

struct Run {
  uint32_t seed = 0;
  uint64_t exec = 0;
  const Bytes* input = nullptr;
  const char* file = nullptr;  // a corpus entry or a replayed file: reported by name, not saved
} g_run;

// Async-signal-safe enough: open/write/close only, on a buffer that already exists.
void save_input(const char* why) {
  if (!g_run.input) return;
  if (g_run.file) {
    char msg[320];
    const int len = std::snprintf(msg, sizeof msg, "\n*** fuzz: %s on %s\n", why, g_run.file);
    if (len > 0) (void)!::write(2, msg, size_t(std::min(len, int(sizeof msg) - 1)));
    return;
  }
  char name[64];
  std::snprintf(name, sizeof name, "crash-%u-%llu", g_run.seed, static_cast<unsigned long long>(g_run.exec));
  const int fd = ::open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    size_t done = 0;
    while (done < g_run.input->size()) {
      const ssize_t n = ::write(fd, g_run.input->data() + done, g_run.input->size() - done);
      if (n <= 0) break;
      done += size_t(n);
    }
    ::close(fd);
  }
  char msg[320];
  const int len = std::snprintf(msg, sizeof msg,
                                "\n*** fuzz: %s at exec %llu (seed %u): input saved to %s\n"
                                "*** replay: RILL_TEST_SEED=%u RILL_FUZZ_EXECS=%llu, or --replay %s\n",
                                why, static_cast<unsigned long long>(g_run.exec), g_run.seed, name,
                                g_run.seed, static_cast<unsigned long long>(g_run.exec + 1), name);
  if (len > 0) (void)!::write(2, msg, size_t(std::min(len, int(sizeof msg) - 1)));
}

void on_fatal_signal(int sig) {
  save_input(sig == SIGSEGV ? "SIGSEGV" : sig == SIGABRT ? "SIGABRT" : "fatal signal");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void run_one(const Bytes& input) {
  g_run.input = &input;
  try {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exception escaped the target: %s\n", e.what());
    save_input("exception");
    std::exit(1);
  } catch (...) {
    save_input("exception");
    std::exit(1);
  }
  g_run.input = nullptr;
}

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// libFuzzer dictionary lines: `name="value"` or `"value"`, with \\, \" and \xNN escapes; # starts a comment.
std::vector<Bytes> read_dictionary(const std::filesystem::path& path) {
  std::vector<Bytes> tokens;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t open = line.find('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos) continue;
    const size_t close = line.rfind('"');
    if (close <= open) continue;
    Bytes token;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] != '\\' || i + 1 >= close) {
        token += line[i];
      } else if (line[i + 1] == 'x' && i + 3 < close) {
        token += char(std::stoi(line.substr(i + 2, 2), nullptr, 16));
        i += 3;
      } else {
        token += line[++i];
      }
    }
    if (!token.empty()) tokens.push_back(std::move(token));
  }
  return tokens;
}

class Mutator {
 public:
  Mutator(uint32_t seed, const std::vector<Bytes>& corpus, std::vector<Bytes> tokens, size_t max_len)
      : rng_(seed), corpus_(corpus), tokens_(std::move(tokens)), max_len_(max_len) {
    for (const char* t : kJsonTokens) tokens_.emplace_back(t);
  }

  Bytes next() {
    Bytes b = corpus_.empty() ? Bytes() : corpus_[below(corpus_.size())];
    const size_t rounds = below(2) ? 1 : 2 + below(3);  // often one edit: most inputs should stay near-valid
    for (size_t i = 0; i < rounds; ++i) mutate(b);
    if (b.size() > max_len_) b.resize(max_len_);
    return b;
  }

 private:
  size_t below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  // A range length biased to short ones (most interesting edits are a few bytes).
  size_t length(size_t limit) {
    return limit == 0 ? 0 : 1 + below(std::min(limit, below(3) ? size_t(8) : limit));
  }

  // The span around `at` between JSON delimiters (after one of `,:[{`, up to one of `,]}`): roughly one
  // value, so that replacing it with another value keeps the document parseable more often than a byte edit.
  static std::pair<size_t, size_t> value_span(const Bytes& b, size_t at) {
    size_t lo = at, hi = at;
    while (lo > 0 && std::strchr(",:[{", b[lo - 1]) == nullptr) --lo;
    while (hi < b.size() && std::strchr(",]}", b[hi]) == nullptr) ++hi;
    return {lo, hi};
  }

  void mutate(Bytes& b) {
    switch (below(10)) {
      case 0:  // flip a bit
        if (!b.empty()) b[below(b.size())] ^= char(1u << below(8));
        break;
      case 1: {  // set a byte to an edge value or a random one
        static const char kEdges[] = {'\0', '\xff', '\x7f', '\x80', '"', '\\', '\n', '0'};
        if (!b.empty()) b[below(b.size())] = below(2) ? kEdges[below(sizeof kEdges)] : char(below(256));
        break;
      }
      case 2: {  // insert random bytes
        Bytes r(length(8), '\0');
        for (char& c : r) c = char(below(256));
        b.insert(below(b.size() + 1), r);
        break;
      }
      case 3:  // delete a range
        if (!b.empty()) {
          const size_t at = below(b.size());
          b.erase(at, length(b.size() - at));
        }
        break;
      case 4:  // duplicate a range, up to 64 times (deep nesting, long arrays, many keys)
        if (!b.empty()) {
          const size_t at = below(b.size());
          const Bytes piece = b.substr(at, length(b.size() - at));
          const size_t times = 1 + (below(4) ? below(2) : below(64));
          Bytes run;
          for (size_t i = 0; i < times && run.size() < max_len_; ++i) run += piece;
          b.insert(below(b.size() + 1), run);
        }
        break;
      case 5:  // splice in a range of another corpus entry
        if (!corpus_.empty()) {
          const Bytes& other = corpus_[below(corpus_.size())];
          if (other.empty()) break;
          const size_t from = below(other.size());
          const Bytes piece = other.substr(from, length(other.size() - from));
          if (below(2) && !b.empty()) {
            const size_t at = below(b.size());
            b.replace(at, std::min(piece.size(), b.size() - at), piece);
          } else {
            b.insert(below(b.size() + 1), piece);
          }
        }
        break;
      case 6:
      case 7:  // insert a token (dictionary or JSON)
        b.insert(below(b.size() + 1), tokens_[below(tokens_.size())]);
        break;
      default: {  // replace a value with a token or with a value of another corpus entry
        if (b.empty()) break;
        const auto [lo, hi] = value_span(b, below(b.size()));
        Bytes with = tokens_[below(tokens_.size())];
        if (!corpus_.empty() && below(4)) {
          const Bytes& other = corpus_[below(corpus_.size())];
          if (!other.empty()) {
            const auto [olo, ohi] = value_span(other, below(other.size()));
            with = other.substr(olo, ohi - olo);
          }
        }
        b.replace(lo, hi - lo, with);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  const std::vector<Bytes>& corpus_;
  std::vector<Bytes> tokens_;
  size_t max_len_;
};

uint64_t env_count(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr, "%s=%s is not a number\n", name, v);
    std::exit(2);
  }
  return n;
}

int usage() {
  std::fprintf(stderr, "usage: fuzz CORPUS_DIR [--dict FILE] | fuzz --replay FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
  if (argc < 2) return usage();
  if (std::string_view(argv[1]) == "--replay") {
    for (int i = 2; i < argc; ++i) {
      const Bytes input = read_file(argv[i]);
      std::printf("replay %s (%zu bytes)\n", argv[i], input.size());
      g_run.file = argv[i];
      run_one(input);
    }
    std::printf("replayed %d inputs: no crash\n", argc - 2);
    return 0;
  }
  std::vector<Bytes> tokens;
  if (argc == 4 && std::string_view(argv[2]) == "--dict") {
    tokens = read_dictionary(argv[3]);
  } else if (argc != 2) {
    return usage();
  }

  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1], ec))
    if (entry.is_regular_file()) files.push_back(entry.path());
  if (ec || files.empty()) {
    std::fprintf(stderr, "no corpus files in %s\n", argv[1]);
    return 1;
  }
  std::sort(files.begin(), files.end());  // a fixed order: the seed alone decides the run
  std::vector<Bytes> corpus;
  for (const auto& f : files) corpus.push_back(read_file(f));

  g_run.seed = rill::testing::test_seed();
  const uint64_t execs = env_count("RILL_FUZZ_EXECS", 5000);
  const size_t max_len = env_count("RILL_FUZZ_MAX_LEN", 1 << 16);
  std::printf("fuzz: %zu corpus entries, %zu dictionary tokens, %llu execs, inputs up to %zu bytes\n",
              corpus.size(), tokens.size(), static_cast<unsigned long long>(execs), max_len);
  std::fflush(stdout);

  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string name = files[i].string();
    g_run.file = name.c_str();
    run_one(corpus[i]);
  }
  g_run.file = nullptr;
  Mutator mutator(g_run.seed, corpus, std::move(tokens), max_len);
  for (g_run.exec = 0; g_run.exec < execs; ++g_run.exec) {
    const Bytes input = mutator.next();
    run_one(input);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz: %llu execs (+%zu corpus) in %.1f s, %.0f execs/s, seed %u: no crash\n",
              static_cast<unsigned long long>(execs), corpus.size(), seconds,
              double(execs + corpus.size()) / std::max(seconds, 1e-9), g_run.seed);
  return 0;
}
