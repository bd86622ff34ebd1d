// rill generate MODEL_DIR --prompt-ids 1,2,3 --max-tokens N: one completion, no server.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/sequence_session.h"

namespace rill::cli {

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate a completion for a prompt given as token ids (greedy by default)."};
  std::string dir, prompt_ids;
  int max_tokens = 16, chunk = 0, top_k = 0;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = false, json = false;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory")->required();
  app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids, e.g. 1,2,3")->required();
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--temperature", temperature, "0 = greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "nucleus sampling mass")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--min-p", min_p, "drop tokens below min_p x the top probability")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  app.add_option("--chunk", chunk, "prefill chunk size in tokens (0 = whole prompt)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_flag("--json", json, "print {prompt_ids, completion_ids, finish_reason} as JSON");
  add_device_options(app, dev);
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  auto ids = parse_id_list(prompt_ids);
  if (!ids.ok()) return report_error("generate", ids.status());
  auto be = open_backend(dev);
  if (!be.ok()) return report_error("generate", be.status());
  auto m = load_model_with_progress(dir, **be);
  if (!m.ok()) return report_error("generate", m.status());
  model::Model& model = **m;
  const int context = int(ids->size()) + max_tokens;
  if (context > model.config().max_position_embeddings)
    return report_error("generate", invalid_argument("prompt + max tokens ({}) exceed the model's context ({})", context,
                                                     model.config().max_position_embeddings));
  model::StepLimits limits;
  limits.max_tokens = std::max<int>(1, std::min<int>(chunk > 0 ? chunk : int(ids->size()), 4096));
  limits.max_seqs = 1;
  limits.max_logit_rows = 1;
  limits.max_context = context;
  if (Status st = model.reserve_workspace(limits); !st.ok()) return report_error("generate", st);
  auto session = model::SequenceSession::create(model, context);
  if (!session.ok()) return report_error("generate", session.status());

  std::vector<int32_t> out;
  const char* finish = "length";
  backend::SamplingRow row{temperature, top_p, min_p, top_k, seed, 0};
  auto logits = session->feed(*ids, chunk, false);
  if (!logits.ok()) return report_error("generate", logits.status());
  const auto& eos = model.config().eos_token_ids;
  for (int i = 0; i < max_tokens; ++i) {
    row.counter = uint64_t(i);
    auto next = session->sample(row);
    if (!next.ok()) return report_error("generate", next.status());
    out.push_back(*next);
    if (!ignore_eos && std::find(eos.begin(), eos.end(), *next) != eos.end()) {
      finish = "stop";
      break;
    }
    if (i + 1 == max_tokens) break;
    const int32_t id = *next;
    auto step = session->feed(std::span<const int32_t>(&id, 1), 1, false);
    if (!step.ok()) return report_error("generate", step.status());
  }
  auto join = [](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  };
  if (json)
    std::printf("{\"prompt_ids\": [%s], \"completion_ids\": [%s], \"finish_reason\": \"%s\"}\n", join(*ids).c_str(),
                join(out).c_str(), finish);
  else
    std::printf("%s\n", join(out).c_str());
  return 0;
}

}  // namespace rill::cli
