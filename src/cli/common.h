// Pieces several subcommands share: device choice, model loading with a progress bar, id-list parsing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "core/status.h"
#include "model/model.h"

namespace rill::cli {

// Upper bounds of the numeric flags that size memory (serve, chat, generate, logits, bench): far above any
// useful setting, low enough that the sizes derived from them (KDA state slots x state bytes, cache blocks x
// block bytes, the block tables of the workspace's planning step) fit in int64 and in memory before the
// memory check runs, so a typo is named as the flag rather than met as std::bad_alloc.
inline constexpr int kMaxBatchSizeFlag = 4096;      // sequences per step = KDA state slots (vLLM: 256)
inline constexpr int kMaxStepTokensFlag = 1 << 20;  // tokens per engine step (prefill chunk)
inline constexpr int kMaxContextFlag = 1 << 24;     // context length: 16M tokens, 16x Kimi Linear's 1M
inline constexpr int kMaxKvBlocksFlag = 1 << 24;    // MLA cache blocks (64 tokens each): 2^30 tokens
inline constexpr int kMaxMiBFlag = 1 << 24;         // MiB budgets: 16 TiB
inline constexpr int kMaxRepeatsFlag = 1000;        // timed repetitions

struct DeviceOptions {
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  std::string quantization;     // --quantization: "" | none | fp8 (model::apply_quantization)
  std::vector<std::string> backend_options;  // --backend-option key=value (backend/cuda_backend_options.h)
};
// --device, --quantization, --backend-option (repeatable), and --log-level (every command that loads a model
// logs through core/log.h).
void add_device_options(CLI::App& app, DeviceOptions& o);

// "auto" picks cuda when this build has it and a GPU answers, else cpu (saying so at warning level).
Result<std::unique_ptr<backend::Backend>> open_backend(const DeviceOptions& o);

// Loads MODEL_DIR on the backend, drawing a progress bar on stderr when it is a terminal.
Result<std::unique_ptr<model::Model>> load_model_with_progress(const std::filesystem::path& dir,
                                                               backend::Backend& be,
                                                               const std::string& quantization = "");

// --speculative-config method draft_model: the draft checkpoint's config.json loads and its vocabulary is
// the target's, checked before any weights load (errors name the key and both sizes).
Status check_draft_model(const std::filesystem::path& target_dir, const std::filesystem::path& draft_dir);

// vLLM's short parallel flags: "-tp" -> "--tensor-parallel-size" (also -pp, -dp, -ep; "-tp=2" keeps its value).
std::string expand_parallel_short_flag(std::string arg);
// Every argument through expand_parallel_short_flag (argv[0] kept), for commands taking those flags.
std::vector<std::string> expand_parallel_short_flags(int argc, char** argv);

// "1,2,3" -> {1, 2, 3}; errors name the bad element.
Result<std::vector<int32_t>> parse_id_list(const std::string& text);

// Prints a Status to stderr as "rill <cmd>: <message>" and returns the exit code (1, or 2 for bad input).
int report_error(const char* command, const Status& status);

// Runs a CLI11 parse; returns -1 to continue, else the exit code: 0 after --help, 2 for any usage error. An
// unknown flag is named with the closest known one (among the app's and `also_known`, e.g. accepted aliases).
int parse_args(CLI::App& app, int argc, char** argv, const std::vector<std::string>& also_known = {});

// The known flag nearest to `flag` by edit distance ("" when none is close); the hint for a typo.
std::string closest_flag(const CLI::App& app, const std::string& flag, const std::vector<std::string>& also = {});

}  // namespace rill::cli
