#include "server/http_server.h"

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
    log_rejected_request(req.method, req.path, error->http_status, error->message);
}

}  // namespace

HttpServer::HttpServer(ServingContext& ctx, const HttpLimits& limits)
    : ctx_(ctx),
      listener_(limits, HttpHandlers{
                            [this](HttpRequest& req, HttpResponse& res) { handle(req, res); },
                            [this](int status, const std::string& message) {
                              if (ctx_.config().log_requests)
                                log_rejected_request("HTTP", "-", status, message);
                              HttpResponse res;
                              write_error(res, ApiError{status, message});
                              return res;
                            },
                            [this](int status) { ctx_.metrics().record_http_status(status); },
                        }) {
  for (const Route& r : route_table()) patterns_.emplace_back(r.path);
}

Status HttpServer::bind(const std::string& host, int port) {
  return listener_.bind(host, port);
}

bool HttpServer::authorized(const HttpRequest& req) const {
  const ServingConfig& config = ctx_.config();
  if (config.api_key.empty() || req.path == "/health") return true;
  if (req.path == "/metrics" && !config.api_key_metrics) return true;
  return req.header("Authorization") == "Bearer " + config.api_key;
}

void HttpServer::handle(HttpRequest& req, HttpResponse& res) {
  // On every routed response, errors included (write_error keeps headers), and before the stream's head.
  res.set_header("X-Request-Id", request_id_for(req));
  const CorsOptions& cors = ctx_.config().cors;
  if (is_cors_preflight(cors, req)) return answer_cors_preflight(cors, req, res);  // no API key in preflights
  add_cors_headers(cors, req, res);
  if (!authorized(req)) {
    const ApiError error{401, "Invalid or missing API key: send `Authorization: Bearer <key>`"};
    if (ctx_.config().log_requests)
      log_rejected_request(req.method, req.path, error.http_status, error.message);
    return write_error(res, error);
  }
  const std::vector<Route>& routes = route_table();
  std::string allowed;
  for (size_t i = 0; i < routes.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(req.path, m, patterns_[i])) continue;
    if (req.method != routes[i].method) {
      allowed += (allowed.empty() ? "" : ", ") + std::string(routes[i].method);
      continue;
    }
    req.matches.assign(m.begin(), m.end());
    return run_route(ctx_, routes[i], req, res);
  }
  if (allowed.empty())
    return write_error(res, ApiError{404, fmt::format("Not Found: {} {}", req.method, req.path)});
  write_error(res, ApiError{405, fmt::format("Method Not Allowed: {} {} (allowed: {})", req.method, req.path,
                                             allowed)});
  res.set_header("Allow", allowed);
}

}  // namespace rill::server
