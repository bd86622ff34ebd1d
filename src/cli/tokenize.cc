// `rill tokenize MODEL_DIR [--allow-special]` and `rill detokenize MODEL_DIR`: the checkpoint's tokenizer
// over stdin/stdout, for scripts and for debugging prompt-token counts.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"

namespace rill::cli {
namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// CLI11 prints help / usage errors itself; usage errors exit 2, --help exits 0.
int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

Result<text::Tokenizer> load(const std::string& model_dir) {
  auto tokenizer = text::Tokenizer::load(model_dir);
  if (!tokenizer.ok()) return tokenizer.status().with_context("loading the tokenizer");
  return tokenizer;
}

int fail(const Status& status) {
  std::fprintf(stderr, "rill: %s\n", status.to_string().c_str());
  return 1;
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  CLI::App app{"UTF-8 text on stdin -> JSON array of token ids on stdout (no BOS is added).",
               "rill tokenize"};
  std::string model_dir;
  bool allow_special = false;
  app.add_option("MODEL_DIR", model_dir, "checkpoint directory with tiktoken.model and tokenizer_config.json")
      ->required();
  app.add_flag("--allow-special", allow_special,
               "encode special-token names in the text (e.g. <|im_end|>) as their ids; by default they are "
               "plain text");
  if (const int rc = parse(app, argc, argv); rc >= 0) return rc;

  auto tokenizer = load(model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  const std::string input = read_stdin();
  if (!text::utf8_is_valid(input)) return fail(invalid_argument("stdin is not valid UTF-8"));
  const std::vector<int32_t> ids = tokenizer->encode(input, allow_special);
  std::cout << nlohmann::json(ids).dump() << '\n';
  return std::cout.good() ? 0 : 1;
}

int run_detokenize(int argc, char** argv) {
  CLI::App app{
      "JSON array of token ids on stdin -> the decoded text on stdout (invalid UTF-8 becomes U+FFFD).",
      "rill detokenize"};
  std::string model_dir;
  app.add_option("MODEL_DIR", model_dir, "checkpoint directory with tiktoken.model and tokenizer_config.json")
      ->required();
  if (const int rc = parse(app, argc, argv); rc >= 0) return rc;

  auto tokenizer = load(model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::vector<int32_t> ids;
  try {
    const nlohmann::json input = nlohmann::json::parse(read_stdin());
    if (!input.is_array()) return fail(invalid_argument("stdin must be a JSON array of token ids"));
    for (size_t i = 0; i < input.size(); ++i) {
      if (!input[i].is_number_integer() || input[i].get<int64_t>() < INT32_MIN ||
          input[i].get<int64_t>() > INT32_MAX) {
        return fail(invalid_argument("element {} of the input is not a token id: {}", i, input[i].dump()));
      }
      ids.push_back(static_cast<int32_t>(input[i].get<int64_t>()));
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(invalid_argument("stdin is not JSON: {}", e.what()));
  }
  auto text = tokenizer->decode(ids);
  if (!text.ok()) return fail(text.status());
  std::cout << *text;
  return std::cout.good() ? 0 : 1;
}

}  // namespace rill::cli
