#include "server/http_server.h"

#include <new>

#include "server/cors.h"
#include "server/openai/response.h"
#include "server/request_log.h"

namespace rill::server {

void write_json(HttpResponse& res, const Json& body, int status) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void write_error(HttpResponse& res, const ApiError& error) {
  res.stream = nullptr;
  write_json(res, error_body(error), error.http_status);
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
}

namespace {

void run_route(ServingContext& ctx, const Route& route, const HttpRequest& req, HttpResponse& res) {
  std::optional<ApiError> error;
  // Counted before the phase check, so a drain that starts now waits for this request (a streamed
  // response keeps its own count in its GenerationJob until the last byte is written).
  std::shared_ptr<void> in_flight = route.needs_model ? ctx.track_request() : nullptr;
  if (route.needs_model && ctx.phase() != Phase::Ready) {
    error = ApiError{503, ctx.unavailable_message()};
  } else {
    try {
      error = route.handler(ctx, req, res);
    } catch (const std::bad_alloc&) {  // this request could not be served; the server goes on (issue #32 N2)
      error = ApiError{503, "The server ran out of memory for this request: retry later"};
    } catch (const std::exception& e) {
      error = ApiError{500, std::string("internal error: ") + e.what()};
    } catch (...) {
      error = ApiError{500, "internal error"};
    }
  }
  if (!error) return;
  write_error(res, *error);
  // The API routes' refusals; /health's 503 while loading is polled, not a refused request.
  if (route.needs_model && ctx.config().log_requests)
    log_rejected_request(req.method, req.path, req.client, error->http_status, error->message);
}

}  // namespace

bool equal_in_constant_time(std::string_view given, std::string_view expected) {
  // Every byte of `given` is compared (against `expected` repeated), whatever matched before: the time
  // depends on the lengths only, so a key cannot be guessed byte by byte from response times.
  unsigned diff = given.size() != expected.size();
  if (expected.empty()) return given.empty();
  for (size_t i = 0; i < given.size(); ++i)
    diff |= unsigned(uint8_t(given[i]) ^ uint8_t(expected[i % expected.size()]));
  return diff == 0;
}

bool match_route(std::string_view pattern, const std::string& path, std::vector<std::string>* matches) {
  matches->clear();
  if (pattern.size() >= 2 && pattern.substr(pattern.size() - 2) == "/*") {
    const std::string_view prefix = pattern.substr(0, pattern.size() - 1);  // keeps the '/'
    if (path.size() <= prefix.size() || std::string_view(path).substr(0, prefix.size()) != prefix) return false;
    *matches = {path, path.substr(prefix.size())};
    return true;
  }
  if (path != pattern) return false;
  *matches = {path};
  return true;
}

HttpServer::HttpServer(ServingContext& ctx, const HttpLimits& limits)
    : ctx_(ctx),
      listener_(limits, HttpHandlers{
                            [this](HttpRequest& req, HttpResponse& res) { handle(req, res); },
                            [this](int status, const std::string& message) {
                              if (ctx_.config().log_requests)
                                log_rejected_request("HTTP", "-", "", status, message);
                              HttpResponse res;
                              write_error(res, ApiError{status, message});
                              return res;
                            },
                            [this](int status) { ctx_.metrics().record_http_status(status); },
                            // Liveness never waits for a handler thread (issue #32 N4): both are quick
                            // and never block on the engine.
                            [](const HttpRequest& req) {
                              return req.method == "GET" && (req.path == "/health" || req.path == "/metrics");
                            },
                        }) {
}

Status HttpServer::bind(const std::string& host, int port) {
  return listener_.bind(host, port);
}

bool HttpServer::authorized(const HttpRequest& req) const {
  const ServingConfig& config = ctx_.config();
  if (config.api_key.empty() || req.path == "/health") return true;
  if (req.path == "/metrics" && !config.api_key_metrics) return true;
  return equal_in_constant_time(req.header("Authorization"), "Bearer " + config.api_key);
}

void HttpServer::handle(HttpRequest& req, HttpResponse& res) {
  // On every routed response, errors included (write_error keeps headers), and before the stream's head.
  res.set_header("X-Request-Id", request_id_for(req));
  const CorsOptions& cors = ctx_.config().cors;
  if (is_cors_preflight(cors, req)) return answer_cors_preflight(cors, req, res);  // no API key in preflights
  if (cors_origin_refused(cors, req)) {
    const ApiError error{403, fmt::format("Origin '{}' is not allowed (--allowed-origins)", req.header("Origin"))};
    if (ctx_.config().log_requests)
      log_rejected_request(req.method, req.path, req.client, error.http_status, error.message);
    return write_error(res, error);
  }
  add_cors_headers(cors, req, res);
  if (!authorized(req)) {
    const ApiError error{401, "Invalid or missing API key: send `Authorization: Bearer <key>`"};
    if (ctx_.config().log_requests)
      log_rejected_request(req.method, req.path, req.client, error.http_status, error.message);
    return write_error(res, error);
  }
  if (req.path.size() > kMaxRoutedPathBytes)
    return write_error(res, ApiError{414, fmt::format("URI Too Long: the path has {} bytes (the limit is {})",
                                                      req.path.size(), kMaxRoutedPathBytes)});
  const std::vector<Route>& routes = route_table();
  std::string allowed;
  std::vector<std::string> matches;
  for (const Route& route : routes) {
    if (!match_route(route.path, req.path, &matches)) continue;
    if (req.method != route.method) {
      allowed += (allowed.empty() ? "" : ", ") + std::string(route.method);
      continue;
    }
    req.matches = std::move(matches);
    return run_route(ctx_, route, req, res);
  }
  if (allowed.empty())
    return write_error(res, ApiError{404, fmt::format("Not Found: {} {}", req.method, req.path)});
  write_error(res, ApiError{405, fmt::format("Method Not Allowed: {} {} (allowed: {})", req.method, req.path,
                                             allowed)});
  res.set_header("Allow", allowed);
}

}  // namespace rill::server
