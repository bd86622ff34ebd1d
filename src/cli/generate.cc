// rill generate MODEL_DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-tokens N: one completion through the
// engine (the same path the server uses), printed as it streams.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "engine/engine.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate one completion for a prompt (text with the checkpoint's tokenizer, or token ids). "
               "Greedy by default."};
  std::string dir, prompt_ids, prompt_text;
  int max_tokens = 16, chunk = 2048;
  engine::SamplingParams p;
  p.temperature = 0.0f;
  uint64_t seed = 0;
  bool json = false;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory")->required();
  auto* ids_opt = app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids, e.g. 1,2,3");
  auto* text_opt = app.add_option("--prompt", prompt_text, "prompt text (encoded with the checkpoint's tokenizer)");
  ids_opt->excludes(text_opt);
  app.add_option("--max-tokens", max_tokens, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--temperature", p.temperature, "0 = greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-p", p.top_p, "nucleus sampling mass")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--top-k", p.top_k, "keep the k most likely tokens (0 = all)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));  // the vocabulary bound of config.cc
  app.add_option("--min-p", p.min_p, "drop tokens below min_p x the top probability")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  app.add_option("--stop", p.stop, "stop string (repeatable)");
  app.add_option("--chunk", chunk, "prefill chunk size in tokens (--max-num-tokens of the engine)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxStepTokensFlag));
  app.add_flag("--ignore-eos", p.ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_flag("--json", json, "print {prompt_ids, completion_ids, text, finish_reason} as JSON");
  std::string speculative_config;
  app.add_option("--speculative-config", speculative_config,
                 "speculative decoding, vLLM's JSON, e.g. {\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                 "\"prompt_lookup_max\": 4}, {\"method\": \"suffix\", \"num_speculative_tokens\": 4} or "
                 "{\"method\": \"draft_model\", \"model\": DIR, \"num_speculative_tokens\": 4} (a smaller checkpoint "
                 "with the same vocabulary; greedy or seeded: the same output in fewer steps)");
  add_device_options(app, dev);
  ParallelFlags parallel;
  if (int rc = parse_with_parallel_flags(app, argc, argv, "generate", dev, parallel); rc >= 0) return rc;
  engine::spec::SpeculativeConfig speculative;
  if (!speculative_config.empty()) {
    auto spec = engine::spec::parse_speculative_config(speculative_config, /*draft_models=*/true);
    if (!spec.ok()) return report_error("generate", spec.status());
    speculative = *spec;
    if (spec->method == "draft_model") {
      if (Status st = check_draft_model(dir, spec->draft_model); !st.ok()) return report_error("generate", st);
    }
  }
  if (prompt_ids.empty() && prompt_text.empty())
    return report_error("generate", invalid_argument("give --prompt TEXT or --prompt-ids 1,2,3"));

  std::shared_ptr<const text::Tokenizer> tok;
  if (auto t = text::Tokenizer::load(dir); t.ok()) tok = std::make_shared<const text::Tokenizer>(std::move(t).value());
  else if (!prompt_text.empty()) return report_error("generate", t.status());
  std::vector<int32_t> ids;
  if (!prompt_text.empty()) {
    ids = tok->encode(prompt_text, /*allow_special=*/true);
  } else {
    auto parsed = parse_id_list(prompt_ids);
    if (!parsed.ok()) return report_error("generate", parsed.status());
    ids = std::move(parsed).value();
  }
  const int context = int(ids.size()) + max_tokens + 1;
  engine::EngineOptions eo;
  eo.max_batch_size = 1;
  eo.max_num_tokens = std::min(chunk, std::max<int>(1, int(ids.size())));
  eo.max_model_len = context;
  eo.num_kv_blocks = (context + eo.block_size - 1) / eo.block_size;
  eo.speculative = speculative;
  // A draft model (--speculative-config draft_model) runs in the engine's executor, on the --device backend
  // (unsplit, also with -tp N: rank 0's device; runner/draft_proposer.h).
  auto opened = open_local_engine(dir, dev, parallel, tok, eo);
  if (!opened.ok()) return report_error("generate", opened.status());
  engine::Engine* e = opened->get();
  p.max_tokens = max_tokens;
  p.seed = seed;
  auto stream = e->submit({ids, p});
  if (!stream.ok()) return report_error("generate", stream.status());

  std::vector<int32_t> out;
  std::string text;
  engine::StreamEvent ev;
  for (;;) {
    if (!(*stream)->next(&ev, std::chrono::hours(1))) return report_error("generate", internal_error("timed out"));
    out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
    text += ev.text;
    if (!json && tok) {
      std::fputs(ev.text.c_str(), stdout);
      std::fflush(stdout);
    }
    if (ev.finish) break;
  }
  if (*ev.finish == engine::FinishReason::Error) return report_error("generate", ev.error);
  auto join = [](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  };
  if (json) {
    nlohmann::ordered_json j = {{"prompt_ids", ids}, {"completion_ids", out}, {"text", text},
                                {"finish_reason", engine::finish_reason_name(*ev.finish)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else if (tok) {
    std::printf("\n");
  } else {
    std::printf("%s\n", join(out).c_str());
  }
  e->shutdown(true);
  return 0;
}

}  // namespace rill::cli
