// The HTTP layer in-process, before any model is loaded: /health answers 503 with the load progress in the
// unavailable_error envelope, API routes answer 503, /metrics answers, unknown routes get 404/405
// envelopes, the API key is enforced on /v1 only, and the in-flight count drains.
#include <gtest/gtest.h>

#include <thread>

#include "server/http_server.h"
#include "server/server.h"

namespace rill::server {
namespace {

struct LiveServer {
  ServingContext ctx;
  HttpServer http;
  std::thread thread;
  explicit LiveServer(std::string api_key = "")
      : ctx(ServingConfig{"tiny", "/models/tiny", std::move(api_key), 1024}), http(ctx, 4) {
    EXPECT_TRUE(http.bind("127.0.0.1", 0).ok());
    thread = std::thread([this] { http.listen(); });
  }
  ~LiveServer() {
    http.stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", http.port());
    c.set_connection_timeout(5);
    return c;
  }
};

Json body_of(const httplib::Result& r) {
  return Json::parse(r->body);
}

void expect_envelope(const httplib::Result& r, int status, const std::string& type) {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  const Json j = body_of(r);
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_EQ(j["error"]["type"], type);
  EXPECT_EQ(j["error"]["code"], status);
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
}

TEST(HttpServer, WhileLoading) {
  LiveServer s;
  auto c = s.client();
  s.ctx.set_load_progress(512, 2048);
  auto health = c.Get("/health");
  expect_envelope(health, 503, "unavailable_error");
  EXPECT_NE(body_of(health)["error"]["message"].get<std::string>().find("Loading model: 25%"),
            std::string::npos)
      << health->body;
  expect_envelope(c.Post("/v1/chat/completions", R"({"messages": []})", "application/json"), 503,
                  "unavailable_error");
  expect_envelope(c.Get("/v1/models"), 503, "unavailable_error");
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("rill:num_requests_running{model_name=\"tiny\"} 0"), std::string::npos);
  expect_envelope(c.Get("/nope"), 404, "invalid_request_error");
  expect_envelope(c.Get("/v1/completions"), 405, "invalid_request_error");
  expect_envelope(c.Post("/v1/completions", std::string(4096, ' '), "application/json"), 413,
                  "invalid_request_error");
  EXPECT_EQ(s.ctx.in_flight(), 0);

  s.ctx.set_phase(Phase::Draining);
  auto draining = c.Get("/health");
  expect_envelope(draining, 503, "unavailable_error");
  EXPECT_NE(body_of(draining)["error"]["message"].get<std::string>().find("shutting down"),
            std::string::npos);
  s.ctx.set_phase(Phase::Failed, "no such file");
  EXPECT_NE(s.ctx.unavailable_message().find("no such file"), std::string::npos);
}

// A shutdown that begins while the model loads leaves the server Draining with no engine yet: /metrics still
// answers (without engine gauges) rather than reading an engine that is not there.
TEST(HttpServer, MetricsWhileDrainingBeforeTheModelLoaded) {
  LiveServer s;
  s.ctx.set_phase(Phase::Draining);
  auto metrics = s.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("rill:num_requests_running{model_name=\"tiny\"} 0"), std::string::npos);
}

TEST(HttpServer, ApiKeyOnV1Only) {
  LiveServer s("sekrit");
  auto c = s.client();
  expect_envelope(c.Get("/v1/models"), 401, "authentication_error");
  expect_envelope(c.Get("/v1/models", {{"Authorization", "Bearer nope"}}), 401, "authentication_error");
  expect_envelope(c.Get("/v1/models", {{"Authorization", "Bearer sekrit"}}), 503, "unavailable_error");
  expect_envelope(c.Get("/health"), 503, "unavailable_error");  // no key needed
}

TEST(ServingContext, InFlightTokens) {
  ServingContext ctx(ServingConfig{"m", "d", "", 1});
  auto a = ctx.track_request();
  auto b = ctx.track_request();
  EXPECT_EQ(ctx.in_flight(), 2);
  EXPECT_FALSE(ctx.wait_idle(std::chrono::steady_clock::now() + std::chrono::milliseconds(10)));
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    a.reset();
    b.reset();
  });
  EXPECT_TRUE(ctx.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  t.join();
  EXPECT_EQ(ctx.in_flight(), 0);
}

TEST(ServedName, FromTheModelDirectory) {
  EXPECT_EQ(default_served_name("models/rill-tiny"), "rill-tiny");
  EXPECT_EQ(default_served_name("models/rill-tiny/"), "rill-tiny");
  EXPECT_EQ(default_served_name("/abs/Kimi-Linear-48B-A3B-Instruct"), "Kimi-Linear-48B-A3B-Instruct");
}

}  // namespace
}  // namespace rill::server
