// `rill <command> ...`: dispatches to cli/<command>.cc.
#include <cstdio>
#include <cstring>
#include <new>
#include <string_view>

#include "backend/backend.h"
#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"serve", rill::cli::run_serve, "OpenAI-compatible HTTP server (chat, completions, models, metrics)"},
    {"chat", rill::cli::run_chat, "interactive chat in the terminal"},
    {"generate", rill::cli::run_generate, "generate a completion for a prompt (ids or text)"},
    {"logits", rill::cli::run_logits, "write the fp32 logits of every prompt position to a safetensors file"},
    {"perplexity", rill::cli::run_perplexity, "sliding-window perplexity of a text file (llama-perplexity's)"},
    {"inspect", rill::cli::run_inspect, "config summary, tensor totals, memory per sequence, validation"},
    {"tokenize", rill::cli::run_tokenize, "UTF-8 text on stdin -> JSON array of token ids"},
    {"detokenize", rill::cli::run_detokenize, "JSON array of token ids on stdin -> text"},
    {"render", rill::cli::run_render, "OpenAI chat request (JSON) on stdin -> rendered prompt and ids"},
    {"bench", rill::cli::run_bench, "benchmark prefill, decode and per-op kernels; `bench serve`: load a running server"},
    {"tiny-model", rill::cli::run_tiny_model, "write the project's own small random model (for demos and tests)"},
    {"train-tokenizer", rill::cli::run_train_tokenizer, "train a byte-level BPE vocabulary; text -> int32 ids"},
};

void print_usage(FILE* out) {
  std::fprintf(out,
               "usage: rill <command> [options]   (rill <command> --help for its options; rill --version)\n\n"
               "commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-15s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::printf("rill %s (CUDA backend %s)\n", RILL_VERSION,
                rill::backend::cuda_backend_compiled() ? "compiled in" : "not compiled in");
    return 0;
  }
  const std::string_view name = argv[1];
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    // Sizes from configs and flags are checked against the available memory before allocating; this is the
    // last resort, so that an allocation that still fails ends with a message and exit 1, not an abort.
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "rill %s: out of memory (std::bad_alloc)\n", c.name);
      return 1;
    }
  }
  std::fprintf(stderr, "rill: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
