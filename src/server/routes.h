// The route handlers (routes.cc: table, health, models, metrics, tokenizer; chat_route.cc;
// completion_route.cc) and the pieces the generation routes share.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/generation_job.h"
#include "server/http_server.h"
#include "server/openai/sampling_request.h"

namespace rill::server {

std::optional<ApiError> handle_chat(ServingContext& ctx, const HttpRequest& req, HttpResponse& res);
std::optional<ApiError> handle_completion(ServingContext& ctx, const HttpRequest& req, HttpResponse& res);

// The chat path's output parsing for one rendered request (chat_route.cc; the Responses route shares it):
// the rendered prompt's parser config with ignore_eos applied, and a choice decoder on it.
text::ParserConfig chat_parser_config(const RenderedChat& prompt, const ChatRequest& request);
ChoiceDecoder make_chat_decoder(const RenderedChat& prompt, const ChatRequest& request);

// The body as JSON (400 naming the parse error otherwise).
ApiResult<Json> parse_body(const HttpRequest& req);
std::optional<ApiError> handle_responses(ServingContext& ctx, const HttpRequest& req, HttpResponse& res);

// 404 unless `model` is empty or one of the served names.
std::optional<ApiError> check_model_name(const ServingContext& ctx, const std::string& model);
// The `model` a response names: the requested one when it is served (vLLM), else the first served name.
std::string response_model_name(const ServingContext& ctx, const std::string& requested);
// Fits max_tokens to the context: 400 (naming `prompt_param`) when the prompt leaves no room, 400 naming
// max_tokens when prompt + max_tokens exceed it; an absent max_tokens becomes the room left, or
// `default_max_tokens` (generation_config.json's max_new_tokens) when that is smaller and positive.
std::optional<ApiError> fit_max_tokens(int64_t prompt_len, int max_model_len, const char* prompt_param,
                                       SamplingRequest* sampling, int default_max_tokens = 0);
// Before parsing: generation_config.json's sampling defaults fill the fields the body lacks, and --seed
// gives a seed to a request without one. A body that is not an object is left for the parser to refuse.
void apply_serving_defaults(ServingContext& ctx, Json* body);
// The serving stop set (ModelInfo::eos_token_ids: the config's EOS, [EOS], [EOT]) joins the request's
// stop_token_ids unless it asked for ignore_eos.
void add_serving_stop_ids(const ServingContext& ctx, SamplingRequest* sampling);
// Choice i's engine parameters: max_tokens filled in, seed + i when a seed was given.
engine::SamplingParams choice_params(const SamplingRequest& sampling, int i);

// A whole (non-streamed) generation whose client closed its side of the connection: cancel it and answer
// 499 (it is not read; a half-closed client gets it, see README.md).
ApiError client_gone(GenerationJob& job);

// A whole (non-streamed) job's outcome: each choice's finishing frame (finish_reason, usage) and the logprobs
// of all its frames.
struct WholeJob {
  std::vector<ChoiceFrame> finished;
  std::vector<std::vector<engine::TokenLogprob>> logprobs;
};
// Polls `job` until every choice has finished. An error frame, a shutdown or a client that went away ends the
// wait with the ApiError to answer.
std::optional<ApiError> wait_whole(GenerationJob& job, const HttpRequest& req, WholeJob* out);

// Streams `next(timeout)` as text/event-stream: each call returns SSE text (maybe empty) and sets `done`
// when the stream is complete. A failed write (the client went away) cancels the job.
using SsePump = std::function<std::string(std::chrono::milliseconds timeout, bool* done)>;
void stream_sse(HttpResponse& res, std::shared_ptr<GenerationJob> job, SsePump pump);

}  // namespace rill::server
