// rill logits MODEL_DIR --prompt-ids 1,2,3 --out F: the fp32 logits of every prompt position, as a
// safetensors file with one tensor `logits` [tokens, vocab] — for comparing rill with any other engine, and a
// sharded run (-tp/-pp/-ep) with the single-rank one.
#include <algorithm>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "io/safetensors.h"
#include "runner/executor_session.h"

namespace rill::cli {

int run_logits(int argc, char** argv) {
  CLI::App app{"Write the fp32 logits of every prompt position to a safetensors file (tensor `logits`)."};
  std::string dir, prompt_ids, out_path;
  int chunk = 0;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory")->required();
  app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids")->required();
  app.add_option("--out", out_path, "output .safetensors path")->required();
  app.add_option("--chunk", chunk, "prefill chunk size in tokens (0 = whole prompt)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxStepTokensFlag));
  add_device_options(app, dev);
  ParallelFlags parallel;
  if (int rc = parse_with_parallel_flags(app, argc, argv, "logits", dev, parallel); rc >= 0) return rc;

  auto ids = parse_id_list(prompt_ids);
  if (!ids.ok()) return report_error("logits", ids.status());
  const int n = int(ids->size());
  // Through an Executor, so -tp/-pp/-ep shard the model exactly as `rill serve` does.
  auto opened = open_local_executor(dir, dev, parallel, runner::scoring_runner_options(n, chunk));
  if (!opened.ok()) return report_error("logits", opened.status());
  runner::Executor& ex = *opened->executor;
  auto session = runner::ExecutorSession::create(ex, n);
  if (!session.ok()) return report_error("logits", session.status());
  auto logits = session->feed(*ids, chunk);
  if (!logits.ok()) return report_error("logits", logits.status());
  const int64_t V = ex.model().config().vocab_size;
  io::NamedTensor t{"logits", TensorView::make(logits->data(), DType::F32, {n, V})};
  if (Status st = io::write_safetensors(out_path, std::span<const io::NamedTensor>(&t, 1),
                                        {{"producer", "rill logits"}, {"device", opened->be->name()}});
      !st.ok())
    return report_error("logits", st);
  std::fprintf(stderr, "wrote logits [%d, %lld] to %s\n", n, static_cast<long long>(V), out_path.c_str());
  return 0;
}

}  // namespace rill::cli
