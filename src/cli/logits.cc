// rill logits MODEL_DIR --prompt-ids 1,2,3 --out F: the fp32 logits of every prompt position, as a
// safetensors file with one tensor `logits` [tokens, vocab] — for comparing rill with any other engine.
#include <algorithm>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "io/safetensors.h"
#include "model/sequence_session.h"

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
  if (Status st = refuse_ranks(parallel, "logits", "compare a sharded model through `rill generate -tp N --json` (its greedy tokens) or a -tp N server's logprobs"); !st.ok())
    return report_error("logits", st);

  auto ids = parse_id_list(prompt_ids);
  if (!ids.ok()) return report_error("logits", ids.status());
  auto be = open_backend(dev);
  if (!be.ok()) return report_error("logits", be.status());
  auto m = load_model_with_progress(dir, **be, dev.quantization);
  if (!m.ok()) return report_error("logits", m.status());
  model::Model& model = **m;
  const int n = int(ids->size());
  model::StepLimits limits;
  limits.max_tokens = std::min(chunk > 0 ? chunk : n, 4096);
  limits.max_seqs = 1;
  limits.max_logit_rows = limits.max_tokens;
  limits.max_context = n;
  if (Status st = model.reserve_workspace(limits); !st.ok()) return report_error("logits", st);
  auto session = model::SequenceSession::create(model, n);
  if (!session.ok()) return report_error("logits", session.status());
  auto logits = session->feed(*ids, chunk, true);
  if (!logits.ok()) return report_error("logits", logits.status());
  const int64_t V = model.config().vocab_size;
  io::NamedTensor t{"logits", TensorView::make(logits->data(), DType::F32, {n, V})};
  if (Status st = io::write_safetensors(out_path, std::span<const io::NamedTensor>(&t, 1),
                                        {{"producer", "rill logits"}, {"device", model.backend().name()}});
      !st.ok())
    return report_error("logits", st);
  std::fprintf(stderr, "wrote logits [%d, %lld] to %s\n", n, static_cast<long long>(V), out_path.c_str());
  return 0;
}

}  // namespace rill::cli
