// The `vllm serve` flags that rill serve has no option of its own for: each is accepted with a one-line notice
// (rill already behaves that way, or the flag has no meaning here) or refused with the reason, so a vLLM command
// line never meets "unknown flag". The flags rill implements are options in serve.cc / serve_vllm_flags.cc.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace rill::cli {

enum class VllmFlagArg { Value, Switch };  // `--flag V` / `--flag=V`, or `--flag` (and argparse's `--no-flag`)

struct VllmOnlyFlag {
  const char* name;  // "--kv-cache-dtype"
  VllmFlagArg arg;
  // The notice when the flag is accepted; nullptr: always refused.
  const char* notice;
  // Comma-separated values accepted with the notice (nullptr: any); another value is refused with `refusal`.
  const char* accepted_values;
  const char* refusal;  // why rill cannot do what the flag (or that value) asks
};

// Every entry, in the order of the table (for --help and the tests).
const std::vector<VllmOnlyFlag>& vllm_only_flags();

// Takes the table's flags out of `args` (argv order; args[0] is the program) unless `app` has an option of
// that name, and vLLM's spellings rill reads another way: `--model M` becomes the positional MODEL_DIR,
// `-q V` `--quantization V`, `--uvicorn-log-level V` `--log-level V`, `-O3` / `-O.x=y` a compilation notice.
// Returns the notices to log ("--flag: why"); a refused flag (or value) is an InvalidArgument naming it.
Result<std::vector<std::string>> take_vllm_only_flags(std::vector<std::string>& args, const CLI::App& app);

// The names above and serve's vLLM / trtllm aliases, for the unknown-flag hint.
std::vector<std::string> vllm_flag_names();

// One paragraph for `rill serve --help`: the flags accepted with a notice and those refused.
std::string vllm_only_flags_help();

}  // namespace rill::cli
