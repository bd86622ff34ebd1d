// The route table, and the small routes: health, models, metrics, version, tokenize, detokenize.
#include "server/routes.h"

#include <algorithm>
#include <filesystem>

#include "server/openai/chat_request.h"
#include "server/openai/response.h"
#include "text/json/bounded_json.h"

namespace rill::server {
namespace {

const int64_t kStartTime = unix_now();

std::vector<std::string> served_names(const ServingContext& ctx) {
  const ServingConfig& c = ctx.config();
  return c.served_model_names.empty() ? std::vector<std::string>{c.served_model_name} : c.served_model_names;
}

std::optional<ApiError> handle_health(ServingContext& ctx, const HttpRequest&, HttpResponse& res) {
  if (ctx.phase() != Phase::Ready) return ApiError{503, ctx.unavailable_message()};
  write_json(res, Json{{"status", "ok"}});
  return std::nullopt;
}

Json model_card(const ServingContext& ctx, const std::string& name) {
  return Json{{"id", name},
              {"object", "model"},
              {"created", kStartTime},
              {"owned_by", "rill"},
              {"root", ctx.config().model_dir},
              {"parent", nullptr},
              {"max_model_len", ctx.model_info().max_model_len}};
}

std::optional<ApiError> handle_models(ServingContext& ctx, const HttpRequest&, HttpResponse& res) {
  Json cards = Json::array();
  for (const std::string& name : served_names(ctx)) cards.push_back(model_card(ctx, name));
  write_json(res, Json{{"object", "list"}, {"data", std::move(cards)}});
  return std::nullopt;
}

std::optional<ApiError> handle_model(ServingContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const std::string id = req.matches.size() > 1 ? req.matches[1] : "";
  if (!ctx.config().serves(id)) return model_not_found(id);
  write_json(res, model_card(ctx, id));
  return std::nullopt;
}

std::optional<ApiError> handle_metrics(ServingContext& ctx, const HttpRequest&, HttpResponse& res) {
  std::optional<engine::EngineStats> stats;
  if (engine::Engine* engine = ctx.engine_if_loaded()) stats = engine->stats();
  res.set_content(ctx.metrics().render(stats ? &*stats : nullptr), "text/plain; version=0.0.4");
  return std::nullopt;
}

std::optional<ApiError> handle_version(ServingContext&, const HttpRequest&, HttpResponse& res) {
  write_json(res, Json{{"version", "0.1.0"}});
  return std::nullopt;
}

// vLLM's shapes: {prompt, add_special_tokens, return_token_strs} or the chat form {messages, tools, ...}
// -> {count, max_model_len, tokens, [token_strs]}. The chat form renders exactly as /v1/chat/completions.
std::optional<ApiError> handle_tokenize(ServingContext& ctx, const HttpRequest& req, HttpResponse& res) {
  RILL_API_ASSIGN_OR_RETURN(Json body, parse_body(req));
  if (!body.is_object()) return bad_request("", "the request body must be a JSON object");
  FieldReader r(body);
  RILL_API_TRY(check_model_name(ctx, r.string("model").value_or("")));
  const bool strs = r.boolean("return_token_strs").value_or(false);
  r.boolean("add_special_tokens");
  if (!r.ok()) return *r.error();
  std::vector<int32_t> ids;
  if (r.any("messages")) {
    RILL_API_ASSIGN_OR_RETURN(ChatRequest chat, parse_chat_request(body, ctx.parse_limits()));
    RILL_API_ASSIGN_OR_RETURN(RenderedChat rendered, ctx.chat().render(chat));
    ids = std::move(rendered.ids);
  } else {
    const auto prompt = r.string("prompt");
    if (!r.ok()) return *r.error();
    if (!prompt) return bad_request("prompt", "prompt: is required (or messages, for the chat form)");
    ids = ctx.tokenizer().encode(*prompt, /*allow_special=*/true);
  }
  Json out{{"count", ids.size()}, {"max_model_len", ctx.model_info().max_model_len}, {"tokens", ids}};
  if (strs) {
    Json pieces = Json::array();
    for (int32_t id : ids) pieces.push_back(std::string(ctx.tokenizer().token_bytes(id)));
    out["token_strs"] = std::move(pieces);
  }
  write_json(res, out);
  return std::nullopt;
}

std::optional<ApiError> handle_detokenize(ServingContext& ctx, const HttpRequest& req, HttpResponse& res) {
  RILL_API_ASSIGN_OR_RETURN(Json body, parse_body(req));
  if (!body.is_object()) return bad_request("", "the request body must be a JSON object");
  FieldReader r(body);
  RILL_API_TRY(check_model_name(ctx, r.string("model").value_or("")));
  const Json* tokens = r.array("tokens");
  if (!r.ok()) return *r.error();
  if (!tokens) return bad_request("tokens", "tokens: is required");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.model_info().vocab_size)
      return bad_request("tokens", "tokens[{}]: must be a token id in [0, {}), got {}", i,
                         ctx.model_info().vocab_size, t.dump());
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  auto text = ctx.tokenizer().decode(ids);
  if (!text.ok()) return error_from_status(text.status(), "tokens");
  write_json(res, Json{{"prompt", *text}});
  return std::nullopt;
}

}  // namespace

