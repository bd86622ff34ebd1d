// The HTTP layer in-process, over raw sockets (raw_http.h), before any model is loaded.
//   HttpServer: /health answers 503 with the load progress in the unavailable_error envelope, API routes
//   answer 503, /metrics answers, unknown routes get 404/405 envelopes, the API key guards every route but
//   /health (and /metrics only when asked), the in-flight count drains.
//   HttpListener (with test handlers): RFC 9112 framing (pipelining, HTTP/1.0, half-close, 100-continue,
//   length and coding conflicts answered at once), the size limits on every transfer coding, the head /
//   body / keep-alive deadlines, the connection cap, streamed bodies, client_gone() (a stream whose client
//   closed ends), stop() before run().
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "raw_http.h"
#include "server/http/http_listener.h"
#include "server/http_server.h"
#include "server/server.h"

namespace rill::server {
namespace {

using testing::RawConnection;
using testing::RawResponse;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

HttpLimits small_limits() {
  HttpLimits l;
  l.max_body_bytes = 1024;
  l.max_header_bytes = 2048;
  l.handler_threads = 4;
  l.io_threads = 2;
  return l;
}

struct LiveServer {
  ServingContext ctx;
  HttpServer http;
  std::thread thread;
  explicit LiveServer(std::string api_key = "", bool key_on_metrics = false,
                      const HttpLimits& limits = small_limits(), CorsOptions cors = {})
      : ctx(ServingConfig{"tiny", "/models/tiny", std::move(api_key), key_on_metrics, {}, std::move(cors)}),
        http(ctx, limits) {
    EXPECT_TRUE(http.bind("127.0.0.1", 0).ok());
    thread = std::thread([this] { http.listen(); });
  }
  ~LiveServer() {
    http.stop();
    thread.join();
  }
  RawResponse request(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& headers = "") {
    RawConnection c(http.port());
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers;
    if (!body.empty() || method == "POST")
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    c.send(req + "\r\n" + body);
    return c.read_response();
  }
};

Json body_of(const RawResponse& r) {
  return Json::parse(r.body);
}

void expect_envelope(const RawResponse& r, int status, const std::string& type) {
  ASSERT_NE(r.status, 0) << "no response";
  EXPECT_EQ(r.status, status) << r.body;
  const Json j = body_of(r);
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_EQ(j["error"]["type"], type);
  EXPECT_EQ(j["error"]["code"], status);
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
}

TEST(HttpServer, WhileLoading) {
  LiveServer s;
  s.ctx.set_load_progress(512, 2048);
  auto health = s.request("GET", "/health");
  expect_envelope(health, 503, "unavailable_error");
  EXPECT_NE(body_of(health)["error"]["message"].get<std::string>().find("Loading model: 25%"),
            std::string::npos)
      << health.body;
  expect_envelope(s.request("POST", "/v1/chat/completions", R"({"messages": []})"), 503, "unavailable_error");
  expect_envelope(s.request("GET", "/v1/models"), 503, "unavailable_error");
  auto metrics = s.request("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("rill:num_requests_running{model_name=\"tiny\"} 0"), std::string::npos);
  expect_envelope(s.request("GET", "/nope"), 404, "invalid_request_error");
  auto wrong_method = s.request("GET", "/v1/completions");
  expect_envelope(wrong_method, 405, "invalid_request_error");
  EXPECT_EQ(wrong_method.header("allow"), "POST");
  expect_envelope(s.request("POST", "/v1/completions", std::string(4096, ' ')), 413, "invalid_request_error");
  EXPECT_EQ(s.ctx.in_flight(), 0);

  s.ctx.set_phase(Phase::Draining);
  auto draining = s.request("GET", "/health");
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
  auto metrics = s.request("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("rill:num_requests_running{model_name=\"tiny\"} 0"), std::string::npos);
}

// Every route but /health needs the key (before: only /v1, so /tokenize and /detokenize were open);
// /metrics only with api_key_metrics.
TEST(HttpServer, ApiKeyOnEveryRouteButHealth) {
  LiveServer s("sekrit");
  expect_envelope(s.request("GET", "/v1/models"), 401, "authentication_error");
  expect_envelope(s.request("GET", "/v1/models", "", "Authorization: Bearer nope\r\n"), 401,
                  "authentication_error");
  expect_envelope(s.request("GET", "/v1/models", "", "Authorization: Bearer sekrit\r\n"), 503,
                  "unavailable_error");
  for (const char* path : {"/tokenize", "/detokenize"}) {
    auto r = s.request("POST", path, R"({"prompt": "hi"})");
    expect_envelope(r, 401, "authentication_error");
    EXPECT_EQ(r.header("www-authenticate"), "Bearer");
  }
  expect_envelope(s.request("GET", "/version"), 401, "authentication_error");
  expect_envelope(s.request("GET", "/health"), 503, "unavailable_error");  // no key needed
  EXPECT_EQ(s.request("GET", "/metrics").status, 200);                     // open unless asked

  LiveServer guarded("sekrit", /*key_on_metrics=*/true);
  expect_envelope(guarded.request("GET", "/metrics"), 401, "authentication_error");
  EXPECT_EQ(guarded.request("GET", "/metrics", "", "Authorization: Bearer sekrit\r\n").status, 200);
}

// Issue #32: with --allowed-origins, a request from another origin is refused before any route runs, a
// "simple" text/plain POST (no preflight) included; requests without Origin (curl, SDKs) are not affected.
TEST(HttpServer, DisallowedOriginIsRefused) {
  LiveServer s("", false, small_limits(), CorsOptions{.allowed_origins = {"http://ok.test"}});
  auto simple = s.request("POST", "/v1/completions", R"({"prompt": "hi"})",
                          "Origin: http://evil.test\r\nContent-Type: text/plain\r\n");
  expect_envelope(simple, 403, "invalid_request_error");
  EXPECT_EQ(simple.header("access-control-allow-origin"), "");
  expect_envelope(s.request("GET", "/health", "", "Origin: http://evil.test\r\n"), 403, "invalid_request_error");
  auto allowed = s.request("POST", "/v1/completions", R"({"prompt": "hi"})", "Origin: http://ok.test\r\n");
  expect_envelope(allowed, 503, "unavailable_error");  // routed (the model is loading)
  EXPECT_EQ(allowed.header("access-control-allow-origin"), "http://ok.test");
  expect_envelope(s.request("POST", "/v1/completions", R"({"prompt": "hi"})"), 503, "unavailable_error");
}

// Issue #32 N1: the router ran std::regex over the path, and libstdc++'s matcher recurses once per
// character: a 60,000-character model path overflowed a handler thread's stack (SIGSEGV, the whole server).
// Now a long path is a 414 and the server goes on answering.
TEST(HttpServer, LongPathIsRefusedNotACrash) {
  HttpLimits limits = small_limits();
  limits.max_header_bytes = 65536;
  LiveServer s("", false, limits);
  for (const std::string& path : {"/v1/models/" + std::string(60'000, 'a'), "/" + std::string(60'000, '/')}) {
    auto r = s.request("GET", path);
    expect_envelope(r, 414, "invalid_request_error");
  }
  // Just under the cap still routes (by prefix: the model name is the whole rest, slashes included).
  const std::string name(kMaxRoutedPathBytes - std::string("/v1/models/").size(), 'b');
  expect_envelope(s.request("GET", "/v1/models/" + name), 503, "unavailable_error");  // needs the model
  EXPECT_EQ(s.request("GET", "/metrics").status, 200);
}

TEST(HttpServer, ConstantTimeEquality) {
  EXPECT_TRUE(equal_in_constant_time("Bearer k", "Bearer k"));
  EXPECT_FALSE(equal_in_constant_time("Bearer j", "Bearer k"));
  EXPECT_FALSE(equal_in_constant_time("Bearer kk", "Bearer k"));
  EXPECT_FALSE(equal_in_constant_time("Bearer ", "Bearer k"));
  EXPECT_FALSE(equal_in_constant_time("", "Bearer k"));
  EXPECT_TRUE(equal_in_constant_time("", ""));
  EXPECT_FALSE(equal_in_constant_time("x", ""));
}

TEST(HttpServer, RouteMatchingBySegments) {
  std::vector<std::string> m;
  EXPECT_TRUE(match_route("/health", "/health", &m));
  EXPECT_EQ(m, std::vector<std::string>{"/health"});
  EXPECT_FALSE(match_route("/health", "/health/", &m));
  EXPECT_FALSE(match_route("/health", "/healthz", &m));
  EXPECT_TRUE(match_route("/v1/models/*", "/v1/models/org/name", &m));
  EXPECT_EQ(m, (std::vector<std::string>{"/v1/models/org/name", "org/name"}));
  EXPECT_FALSE(match_route("/v1/models/*", "/v1/models/", &m));  // the rest must not be empty
  EXPECT_FALSE(match_route("/v1/models/*", "/v1/models", &m));
  EXPECT_FALSE(match_route("/v1/models/*", "/v1/modelsX/a", &m));
}

// ---- HttpListener with test handlers -------------------------------------------------------------------

struct LiveListener {
  std::atomic<int> handled{0};
  std::atomic<bool> saw_gone{false};
  std::function<void(HttpRequest&, HttpResponse&)> route;
  HttpListener http;
  std::thread thread;

