#include "server/http/request_reader.h"

#include <strings.h>

#include <algorithm>

#include <fmt/format.h>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace rill::server {
namespace http = boost::beast::http;

struct RequestReader::Parser {
  explicit Parser(const HttpLimits& limits) {
    p.header_limit(uint32_t(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
    p.body_limit(limits.max_body_bytes);
    p.eager(true);
  }
  http::request_parser<http::string_body> p;
};

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated tokens of every field named `name` (parameters after ';' dropped).
std::vector<std::string_view> field_tokens(const http::request<http::string_body>& m, http::field name) {
  std::vector<std::string_view> out;
  for (auto it = m.find(name); it != m.end() && it->name() == name; ++it) {
    std::string_view v = it->value();
    for (size_t start = 0; start <= v.size();) {
      size_t comma = v.find(',', start);
      if (comma == std::string_view::npos) comma = v.size();
      std::string_view token = v.substr(start, comma - start);
      token = trim(token.substr(0, token.find(';')));
      out.push_back(token);
      start = comma + 1;
    }
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX sequences decoded; a malformed one is kept as sent (the router then finds no route: 404).
std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out.push_back(char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

RequestReader::RequestReader(const HttpLimits& limits)
    : limits_(limits), parser_(std::make_unique<Parser>(limits)) {}

RequestReader::~RequestReader() = default;

void RequestReader::feed(std::string_view bytes) {
  pending_.append(bytes);
  parse();
}

void RequestReader::finish() {
  if (state_ == State::Head || state_ == State::Body)
    fail(400, "The connection was closed in the middle of a request");
}

void RequestReader::fail(int status, std::string message) {
  state_ = State::Failed;
  error_status_ = status;
  error_message_ = std::move(message);
  wants_continue_ = false;
  pending_.clear();
}

void RequestReader::parse() {
  while (!pending_.empty() && state_ != State::Complete && state_ != State::Failed) {
    if (state_ == State::Idle) state_ = State::Head;
    boost::system::error_code ec;
    const size_t n = parser_->p.put(boost::asio::buffer(pending_), ec);
    pending_.erase(0, n);
    if (ec && ec != http::error::need_more) {
      if (ec == http::error::header_limit)
        return fail(431, fmt::format("Request head too large (the limit is {} bytes of request line and "
                                     "headers)",
                                     limits_.max_header_bytes));
      if (ec == http::error::body_limit)
        return fail(413,
                    fmt::format("Request body too large (the limit is {} bytes)", limits_.max_body_bytes));
      if (ec == http::error::bad_content_length || ec == http::error::multiple_content_length)
        return fail(400,
                    "Bad request framing: an invalid or conflicting Content-Length (or Content-Length "
                    "together with Transfer-Encoding)");
      if (ec == http::error::bad_transfer_encoding)
        return fail(400,
                    "Bad request framing: a repeated Transfer-Encoding, or Transfer-Encoding together "
                    "with Content-Length");
      return fail(400, "Malformed HTTP request: " + ec.message());
    }
    if (state_ == State::Head && parser_->p.is_header_done()) {
      check_head();
      if (state_ == State::Failed) return;
      state_ = State::Body;
    }
    if (parser_->p.is_done()) {
      state_ = State::Complete;
      wants_continue_ = false;
      return;
    }
    if (n == 0) break;  // needs more bytes
  }
  // Beast bounds the head itself, but not a chunk-size line (its extensions) or the trailer: bound them here.
  if (state_ == State::Body && pending_.size() > limits_.max_header_bytes)
    fail(400, fmt::format("Bad chunked body: a chunk line or trailer longer than {} bytes",
                          limits_.max_header_bytes));
}

// RFC 9112 §6: what Beast accepts but we refuse, decided on the head alone.
void RequestReader::check_head() {
  const auto& m = parser_->p.get();
  // Beast takes only HTTP/1.x; a later 1.x minor is answered as 1.1 (RFC 9110 §2.5).
  if (m.version() / 10 != 1)
    return fail(505, fmt::format("HTTP version {}.{} is not supported", m.version() / 10, m.version() % 10));
  // Beast takes identical repeats ("5, 5" or two equal fields) as one length; a smuggling vector: refuse.
  const auto lengths = field_tokens(m, http::field::content_length);
  if (lengths.size() > 1) return fail(400, "Bad request framing: more than one Content-Length value");
  const auto codings = field_tokens(m, http::field::transfer_encoding);
  if (!codings.empty()) {
    if (m.version() == 10) return fail(400, "Bad request framing: Transfer-Encoding in an HTTP/1.0 request");
    size_t chunked = 0;
    std::string other;
    for (std::string_view c : codings) {
      if (iequals(c, "chunked"))
        ++chunked;
      else if (other.empty())
        other = std::string(c);
    }
    if (!iequals(codings.back(), "chunked") || chunked != 1)
      return fail(400, "Bad request framing: Transfer-Encoding must end with a single `chunked`");
    if (!other.empty())
      return fail(501, fmt::format("Transfer-Encoding `{}` is not supported (only chunked)", other));
  }
  for (std::string_view c : field_tokens(m, http::field::content_encoding))
    if (!c.empty() && !iequals(c, "identity"))
      return fail(415, fmt::format("Content-Encoding `{}` is not supported: send the body uncompressed", c));
  const auto expect = m.find(http::field::expect);
  if (expect != m.end()) {
    if (!iequals(trim(expect->value()), "100-continue"))
      return fail(417, fmt::format("Expect `{}` is not supported", std::string_view(expect->value())));
    wants_continue_ = m.version() == 11 && !parser_->p.is_done();
  }
}

size_t RequestReader::body_reserve() const {
  if (state_ != State::Body && state_ != State::Complete) return 0;
  if (const auto length = parser_->p.content_length()) return size_t(*length);
  return parser_->p.get().body().capacity();
}

HttpRequest RequestReader::take() {
  auto& m = parser_->p.get();
  HttpRequest req;
  req.method = std::string(m.method_string());
  req.target = std::string(m.target());
  const size_t q = req.target.find('?');
  req.path = percent_decode(std::string_view(req.target).substr(0, q));
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  req.version = std::min(int(m.version()), 11);
  for (const auto& f : m) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.keep_alive = m.keep_alive();
  req.body = std::move(m.body());
  parser_ = std::make_unique<Parser>(limits_);
  state_ = State::Idle;
  wants_continue_ = false;
  parse();
  return req;
}

}  // namespace rill::server
