// CORS for browser clients, with the semantics of vLLM's (Starlette's CORSMiddleware, allow_credentials
// off): nothing without --allowed-origins; with it, a request whose Origin is allowed gets
// Access-Control-Allow-Origin on its response (SSE included), and a preflight (OPTIONS + Origin +
// Access-Control-Request-Method) is answered by the router itself, before the API key check (browsers send
// no credentials in a preflight): 204 with the Access-Control-Allow-* headers, or 400 naming what is not
// allowed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/http/http_types.h"

namespace rill::server {

struct CorsOptions {
  std::vector<std::string> allowed_origins;          // empty: CORS off; "*": any origin
  std::vector<std::string> allowed_methods = {"*"};  // "*": every method
  std::vector<std::string> allowed_headers = {"*"};  // "*": whatever the preflight asks for

  bool enabled() const { return !allowed_origins.empty(); }
};

// "a, b,c" -> {"a", "b", "c"} (blank items dropped).
std::vector<std::string> split_comma_list(const std::string& list);

// True when `req` is a CORS preflight this configuration answers.
bool is_cors_preflight(const CorsOptions& cors, const HttpRequest& req);
// The preflight's answer: 204 with the Access-Control-Allow-* headers, or 400 naming the disallowed origin,
// method or header.
void answer_cors_preflight(const CorsOptions& cors, const HttpRequest& req, HttpResponse& res);
// True when CORS is on and `req` carries an Origin that is not allowed: the router refuses it with 403
// before any route runs, since a browser's "simple" request (a text/plain POST) needs no preflight and would
// otherwise run (only its response would be hidden from the page).
bool cors_origin_refused(const CorsOptions& cors, const HttpRequest& req);
// Adds Access-Control-Allow-Origin (and Vary / Expose-Headers) to an actual response when its Origin is
// allowed.
void add_cors_headers(const CorsOptions& cors, const HttpRequest& req, HttpResponse& res);

// The X-Request-Id to send back: the client's (when it is 1-256 visible ASCII characters) or a new one.
std::string request_id_for(const HttpRequest& req);

}  // namespace rill::server
