// The Responses API's Response object and its stream events (OpenAI's shapes, as the official clients'
// `responses.create` / `responses.stream` read them), built from one choice's parser deltas. One builder
// serves both: streamed, every call's events are sent; whole, only the final response() is. So the output
// items of both are the same, in the order the model wrote them:
//   reasoning  {id rs_…, type "reasoning", summary [], content [{type "reasoning_text", text}]}
//   message    {id msg_…, type "message", role "assistant", content [{type "output_text", text,
//               annotations [], logprobs []}]}
//   function_call {id fc_…, type "function_call", call_id (the tool-call id chat would give), name,
//               arguments}
// Events: response.created, response.in_progress; per item output_item.added, content_part.added (message,
// reasoning), output_text.delta / reasoning_text.delta / function_call_arguments.delta ..., their .done,
// content_part.done, output_item.done; then response.completed (status "completed") or response.incomplete
// (max_output_tokens reached: status "incomplete", incomplete_details.reason "max_output_tokens"). Each event
// has `type` and `sequence_number` (from 0).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/openai/response.h"

namespace rill::server {

class ResponseBuilder {
 public:
  // `echo`: the request fields the object repeats (ResponsesRequest::echo).
  ResponseBuilder(std::string id, int64_t created_at, std::string model, const Json& echo);

  std::vector<Json> start();
  std::vector<Json> on_delta(const text::OutputDelta& delta);
  // Closes the open item; finish_reason "length" makes the response incomplete.
  std::vector<Json> finish(std::string_view finish_reason, const Usage& usage);
  // An engine failure mid-stream: OpenAI's `error` event (the stream then ends).
  Json error_event(const ApiError& error);

  const Json& response() const { return response_; }

 private:
  enum class Open { None, Reasoning, Message, Call };
  Json event(std::string_view type, Json fields);
  void open_item(Open kind, Json item, std::vector<Json>* out);
  void close_item(std::vector<Json>* out);
  Json snapshot(std::string_view status) const;

  Json response_;  // the object, without output while streaming (snapshots add it)
  Json output_ = Json::array();
  int sequence_ = 0;
  Open open_ = Open::None;
  std::string text_;  // the open item's text or arguments so far
};

// One Responses stream event as SSE: "event: <type>\ndata: <json>\n\n".
std::string sse_event(const Json& event);
// {input_tokens, input_tokens_details {cached_tokens}, output_tokens, output_tokens_details
//  {reasoning_tokens}, total_tokens}
Json responses_usage_json(const Usage& usage);

}  // namespace rill::server
