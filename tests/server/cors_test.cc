// CORS decisions and X-Request-Id, against the Fetch standard's rules as Starlette's CORSMiddleware (vLLM's)
// applies them: which requests are preflights, what a preflight answer allows, what actual responses carry.
#include <gtest/gtest.h>

#include <regex>

#include "server/cors.h"

namespace rill::server {
namespace {

HttpRequest request(std::string method, std::vector<std::pair<std::string, std::string>> headers) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = "/v1/chat/completions";
  r.headers = std::move(headers);
  return r;
}

std::string header(const HttpResponse& res, std::string_view name) {
  for (const auto& [k, v] : res.headers)
    if (k == name) return v;
  return "(none)";
}

TEST(Cors, CommaLists) {
  EXPECT_EQ(split_comma_list(" a, b,,c ,"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(split_comma_list("").empty());
}

TEST(Cors, OffByDefault) {
  CorsOptions off;
  const HttpRequest pre =
      request("OPTIONS", {{"Origin", "http://a"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_FALSE(is_cors_preflight(off, pre));
  HttpResponse res;
  add_cors_headers(off, request("POST", {{"Origin", "http://a"}}), res);
  EXPECT_TRUE(res.headers.empty());
}

TEST(Cors, PreflightFromAnAllowedOrigin) {
  CorsOptions cors{.allowed_origins = {"http://a", "http://b"}, .allowed_methods = {"GET", "POST"}};
  const HttpRequest pre =
      request("OPTIONS", {{"Origin", "http://b"},
                          {"Access-Control-Request-Method", "POST"},
                          {"Access-Control-Request-Headers", "Authorization, content-type"}});
  ASSERT_TRUE(is_cors_preflight(cors, pre));
  EXPECT_FALSE(is_cors_preflight(cors, request("OPTIONS", {{"Origin", "http://b"}})));  // no requested method
  HttpResponse res;
  answer_cors_preflight(cors, pre, res);
  EXPECT_EQ(res.status, 204);
  EXPECT_EQ(header(res, "Access-Control-Allow-Origin"), "http://b");
  EXPECT_EQ(header(res, "Vary"), "Origin");
  EXPECT_EQ(header(res, "Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_EQ(header(res, "Access-Control-Allow-Headers"),
            "Authorization, content-type");  // "*": what was asked
  EXPECT_TRUE(res.body.empty());
}

TEST(Cors, RefusedPreflightsNameWhat) {
  CorsOptions cors{
      .allowed_origins = {"http://a"}, .allowed_methods = {"POST"}, .allowed_headers = {"content-type"}};
  auto refused = [&](std::string origin, std::string method, std::string headers) {
    HttpResponse res;
    answer_cors_preflight(cors,
                          request("OPTIONS", {{"Origin", origin},
                                              {"Access-Control-Request-Method", method},
                                              {"Access-Control-Request-Headers", headers}}),
                          res);
    if (res.status != 400) return std::string("(allowed)");
    EXPECT_EQ(header(res, "Access-Control-Allow-Origin"), "(none)");  // a refusal allows nothing
    return res.body;
  };
  EXPECT_NE(refused("http://evil", "POST", "").find("origin 'http://evil'"), std::string::npos);
  EXPECT_NE(refused("http://a", "PUT", "").find("method 'PUT'"), std::string::npos);
  EXPECT_NE(refused("http://a", "POST", "Content-Type, x-key").find("header 'x-key'"), std::string::npos);
  EXPECT_EQ(refused("http://a", "POST", "Content-Type"), "(allowed)");  // header names are case-insensitive
}

TEST(Cors, ActualResponses) {
  CorsOptions any{.allowed_origins = {"*"}};
  HttpResponse res;
  add_cors_headers(any, request("POST", {{"Origin", "http://x"}}), res);
  EXPECT_EQ(header(res, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(res, "Vary"), "(none)");
  HttpResponse none;
  add_cors_headers(any, request("POST", {}), none);  // not a CORS request
  EXPECT_TRUE(none.headers.empty());
  CorsOptions one{.allowed_origins = {"http://a"}};
  HttpResponse other;
  add_cors_headers(one, request("POST", {{"Origin", "http://b"}}), other);
  EXPECT_TRUE(other.headers.empty());
}

TEST(RequestId, EchoedOrGenerated) {
  EXPECT_EQ(request_id_for(request("GET", {{"x-request-id", "abc-1"}})), "abc-1");
  const std::regex fresh("^[0-9a-f]{24}$");
  EXPECT_TRUE(std::regex_match(request_id_for(request("GET", {})), fresh));
  // Nothing that could break the header: control characters, spaces, over 256 characters.
  EXPECT_TRUE(
      std::regex_match(request_id_for(request("GET", {{"X-Request-Id", "a\r\nSet-Cookie: x"}})), fresh));
  EXPECT_TRUE(
      std::regex_match(request_id_for(request("GET", {{"X-Request-Id", std::string(257, 'a')}})), fresh));
  EXPECT_NE(request_id_for(request("GET", {})), request_id_for(request("GET", {})));
}

}  // namespace
}  // namespace rill::server