  explicit LiveListener(HttpLimits limits = small_limits())
      : http(limits, HttpHandlers{
                         [this](HttpRequest& req, HttpResponse& res) {
                           ++handled;
                           if (route) return route(req, res);
                           res.set_content(req.method + " " + req.target + " " + req.body, "text/plain");
                         },
                         [](int status, const std::string& message) {
                           HttpResponse res;
                           res.status = status;
                           res.set_content(message, "text/plain");
                           return res;
                         },
                         [](int) {},
                         [](const HttpRequest& req) { return req.path == "/health"; },
                     }) {
    EXPECT_TRUE(http.bind("127.0.0.1", 0).ok());
    thread = std::thread([this] { http.run(); });
  }
  ~LiveListener() {
    http.stop();
    thread.join();
  }
  int port() const { return http.port(); }
};

// Sends `bytes` on a fresh connection and reads one response.
RawResponse exchange(int port, const std::string& bytes, std::chrono::milliseconds timeout = 5s) {
  RawConnection c(port);
  c.send(bytes);
  return c.read_response(timeout);
}

TEST(HttpFraming, PipelinedRequestsAnsweredInOrder) {
  LiveListener s;
  RawConnection c(s.port());
  c.send(
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz"
      "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(c.read_response().body, "GET /a ");
  EXPECT_EQ(c.read_response().body, "POST /b xyz");
  auto last = c.read_response();
  EXPECT_EQ(last.body, "GET /c ");
  EXPECT_EQ(last.header("connection"), "close");
  EXPECT_TRUE(c.closed_within(3s));
}

TEST(HttpFraming, HalfClosedRequestStillAnswered) {
  LiveListener s;
  RawConnection c(s.port());
  c.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  c.shutdown_write();
  EXPECT_EQ(c.read_response().body, "GET /a ");
  EXPECT_EQ(c.read_response().body, "GET /b ");
  EXPECT_TRUE(c.closed_within(3s));
}

TEST(HttpFraming, Http10GetsNoChunkingAndIsClosed) {
  LiveListener s;
  s.route = [](HttpRequest&, HttpResponse& res) {
    res.content_type = "text/event-stream";
    res.stream = [](const ChunkWriter& write) { write("data: 1\n\n") && write("data: 2\n\n"); };
  };
  RawConnection c10(s.port());
  c10.send("GET /s HTTP/1.0\r\n\r\n");
  auto r10 = c10.read_response();
  EXPECT_EQ(r10.version, "HTTP/1.0");
  EXPECT_FALSE(r10.chunked);
  EXPECT_EQ(r10.header("transfer-encoding"), "");
  EXPECT_EQ(r10.body, "data: 1\n\ndata: 2\n\n");  // close-delimited

  RawConnection c11(s.port());
  c11.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  auto r11 = c11.read_response();
  EXPECT_TRUE(r11.chunked);
  EXPECT_EQ(r11.body, "data: 1\n\ndata: 2\n\n");
  c11.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");  // the stream ended cleanly: keep-alive goes on
  EXPECT_EQ(c11.read_response().body, "data: 1\n\ndata: 2\n\n");
}

TEST(HttpFraming, ExpectContinue) {
  LiveListener s;
  RawConnection c(s.port());
  c.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(c.read_response().status, 100);
  c.send("ok");
  EXPECT_EQ(c.read_response().body, "POST /e ok");
}

// Each is refused from the head alone: the answer comes at once, no body byte sent, no deadline waited for.
TEST(HttpFraming, BadFramingRefusedAtOnce) {
  LiveListener s;
  struct Case {
    const char* head;
    int status;
  };
  const Case cases[] = {
      {"Content-Length: 5\r\nContent-Length: 5\r\n", 400},   // duplicate
      {"Content-Length: 5, 5\r\n", 400},                     // duplicate, as a list
      {"Content-Length: 5\r\nContent-Length: 6\r\n", 400},   // conflicting
      {"Content-Length: abc\r\n", 400},                      // not a number
      {"Content-Length: -1\r\n", 400},                       // negative
      {"Content-Length: 99999999999999999999999\r\n", 400},  // overflows
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400},
      {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400},
      {"Transfer-Encoding: gzip, chunked\r\n", 501},  // a coding we do not decode
      {"Transfer-Encoding: gzip\r\n", 400},           // not ending in chunked
      {"Transfer-Encoding: chunked, chunked\r\n", 400},
      {"Content-Length: 5000\r\n", 413},                         // over the body limit: no body read
      {"Content-Encoding: gzip\r\nContent-Length: 5\r\n", 415},  // compressed bodies are refused
      {"Content-Encoding: br\r\nTransfer-Encoding: chunked\r\n", 415},
      {"Expect: something\r\nContent-Length: 5\r\n", 417},
  };
  for (const Case& c : cases) {
    const auto t0 = Clock::now();
    RawConnection conn(s.port());
    conn.send(std::string("POST /x HTTP/1.1\r\nHost: x\r\n") + c.head + "\r\n");
    auto r = conn.read_response(3s);
    EXPECT_EQ(r.status, c.status) << c.head;
    EXPECT_LT(Clock::now() - t0, 1s) << c.head;
    EXPECT_TRUE(conn.closed_within(3s)) << c.head;
  }
  EXPECT_EQ(s.handled.load(), 0);
  EXPECT_EQ(exchange(s.port(), "GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status, 200);
  EXPECT_EQ(exchange(s.port(), "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status,
            400);
  EXPECT_EQ(exchange(s.port(), "GET /x HTTP/2.0\r\n\r\n").status, 400);  // Beast: not HTTP/1.x
  EXPECT_EQ(exchange(s.port(), "GET /x HTTP/1.2\r\nHost: x\r\n\r\n").version, "HTTP/1.1");
}

// The body limit applies to the decoded body of every transfer coding.
TEST(HttpLimits, BodyLimitOnEveryCoding) {
  LiveListener s;  // 1024 bytes
  std::string chunked = "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 40; ++i) chunked += "40\r\n" + std::string(64, 'a') + "\r\n";  // 2560 bytes
  chunked += "0\r\n\r\n";
  EXPECT_EQ(exchange(s.port(), chunked).status, 413);
  std::string fits = "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 15; ++i) fits += "40\r\n" + std::string(64, 'a') + "\r\n";  // 960 bytes
  EXPECT_EQ(exchange(s.port(), fits + "0\r\n\r\n").body, "POST /c " + std::string(960, 'a'));
  EXPECT_EQ(exchange(s.port(), "POST /l HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n").status, 413);
  // A chunk-size line that never ends (Beast does not bound its extensions): cut at the head limit.
  EXPECT_EQ(exchange(s.port(), "POST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                                   std::string(4096, 'e'))
                .status,
            400);
  // No length at all: a request then has no body (RFC 9112 §6.3); what follows is read as the next request.
  RawConnection c(s.port());
  c.send("POST /n HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(8192, 'z'));
  EXPECT_EQ(c.read_response().body, "POST /n ");
  EXPECT_EQ(c.read_response().status, 431);  // no line end within the head limit
  EXPECT_TRUE(c.closed_within(3s));
}

TEST(HttpLimits, HeadLimit) {
  LiveListener s;  // 2048 bytes of head
  RawConnection c(s.port());
  c.send("GET /" + std::string(4096, 'a'));  // no line end, ever
  EXPECT_EQ(c.read_response().status, 431);
  EXPECT_TRUE(c.closed_within(3s));
  std::string many = "GET /h HTTP/1.1\r\n";
  for (int i = 0; i < 400; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(exchange(s.port(), many + "\r\n").status, 431);
}

// Slowloris: bytes keep coming, but the whole head must arrive within the head deadline.
TEST(HttpLimits, HeadDeadlineIsTotal) {
  HttpLimits l = small_limits();
  l.header_timeout = 400ms;
  LiveListener s(l);
  RawConnection c(s.port());
  const auto t0 = Clock::now();
  bool closed = false;
  for (int i = 0; i < 60 && !closed; ++i) {  // a byte every 50 ms: 3 s if never cut off
    closed = !c.send(i == 0 ? "G" : "x") || c.closed_within(50ms);
  }
  EXPECT_TRUE(closed || c.closed_within(1s));
  EXPECT_LT(Clock::now() - t0, 1500ms);
  EXPECT_EQ(exchange(s.port(), "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").body, "GET /ok ");
}

// The Keep-Alive header advertises less idle time than the server waits: 5 s less, or half of a shorter deadline.
TEST(HttpLimits, KeepAliveHeaderLeavesAMarginBeforeTheServerCloses) {
  EXPECT_EQ(advertised_keep_alive_seconds(30s), 25);
  EXPECT_EQ(advertised_keep_alive_seconds(60s), 55);
  EXPECT_EQ(advertised_keep_alive_seconds(10s), 5);
  EXPECT_EQ(advertised_keep_alive_seconds(4s), 2);
  EXPECT_EQ(advertised_keep_alive_seconds(1500ms), 0);
  EXPECT_EQ(advertised_keep_alive_seconds(0ms), 0);
}

TEST(HttpLimits, BodyAndKeepAliveDeadlines) {
  HttpLimits l = small_limits();
  l.body_timeout = 300ms;
  l.keep_alive_timeout = 300ms;
  LiveListener s(l);
  RawConnection body(s.port());
  body.send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
  EXPECT_TRUE(body.closed_within(2s));
  RawConnection idle(s.port());
  idle.send("GET /i HTTP/1.1\r\nHost: x\r\n\r\n");
  auto r = idle.read_response();
  EXPECT_EQ(r.header("keep-alive"), "timeout=0");
  const auto t0 = Clock::now();
  EXPECT_TRUE(idle.closed_within(2s));
  EXPECT_GT(Clock::now() - t0, 200ms);
}

TEST(HttpLimits, ConnectionCap) {
  HttpLimits l = small_limits();
  l.max_connections = 2;
  LiveListener s(l);
  RawConnection a(s.port()), b(s.port());
  a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(a.read_response().status, 200);
  RawConnection over(s.port());
  over.send("GET /o HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(over.read_response().status, 503);
  EXPECT_TRUE(over.closed_within(3s));
  b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(b.read_response().status, 200);
}

// Issue #32 N3: one client re-opening trickling connections held every slot, and /health got 503. Now one
// address holds at most its share, and the others (the probe) are served.
TEST(HttpLimits, PerClientCapKeepsProbesServed) {
  HttpLimits l = small_limits();
  l.max_connections = 16;
  l.max_connections_per_client = 8;
  LiveListener s(l);
  std::vector<std::unique_ptr<RawConnection>> attack;
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    attack.push_back(std::make_unique<RawConnection>(s.port(), "127.0.0.2"));
    attack.back()->send("GET /slow HTTP/1.1\r\nX: ");  // never ends its head
  }
  for (auto& c : attack) refused += c->read_response(100ms).status == 503;
  EXPECT_EQ(refused, 32);  // all past the first 8 of that address
  for (int i = 0; i < 10; ++i) {
    RawConnection probe(s.port(), "127.0.0.1");
    probe.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(probe.read_response(2s).status, 200) << i;
  }
}

// Past --max-connections a small band of connections is still accepted, for the reserved routes only:
// a server full of (legitimate) connections still answers its liveness probes.
TEST(HttpLimits, ReservedBandServesOnlyReservedRoutes) {
  HttpLimits l = small_limits();
  l.max_connections = 6;
  l.reserved_connections = 2;
  l.max_connections_per_client = 0;
  LiveListener s(l);
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(std::make_unique<RawConnection>(s.port()));
    idle.back()->send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_EQ(idle.back()->read_response().status, 200);  // then idle in keep-alive
  }
  RawConnection other(s.port());
  other.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(other.read_response().status, 503);
  RawConnection probe(s.port());
  probe.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(probe.read_response().status, 200);
}

// Issue #32 N4: streams whose clients do not read held every handler thread, and nothing else was answered.
// Stepped streams park instead: while they wait for their client (or for a wake), other requests run, and
// the write deadline ends the ones whose client never reads.
TEST(HttpListener, ParkedStreamsHoldNoThread) {
  HttpLimits l = small_limits();  // 4 handler threads
  l.write_timeout = 500ms;
  LiveListener s(l);
  auto alive = std::make_shared<std::atomic<int>>(0);  // stream closures not yet released
  s.route = [&](HttpRequest& req, HttpResponse& res) {
    auto token = std::shared_ptr<void>(nullptr, [alive](void*) { --*alive; });
    ++*alive;
    if (req.path == "/flood") {
      res.stream_step = [token](const ChunkWriter& write, const StreamWake&) {
        return write(std::string(32 << 10, 'x')) ? StreamStep::More : StreamStep::Done;
      };
    } else if (req.path == "/wait") {  // never woken: only the fallback timer steps it
      res.stream_step = [token](const ChunkWriter& write, const StreamWake&) {
        return write("") ? StreamStep::Wait : StreamStep::Done;
      };
    } else {
      res.set_content("ok", "text/plain");
    }
  };
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < 12; ++i) {  // 3x the handler threads, none of them read
    streams.push_back(std::make_unique<RawConnection>(s.port()));
    streams.back()->send(std::string("GET ") + (i % 2 ? "/flood" : "/wait") + " HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  std::this_thread::sleep_for(300ms);
  const auto t0 = Clock::now();
  EXPECT_EQ(exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 2s).status, 200);
  EXPECT_EQ(exchange(s.port(), "GET /x HTTP/1.1\r\nHost: x\r\n\r\n", 2s).body, "ok");
  EXPECT_LT(Clock::now() - t0, 1s);
  // The flooding streams' clients never read: the write deadline cuts them and their closures are released.
  for (int i = 0; i < 300 && alive->load() > 6; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(alive->load(), 6);  // the waiting ones remain (their clients are still there)
  streams.clear();              // the waiting streams' clients leave: an empty write fails, they end
  for (int i = 0; i < 300 && alive->load() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(alive->load(), 0);
}

// A wake runs the next step at once (not after the fallback timer), and a stepped stream's body arrives whole
// and in order on a keep-alive connection.
TEST(HttpListener, SteppedStreamWakes) {
  LiveListener s;
  std::vector<std::thread> wakers;
  std::mutex mu;
  s.route = [&](HttpRequest&, HttpResponse& res) {
    auto n = std::make_shared<int>(0);
    res.stream_step = [&, n](const ChunkWriter& write, const StreamWake& wake) {
      if (*n == 10) return StreamStep::Done;
      write(std::to_string((*n)++));
      std::lock_guard<std::mutex> lock(mu);
      wakers.emplace_back([wake] {
        std::this_thread::sleep_for(5ms);
        wake();
      });
      return StreamStep::Wait;
    };
  };
  RawConnection c(s.port());
  const auto t0 = Clock::now();
  c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  auto r = c.read_response();
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_LT(Clock::now() - t0, 600ms);  // 10 steps at the 100 ms fallback would take 1 s
  c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.read_response().body, "0123456789");
  for (auto& t : wakers) t.join();
}

// Issue #32 N2: request bodies share one memory budget (each complete body counts 1 + kParseExpansion times
// its size): a body that does not fit while others are held gets 503, and fits again once they are released.
TEST(HttpLimits, MemoryBudgetSharedByBodies) {
  HttpLimits l = small_limits();
  l.request_memory_bytes = 90'000;  // room for two complete 1000-byte bodies (33,000 bytes each), not three
  LiveListener s(l);
  std::atomic<int> holding{0};
  std::atomic<bool> release{false};
  s.route = [&](HttpRequest& req, HttpResponse& res) {
    if (req.path == "/hold") {
      ++holding;
      while (!release) std::this_thread::sleep_for(5ms);
    }
    res.set_content("ok", "text/plain");
  };
  const std::string body(1000, 'b');
  auto post = [&](const char* path) {
    return "POST " + std::string(path) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + body;
  };
  RawConnection a(s.port()), b(s.port());
  a.send(post("/hold"));
  b.send(post("/hold"));
  while (holding < 2) std::this_thread::sleep_for(5ms);  // 66,000 bytes held
  auto refused = exchange(s.port(), post("/x"));
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("memory"), std::string::npos) << refused.body;
  EXPECT_EQ(exchange(s.port(), "GET /small HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);  // no body: fits
  release = true;
  EXPECT_EQ(a.read_response().status, 200);
  EXPECT_EQ(b.read_response().status, 200);
  EXPECT_EQ(exchange(s.port(), post("/x")).body, "ok");
}

// A route that runs out of memory fails alone: 503, and the server goes on.
TEST(HttpServer, BadAllocIsA503) {
  LiveListener s;
  s.route = [](HttpRequest& req, HttpResponse& res) {
    if (req.path == "/oom") throw std::bad_alloc();
    res.set_content("ok", "text/plain");
  };
  EXPECT_EQ(exchange(s.port(), "GET /oom HTTP/1.1\r\nHost: x\r\n\r\n").status, 503);
  EXPECT_EQ(exchange(s.port(), "GET /x HTTP/1.1\r\nHost: x\r\n\r\n").body, "ok");
}

// A waiting stream that was woken once steps again once, then only at the 100 ms fallback: waits that a
// re-arm cancelled must not each start a step (that was a spin of steps at thread-pool speed).
TEST(HttpListener, WokenStreamDoesNotSpin) {
  LiveListener s;
  std::atomic<int> steps{0};
  std::atomic<bool> stop{false};
  s.route = [&](HttpRequest&, HttpResponse& res) {
    res.stream_step = [&](const ChunkWriter& write, const StreamWake& wake) {
      if (stop || !write("")) return StreamStep::Done;
      if (++steps == 1)  // woken once, while parked with its fallback timer armed
        std::thread([wake] {
          std::this_thread::sleep_for(20ms);
          wake();
        }).detach();
      return StreamStep::Wait;
    };
  };
  RawConnection c(s.port());
  c.send("GET /w HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(500ms);
  EXPECT_LE(steps.load(), 10);  // 2 + ~5 fallbacks; the spin made thousands
  EXPECT_GE(steps.load(), 3);   // the fallback does step it
  stop = true;
  EXPECT_EQ(c.read_response(2s).status, 200);
}

// A peer that goes away while its request runs is seen by the handler (whole responses can cancel).
TEST(HttpListener, ClientGoneWhileHandling) {
  LiveListener s;
  std::atomic<bool> started{false};
  s.route = [&](HttpRequest& req, HttpResponse& res) {
    started = true;
    const auto deadline = Clock::now() + 5s;
    while (!req.client_gone() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    s.saw_gone = req.client_gone();
    res.set_content("late", "text/plain");
  };
  {
    RawConnection c(s.port());
    c.send("GET /g HTTP/1.1\r\nHost: x\r\n\r\n");
    while (!started) std::this_thread::sleep_for(5ms);
  }
  for (int i = 0; i < 200 && !s.saw_gone; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(s.saw_gone.load());
}

// Issue #32: with more than a head's worth of pipelined bytes behind a running request the connection stops
// reading, and a client that left was never seen. The kernel is asked instead.
TEST(HttpListener, ClientGoneBehindPipelinedBytes) {
  LiveListener s;  // 2048 bytes of head: the most buffered behind a running request
  std::atomic<bool> started{false};
  s.route = [&](HttpRequest& req, HttpResponse& res) {
    started = true;
    const auto deadline = Clock::now() + 5s;
    while (!req.client_gone() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    s.saw_gone = req.client_gone();
    res.set_content("late", "text/plain");
  };
  {
    RawConnection c(s.port());
    c.send("GET /g HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nX: " + std::string(16 << 10, 'a'));
    while (!started) std::this_thread::sleep_for(5ms);
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < 300 && !s.saw_gone; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(s.saw_gone.load());
  EXPECT_LT(Clock::now() - t0, 2s);
}

// A stream whose client went away: the next write fails.
TEST(HttpListener, StreamWriteFailsWhenClientGone) {
  LiveListener s;
  std::atomic<int> writes{0};
  std::atomic<bool> failed{false};
  s.route = [&](HttpRequest&, HttpResponse& res) {
    res.stream = [&](const ChunkWriter& write) {
      for (int i = 0; i < 500; ++i, ++writes) {
        if (!write(std::string(1000, 'x'))) {
          failed = true;
          return;
        }
        std::this_thread::sleep_for(5ms);
      }
    };
  };
  {
    RawConnection c(s.port());
    c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(100ms);
  }
  for (int i = 0; i < 300 && !failed; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(failed.load());
  EXPECT_LT(writes.load(), 500);
}

// A stream still waiting for its first chunk (its request queued in the engine) whose client leaves after
// reading what it was sent: the client's close is a FIN, not a reset, and the empty writes of the waiting
// steps kept succeeding, so the stream (and its queued request) lived on. The FIN ends it.
TEST(HttpListener, WaitingStreamEndsWhenClientCloses) {
  LiveListener s;
  auto alive = std::make_shared<std::atomic<int>>(0);  // stream closures not yet released
  s.route = [&](HttpRequest&, HttpResponse& res) {
    auto token = std::shared_ptr<void>(nullptr, [alive](void*) { --*alive; });
    ++*alive;
    res.stream_step = [token](const ChunkWriter& write, const StreamWake&) {
      return write("") ? StreamStep::Wait : StreamStep::Done;
    };
  };
  RawConnection c(s.port());
  c.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.read_response(300ms).status, 200);  // the head, read: nothing unread makes the close a reset
  ASSERT_EQ(alive->load(), 1);
  c.close();
  const auto t0 = Clock::now();
  for (int i = 0; i < 200 && alive->load() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(alive->load(), 0);
  EXPECT_LT(Clock::now() - t0, 500ms);
}

// The client leaves while the route still prepares its stream: the stream ends at its first step, without
// a write.
TEST(HttpListener, StreamOfAGoneClientEndsAtOnce) {
  std::atomic<int> steps{0};
  std::atomic<bool> released{false};  // before the listener: a stream it still holds is released with it
  LiveListener s;
  s.route = [&](HttpRequest& req, HttpResponse& res) {
    const auto deadline = Clock::now() + 5s;
    while (!req.client_gone() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    auto token = std::shared_ptr<void>(nullptr, [&](void*) { released = true; });
    res.stream_step = [&, token](const ChunkWriter& write, const StreamWake&) {
      ++steps;
      return write("") ? StreamStep::Wait : StreamStep::Done;
    };
  };
  {
    RawConnection c(s.port());
    c.send("GET /late HTTP/1.1\r\nHost: x\r\n\r\n");
    while (s.handled == 0) std::this_thread::sleep_for(5ms);
  }
  for (int i = 0; i < 200 && !released; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(released.load());
  EXPECT_EQ(steps.load(), 0);
}

// The start-up race of issue 14: stop() before run() must not be lost (run() returns at once).
TEST(HttpListener, StopBeforeRun) {
  for (int i = 0; i < 50; ++i) {
    HttpListener l(small_limits(),
                   HttpHandlers{[](HttpRequest&, HttpResponse&) {},
                                [](int, const std::string&) { return HttpResponse{}; }, [](int) {}});
    ASSERT_TRUE(l.bind("127.0.0.1", 0).ok());
    l.stop();
    std::thread t([&] { l.run(); });
    t.join();  // hangs (the test times out) if the stop was lost
  }
}

// stop() with connections still trickling their heads and idle keep-alive ones: prompt.
TEST(HttpListener, StopWithTricklingClients) {
  auto s = std::make_unique<LiveListener>();
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < 50; ++i) {
    conns.push_back(std::make_unique<RawConnection>(s->port()));
    conns.back()->send("GET /slow HTTP/1.1\r\nX: ");
  }
  RawConnection idle(s->port());
  idle.send("GET /i HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(idle.read_response().status, 200);
  const auto t0 = Clock::now();
  s.reset();
  EXPECT_LT(Clock::now() - t0, 1500ms);
  EXPECT_TRUE(idle.closed_within(1s));
}

TEST(ServingContext, InFlightTokens) {
  ServingContext ctx(ServingConfig{"m", "d", "", false});
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
