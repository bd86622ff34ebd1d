// POST /v1/responses: the Responses request as a chat request (openai/responses_request.h) -> the chat
// path's rendering, fitting and output parsing -> one engine request -> the Response object, or its event
// stream (openai/responses_object.h; `event:` + `data:` frames, no [DONE], as OpenAI sends them).
#include <chrono>

#include "server/openai/responses_object.h"
#include "server/openai/responses_request.h"
#include "server/routes.h"

namespace rill::server {
namespace {

using Clock = std::chrono::steady_clock;

// Parser deltas into the builder; the finish frame ends it. Returns the events, or the error to report.
struct ResponsesPump {
  std::shared_ptr<GenerationJob> job;
  ResponseBuilder builder;
  std::vector<ChoiceFrame> opening;  // frames of the forced tool-call prefix
  bool started = false;

  // Events for `frames`; `*failed` is set (and the events end) at an engine error or a shutdown.
  std::vector<Json> take(std::vector<ChoiceFrame>& frames, std::optional<ApiError>* failed) {
    std::vector<Json> out;
    for (ChoiceFrame& f : frames) {
      if (!f.finish) {
        for (Json& e : builder.on_delta(f.delta)) out.push_back(std::move(e));
        continue;
      }
      if (f.finish_reason == "error") {
        *failed = error_from_status(f.error);
      } else if (f.finish_reason == "server_interrupted") {
        *failed = ApiError{503, "The server shut down before this request finished"};
      } else {
        for (Json& e : builder.finish(f.finish_reason, f.usage)) out.push_back(std::move(e));
      }
      break;
    }
    return out;
  }

  std::vector<ChoiceFrame> poll(std::chrono::milliseconds timeout) {
    std::vector<ChoiceFrame> frames;
    if (!started) {
      started = true;
      frames = std::move(opening);
    }
    for (JobFrame& jf : job->poll(timeout)) frames.push_back(std::move(jf.frame));
    return frames;
  }
};

}  // namespace

std::optional<ApiError> handle_responses(ServingContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const auto arrival = Clock::now();
  RILL_API_ASSIGN_OR_RETURN(Json body, parse_body(req));
  apply_serving_defaults(ctx, &body);
  RILL_API_ASSIGN_OR_RETURN(ResponsesRequest parsed, parse_responses_request(body, ctx.parse_limits()));
  ChatRequest& request = parsed.chat;
  RILL_API_TRY(check_model_name(ctx, request.model));
  add_serving_stop_ids(ctx, &request.sampling);
  RILL_API_ASSIGN_OR_RETURN(RenderedChat prompt, ctx.chat().render(request));
  RILL_API_TRY(fit_max_tokens(int64_t(prompt.ids.size()), ctx.model_info().max_model_len, "input",
                              &request.sampling, ctx.model_info().default_max_tokens));
  if (!prompt.raw && !text::make_output_parser(chat_parser_config(prompt, request)).ok())
    return ApiError{500, "internal error: the output parser rejected its configuration"};

  auto job = std::make_shared<GenerationJob>(ctx, arrival);
  ChoiceDecoder decoder = make_chat_decoder(prompt, request);
  std::vector<ChoiceFrame> opening = decoder.begin(prompt.forced_prefix);
  engine::Request r{prompt.ids, choice_params(request.sampling, 0), prompt.reported_prompt_tokens,
                    ctx.chat().constraint(prompt, request.sampling.params.stop_token_ids)};
  RILL_API_TRY(job->submit(std::move(r), std::move(decoder)));
  const std::string id = make_response_id("resp_");
  job->set_request_id(id, req.method, req.path, req.client);
  auto pump = std::make_shared<ResponsesPump>(ResponsesPump{
      job, ResponseBuilder(id, unix_now(), response_model_name(ctx, request.model), parsed.echo),
      std::move(opening)});

  if (!request.sampling.stream) {
    std::optional<ApiError> failed;
    while (!job->done() || !pump->started) {
      if (req.client_gone()) return client_gone(*job);
      std::vector<ChoiceFrame> frames = pump->poll(std::chrono::milliseconds(200));
      pump->take(frames, &failed);
      if (failed) return *failed;
    }
    write_json(res, pump->builder.response());
    return std::nullopt;
  }

  stream_sse(res, job, [pump](std::chrono::milliseconds timeout, bool* done) {
    std::string out;
    if (!pump->started)
      for (const Json& e : pump->builder.start()) out += sse_event(e);
    std::optional<ApiError> failed;
    std::vector<ChoiceFrame> frames = pump->poll(timeout);
    for (const Json& e : pump->take(frames, &failed)) out += sse_event(e);
    if (failed) {
      out += sse_event(pump->builder.error_event(*failed));
      pump->job->cancel();
    }
    *done = failed.has_value() || pump->job->done();
    return out;
  });
  return std::nullopt;
}

}  // namespace rill::server
