#include "cli/http_client.h"

#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace rill::cli {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

Result<HttpUrl> parse_http_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme))
    return invalid_argument("--url {}: expected http://HOST:PORT (https is not supported)", url);
  std::string rest = url.substr(kScheme.size());
  HttpUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    rest.resize(slash);
  }
  while (out.base_path.ends_with("/")) out.base_path.pop_back();
  if (out.base_path.ends_with("/v1")) out.base_path.resize(out.base_path.size() - 3);  // the OpenAI base URL
  const size_t colon = rest.rfind(':');
  out.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  out.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (out.host.empty() || out.port.empty() || out.port.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("--url {}: expected http://HOST:PORT", url);
  return out;
}

Result<HttpReply> http_request(const HttpUrl& url, const std::string& method, const std::string& path,
                               const std::string& body, const std::string& api_key,
                               const std::function<void(std::string_view)>& on_body,
                               const std::atomic<bool>* stop) {
  const std::string where = fmt::format("http://{}:{}{}{}", url.host, url.port, url.base_path, path);
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  tcp::socket socket(ioc);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) return unavailable("--url: cannot resolve {}: {}", url.host, ec.message());
  net::connect(socket, endpoints, ec);
  if (ec)
    return unavailable("--url: cannot connect to {}: {} (is `rill serve` running?)", where, ec.message());

  http::request<http::string_body> req{method == "GET" ? http::verb::get : http::verb::post,
                                       url.base_path + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::connection, "close");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (method != "GET") {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  http::write(socket, req, ec);
  if (ec) return unavailable("{}: sending the request failed: {}", where, ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  HttpReply reply;
  do {
    http::read_header(socket, buffer, parser, ec);
  } while (ec == net::error::interrupted && !(stop && stop->load()));
  if (ec == net::error::interrupted) {  // Ctrl-C before the reply began
    reply.stopped = true;
    return reply;
  }
  if (ec) return unavailable("{}: no response: {}", where, ec.message());
  reply.status = int(parser.get().result_int());
  size_t handed = 0;
  while (!parser.is_done()) {
    if (stop && stop->load()) {
      reply.stopped = true;
      socket.shutdown(tcp::socket::shutdown_both, ec);
      socket.close(ec);
      return reply;
    }
    // Bytes already buffered are parsed before anything is read; otherwise wait for more, a slice at a time.
    if (buffer.size() == 0) {
      pollfd p{socket.native_handle(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;  // nothing yet, or a signal (Ctrl-C): look at `stop` again
    }
    http::read_some(socket, buffer, parser, ec);
    if (ec == net::error::interrupted) continue;  // Ctrl-C during the read: `stop` is looked at first
    if (ec == http::error::end_of_stream) break;
    if (ec) return unavailable("{}: reading the response failed: {}", where, ec.message());
    if (on_body) {
      std::string& got = parser.get().body();
      if (got.size() > handed) on_body(std::string_view(got).substr(handed));
      handed = got.size();
    }
  }
  if (on_body) {
    std::string& got = parser.get().body();
    if (got.size() > handed) on_body(std::string_view(got).substr(handed));
  } else {
    reply.body = std::move(parser.get().body());
  }
  return reply;
}

}  // namespace rill::cli
