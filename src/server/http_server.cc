#include "server/http_server.h"

#include <sys/socket.h>

#include <regex>

#include "server/openai/response.h"

namespace rill::server {

void write_json(httplib::Response& res, const Json& body, int status) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void write_error(httplib::Response& res, const ApiError& error) {
  write_json(res, error_body(error), error.http_status);
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
}

namespace {

httplib::Server::Handler wrap(ServingContext& ctx, const Route& route) {
  return [&ctx, &route](const httplib::Request& req, httplib::Response& res) {
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
    if (error) write_error(res, *error);
  };
}

// httplib answers unknown paths, bad methods, oversized bodies and unparsable requests itself, with an
// empty body: give those the envelope too.
httplib::Server::HandlerResponse on_http_error(const httplib::Request& req, httplib::Response& res,
                                               size_t max_body) {
  if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
  ApiError e{res.status, ""};
  if (res.status == 404) {
    std::string allowed;
    for (const Route& r : route_table())
      if (std::regex_match(req.path, std::regex(r.path)))
        allowed += (allowed.empty() ? "" : ", ") + std::string(r.method);
    if (!allowed.empty()) {
      e = ApiError{405,
                   fmt::format("Method Not Allowed: {} {} (allowed: {})", req.method, req.path, allowed)};
      res.status = 405;
      res.set_header("Allow", allowed);
    } else {
      e.message = fmt::format("Not Found: {} {}", req.method, req.path);
    }
  } else if (res.status == 413) {
    e.message = fmt::format("Request body too large (the limit is {} bytes)", max_body);
  } else {
    e.message = fmt::format("HTTP error {}", res.status);
  }
  write_error(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

HttpServer::HttpServer(ServingContext& ctx, int n_threads) : ctx_(ctx) {
  server_.new_task_queue = [n_threads] { return new httplib::ThreadPool(size_t(n_threads)); };
  server_.set_payload_max_length(ctx.config().max_body_bytes);
  server_.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port and silently
  // share its connections: keep SO_REUSEADDR only (fast restarts), so a taken port is an error.
  server_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server_.set_read_timeout(60);
  server_.set_write_timeout(60);
  const size_t max_body = ctx.config().max_body_bytes;
  server_.set_error_handler(
      httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req, httplib::Response& res) {
        return on_http_error(req, res, max_body);
      }));
  server_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    write_error(res, ApiError{500, "internal error: " + what});
  });
  server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string& key = ctx_.config().api_key;
    if (key.empty() || !req.path.starts_with("/v1")) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + key)
      return httplib::Server::HandlerResponse::Unhandled;
    write_error(res, ApiError{401, "Invalid or missing API key: send `Authorization: Bearer <key>`"});
    return httplib::Server::HandlerResponse::Handled;
  });
  server_.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    ctx_.metrics().record_http_status(res.status);
  });
  install_routes();
}

void HttpServer::install_routes() {
  for (const Route& route : route_table()) {
    if (std::string_view(route.method) == "GET")
      server_.Get(route.path, wrap(ctx_, route));
    else
      server_.Post(route.path, wrap(ctx_, route));
  }
}

Status HttpServer::bind(const std::string& host, int port) {
  if (port == 0) {
    port_ = server_.bind_to_any_port(host);
    if (port_ <= 0) return unavailable("cannot bind {}:<any port>", host);
  } else {
    if (!server_.bind_to_port(host, port))
      return unavailable("cannot bind {}:{} (in use, or not a local address?)", host, port);
    port_ = port;
  }
  ::listen(server_.socket(), SOMAXCONN);  // again, with a real backlog (Linux updates it in place)
  return {};
}

void HttpServer::listen() {
  server_.listen_after_bind();
}

}  // namespace rill::server
