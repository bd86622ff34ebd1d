// rill train-tokenizer CORPUS OUT_DIR --ranks N [--encode FILE]...: a byte-level BPE vocabulary trained on a
// text file by text/tokenizer's trainer, written as a checkpoint's tokenizer files (tiktoken.model and
// tokenizer_config.json with Kimi Linear's control block and the K2-style chat template of the tiny model),
// and optionally text files pre-tokenised with it into flat little-endian int32 id files — the demo model's
// vocabulary and training data (tools/demo_model), so that the training machine needs no tokenizer.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/tiny_model_spec.h"
#include "text/tokenizer/bpe_trainer.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {
namespace {

Result<std::string> slurp(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_argument("{}: cannot open {}", what, path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

Status write_ids(const std::filesystem::path& path, const std::vector<int32_t>& ids) {
  std::string bytes(ids.size() * 4, '\0');
  for (size_t i = 0; i < ids.size(); ++i)
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = char((uint32_t(ids[i]) >> (8 * b)) & 0xFF);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) return invalid_argument("--encode: cannot write {}", path.string());
  return {};
}

}  // namespace

int run_train_tokenizer(int argc, char** argv) {
  CLI::App app{
      "Train a byte-level BPE vocabulary on a text file and write it as a checkpoint's tokenizer files "
      "(Kimi Linear control block, chat template); --encode pre-tokenises text files to int32 ids."};
  std::string corpus_path, out_dir;
  int ranks = 4096;
  std::vector<std::string> encode;
  app.add_option("CORPUS", corpus_path, "UTF-8 training text")->required();
  app.add_option("OUT_DIR", out_dir, "directory for tiktoken.model and tokenizer_config.json")->required();
  app.add_option("--ranks", ranks, "BPE ranks (256 bytes + merges); the 256 control ids follow them")
      ->capture_default_str()
      ->check(CLI::Range(256, 1 << 20));
  app.add_option("--encode", encode,
                 "text file to encode with the new vocabulary (repeatable); writes FILE with extension .bin: "
                 "little-endian int32 ids, special names encoded as text");
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  auto corpus = slurp(corpus_path, "CORPUS");
  if (!corpus.ok()) return report_error("train-tokenizer", corpus.status());
  const std::vector<std::string> vocab = text::train_bpe(*corpus, ranks);
  if (int(vocab.size()) != ranks)
    return report_error("train-tokenizer",
                        invalid_argument("--ranks {}: {} has only enough distinct pairs for {}", ranks,
                                         corpus_path, vocab.size()));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec)
    return report_error("train-tokenizer",
                        invalid_argument("OUT_DIR: cannot create {}: {}", out_dir, ec.message()));
  if (Status st = write_kimi_linear_tokenizer(out_dir, vocab); !st.ok())
    return report_error("train-tokenizer", st);
  std::fprintf(stderr, "wrote %s/tiktoken.model (%d ranks) and tokenizer_config.json (vocab %d)\n",
               out_dir.c_str(), ranks, ranks + 256);

  auto tok = text::Tokenizer::load(out_dir);
  if (!tok.ok()) return report_error("train-tokenizer", tok.status());
  for (const std::string& in : encode) {
    auto text = slurp(in, "--encode");
    if (!text.ok()) return report_error("train-tokenizer", text.status());
    const std::vector<int32_t> ids = tok->encode(*text, /*allow_special=*/false);
    const std::filesystem::path out = std::filesystem::path(in).replace_extension(".bin");
    if (Status st = write_ids(out, ids); !st.ok()) return report_error("train-tokenizer", st);
    std::fprintf(stderr, "wrote %s: %zu tokens from %zu bytes (%.2f bytes/token)\n", out.string().c_str(),
                 ids.size(), text->size(), ids.empty() ? 0.0 : double(text->size()) / double(ids.size()));
  }
  return 0;
}

}  // namespace rill::cli
