#include "server/cors.h"

#include <strings.h>

#include <algorithm>

#include <fmt/format.h>

#include "server/http_server.h"
#include "server/openai/response.h"

namespace rill::server {
namespace {

// Starlette's list for allow_methods=["*"].
constexpr const char* kAllMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool has_star(const std::vector<std::string>& list) {
  return std::find(list.begin(), list.end(), "*") != list.end();
}

bool origin_allowed(const CorsOptions& cors, std::string_view origin) {
  if (origin.empty()) return false;
  if (has_star(cors.allowed_origins)) return true;
  return std::find(cors.allowed_origins.begin(), cors.allowed_origins.end(), origin) !=
         cors.allowed_origins.end();
}

bool listed(const std::vector<std::string>& list, std::string_view item) {
  return has_star(list) ||
         std::any_of(list.begin(), list.end(), [&](const std::string& x) { return iequals(x, item); });
}

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& s : list) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The origin header value: "*" when any origin may call (no credentials are allowed, so browsers accept it),
// else the request's own origin (with Vary: Origin so caches keep the answers apart).
void set_allow_origin(const CorsOptions& cors, std::string_view origin, HttpResponse& res) {
  if (has_star(cors.allowed_origins)) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else {
    res.set_header("Access-Control-Allow-Origin", std::string(origin));
    res.set_header("Vary", "Origin");
  }
}

}  // namespace

std::vector<std::string> split_comma_list(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

bool is_cors_preflight(const CorsOptions& cors, const HttpRequest& req) {
  return cors.enabled() && req.method == "OPTIONS" && !req.header("Origin").empty() &&
         !req.header("Access-Control-Request-Method").empty();
}

void answer_cors_preflight(const CorsOptions& cors, const HttpRequest& req, HttpResponse& res) {
  const std::string_view origin = req.header("Origin");
  const std::string_view method = req.header("Access-Control-Request-Method");
  std::vector<std::string> refused;
  if (!origin_allowed(cors, origin))
    refused.push_back(fmt::format("origin '{}' (--allowed-origins)", origin));
  if (!listed(cors.allowed_methods, method))
    refused.push_back(fmt::format("method '{}' (--allowed-methods)", method));
  const std::vector<std::string> asked =
      split_comma_list(std::string(req.header("Access-Control-Request-Headers")));
  for (const std::string& h : asked)
    if (!listed(cors.allowed_headers, h))
      refused.push_back(fmt::format("header '{}' (--allowed-headers)", h));
  if (!refused.empty()) {
    write_error(res, ApiError{400, "CORS preflight refused: disallowed " + join(refused)});
    return;
  }
  res.status = 204;
  set_allow_origin(cors, origin, res);
  res.set_header("Access-Control-Allow-Methods",
                 has_star(cors.allowed_methods) ? kAllMethods : join(cors.allowed_methods));
  // "*": echo what was asked (a literal "*" does not cover Authorization for browsers).
  if (!asked.empty() || !has_star(cors.allowed_headers))
    res.set_header("Access-Control-Allow-Headers",
                   has_star(cors.allowed_headers) ? join(asked) : join(cors.allowed_headers));
  res.set_header("Access-Control-Max-Age", "600");
}

bool cors_origin_refused(const CorsOptions& cors, const HttpRequest& req) {
  const std::string_view origin = req.header("Origin");
  return cors.enabled() && !origin.empty() && !origin_allowed(cors, origin);
}

void add_cors_headers(const CorsOptions& cors, const HttpRequest& req, HttpResponse& res) {
  if (!cors.enabled()) return;
  const std::string_view origin = req.header("Origin");
  if (!origin_allowed(cors, origin)) return;
  set_allow_origin(cors, origin, res);
  res.set_header("Access-Control-Expose-Headers",
                 "X-Request-Id, X-Msh-Usage-Prompt-Tokens, X-Msh-Usage-Cached-Tokens");
}

std::string request_id_for(const HttpRequest& req) {
  const std::string_view sent = req.header("X-Request-Id");
  const bool usable = !sent.empty() && sent.size() <= 256 &&
                      std::all_of(sent.begin(), sent.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (usable) return std::string(sent);
  return make_response_id("");
}

}  // namespace rill::server
