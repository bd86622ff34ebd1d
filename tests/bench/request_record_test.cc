// The SSE recorder on streams the test writes itself, in OpenAI's framing (completions and chat), cut into
// pieces at every byte boundary: TTFT and ITL are the times of the frames with text, tokens the usage
// chunk's.
#include <gtest/gtest.h>

#include "bench/serve/request_record.h"

namespace rill::bench::serve {
namespace {

const std::string kCompletionStream =
    "data: {\"choices\":[{\"index\":0,\"text\":\"Hel\",\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"lo\",\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"!\",\"finish_reason\":\"length\"}],\"usage\":null}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11}}\n\n"
    "data: [DONE]\n\n";

// Feeds `stream` split at `cut`, the frame ending at byte b arriving at time b (seconds).
RequestRecord record(const std::string& stream, size_t cut) {
  RequestRecord r;
  SseRecorder rec(r);
  rec.feed(std::string_view(stream).substr(0, cut), double(cut));
  rec.feed(std::string_view(stream).substr(cut), double(stream.size()));
  rec.finish(double(stream.size()) + 1);
  return r;
}

TEST(SseRecorder, CompletionStreamAtEveryCut) {
  const std::string& s = kCompletionStream;
  // Where each frame with text ends (its last newline): a frame is seen once its line is complete.
  std::vector<size_t> ends;
  for (const char* needle : {"\"Hel\"", "\"lo\"", "\"!\""}) ends.push_back(s.find('\n', s.find(needle)) + 1);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    SCOPED_TRACE(cut);
    const RequestRecord r = record(s, cut);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.text, "Hello!");
    EXPECT_EQ(r.prompt_tokens, 7);
    EXPECT_EQ(r.completion_tokens, 4);
    std::vector<double> times;
    for (size_t e : ends) times.push_back(e <= cut ? double(cut) : double(s.size()));
    EXPECT_EQ(r.ttft_s, times[0]);
    ASSERT_EQ(r.itl_s.size(), 2u);
    EXPECT_EQ(r.itl_s[0], times[1] - times[0]);
    EXPECT_EQ(r.itl_s[1], times[2] - times[1]);
    EXPECT_EQ(r.latency_s, double(s.size()) + 1);
  }
}

TEST(SseRecorder, ChatDeltasAndCrLf) {
  const std::string s =
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}"
      "\r\n\r\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}],\"usage\":null}\r\n\r\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}],\"usage\":null}\r\n\r\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\r\n\r\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\r\n\r\ndata: "
      "[DONE]\r\n\r\n";
  RequestRecord r;
  SseRecorder rec(r);
  rec.feed(s.substr(0, s.find("content\":\"ok")), 1.0);  // the role frame and the reasoning frame
  rec.feed(s.substr(s.find("content\":\"ok")), 2.5);
  rec.finish(3.0);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.text, "hmok");
  EXPECT_EQ(r.ttft_s, 1.0);  // the reasoning frame, not the empty role frame
  EXPECT_EQ(r.itl_s, std::vector<double>{1.5});
  EXPECT_EQ(r.completion_tokens, 2);
}

TEST(SseRecorder, FailuresAreNamed) {
  {
    RequestRecord r;
    SseRecorder rec(r);
    rec.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n", 1);
    rec.finish(2);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("include_usage"), std::string::npos) << r.error;
  }
  {
    RequestRecord r;
    SseRecorder rec(r);
    rec.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 1);
    rec.finish(2);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("[DONE]"), std::string::npos) << r.error;
  }
  {
    RequestRecord r;
    SseRecorder rec(r);
    rec.feed("data: {\"error\":{\"message\":\"engine failed\",\"code\":500}}\n\ndata: [DONE]\n\n", 1);
    rec.finish(2);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("engine failed"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace rill::bench::serve