const std::vector<Route>& route_table() {
  static const std::vector<Route> routes = {
      {"GET", "/health", handle_health, false},
      {"GET", "/metrics", handle_metrics, false},
      {"GET", "/version", handle_version, false},
      {"GET", "/v1/models", handle_models, true},
      {"GET", "/v1/models/*", handle_model, true},
      {"POST", "/v1/completions", handle_completion, true},
      {"POST", "/v1/chat/completions", handle_chat, true},
      {"POST", "/v1/responses", handle_responses, true},
      {"POST", "/tokenize", handle_tokenize, true},
      {"POST", "/detokenize", handle_detokenize, true},
  };
  return routes;
}

ApiResult<Json> parse_body(const HttpRequest& req) {
  auto body = text::parse_bounded_json(req.body);
  if (!body.ok()) return bad_request("", "Invalid JSON in the request body: {}", body.status().message());
  return std::move(body).value();
}

std::optional<ApiError> check_model_name(const ServingContext& ctx, const std::string& model) {
  if (model.empty() || ctx.config().serves(model)) return std::nullopt;
  return model_not_found(model);
}

std::string response_model_name(const ServingContext& ctx, const std::string& requested) {
  return !requested.empty() && ctx.config().serves(requested) ? requested : ctx.config().served_model_name;
}

std::optional<ApiError> fit_max_tokens(int64_t prompt_len, int max_model_len, const char* prompt_param,
                                       SamplingRequest* s, int default_max_tokens) {
  if (prompt_len >= max_model_len)
    return bad_request(
        prompt_param,
        "This model's maximum context length is {} tokens. However, your prompt ({}) has {} tokens, "
        "which leaves no room for a completion. Please shorten it.",
        max_model_len, prompt_param, prompt_len);
  if (s->max_tokens && prompt_len + *s->max_tokens > max_model_len)
    return bad_request(
        "max_tokens",
        "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
        "the {}, {} for the completion). Please reduce max_tokens or the {}.",
        max_model_len, prompt_len + *s->max_tokens, prompt_len, prompt_param, *s->max_tokens, prompt_param);
  if (!s->max_tokens) {
    s->max_tokens = max_model_len - prompt_len;
    if (default_max_tokens > 0 && default_max_tokens < *s->max_tokens) s->max_tokens = default_max_tokens;
  }
  return std::nullopt;
}

void apply_serving_defaults(ServingContext& ctx, Json* body) {
  if (!body->is_object()) return;
  for (const auto& [key, value] : ctx.model_info().sampling_defaults.items())
    if (!body->contains(key)) (*body)[key] = value;
  if (!body->contains("seed") || (*body)["seed"].is_null())
    if (auto seed = ctx.next_seed()) (*body)["seed"] = *seed;
}

void add_serving_stop_ids(const ServingContext& ctx, SamplingRequest* sampling) {
  engine::SamplingParams& p = sampling->params;
  if (p.ignore_eos) return;
  for (int32_t id : ctx.model_info().eos_token_ids)
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), id) == p.stop_token_ids.end())
      p.stop_token_ids.push_back(id);
}

engine::SamplingParams choice_params(const SamplingRequest& sampling, int i) {
  engine::SamplingParams p = sampling.params;
  p.max_tokens = int32_t(sampling.max_tokens.value_or(16));
  if (p.seed) p.seed = *p.seed + uint64_t(i);
  return p;
}

ApiError client_gone(GenerationJob& job) {
  job.cancel();
  return ApiError{499,
                  "The client closed the connection before the response was ready: generation cancelled"};
}

std::optional<ApiError> wait_whole(GenerationJob& job, const HttpRequest& req, WholeJob* out) {
  out->finished.assign(size_t(job.size()), ChoiceFrame{});
  out->logprobs.assign(size_t(job.size()), {});
  while (!job.done()) {
    if (req.client_gone()) return client_gone(job);
    for (JobFrame& jf : job.poll(std::chrono::milliseconds(200))) {
      auto& lp = out->logprobs[size_t(jf.choice)];
      lp.insert(lp.end(), jf.frame.logprobs.begin(), jf.frame.logprobs.end());
      if (!jf.frame.finish) continue;
      const ChoiceFrame& f = jf.frame;
      if (f.finish_reason == "error") return error_from_status(f.error);
      if (f.finish_reason == "server_interrupted")
        return ApiError{503, "The server shut down before this request finished"};
      out->finished[size_t(jf.choice)] = std::move(jf.frame);
    }
  }
  return std::nullopt;
}

void stream_sse(HttpResponse& res, std::shared_ptr<GenerationJob> job, SsePump pump) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.content_type = "text/event-stream";
  // Stepped (issue #32 N4): each step writes what the engine has produced and returns, so a stream holds
  // no handler thread while its request waits in the engine or its client does not read; the engine's push
  // wakes it.
  res.stream_step = [job, pump, woken = false](const ChunkWriter& write, const StreamWake& wake) mutable {
    if (!woken) {
      job->wake_on_event(wake);
      woken = true;
    }
    bool done = false;
    const std::string text = pump(std::chrono::milliseconds(0), &done);
    if (!write(text)) {
      job->cancel();  // the client went away
      return StreamStep::Done;
    }
    if (done) {
      job->wake_on_event(nullptr);
      return StreamStep::Done;
    }
    return text.empty() ? StreamStep::Wait : StreamStep::More;
  };
}

}  // namespace rill::server
