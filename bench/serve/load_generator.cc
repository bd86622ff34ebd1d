#include "bench/serve/load_generator.h"

#include <chrono>
#include <deque>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace rill::bench::serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::use_awaitable;

// A request is given up when its connection is silent this long: far above any prefill a benchmark asks for,
// so it only ends runs against a server that hangs.
constexpr auto kIdleTimeout = std::chrono::minutes(30);

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

http::request<http::string_body> make_request(http::verb verb, const ServerUrl& url, const std::string& path,
                                              const std::string& api_key, std::string body) {
  http::request<http::string_body> req{verb, url.base_path + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "rill-bench-serve");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = std::move(body);
  }
  req.prepare_payload();
  return req;
}

Result<tcp::resolver::results_type> resolve(asio::io_context& io, const ServerUrl& url) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) return unavailable("--url {}: cannot resolve {}: {}", url.str(), url.host, ec.message());
  return endpoints;
}

class LoadRun {
 public:
  LoadRun(const LoadPlan& plan, tcp::resolver::results_type endpoints, asio::io_context& io)
      : plan_(plan), endpoints_(std::move(endpoints)), io_(io), records_(plan.bodies.size()) {}

  LoadResult run() {
    t0_ = Clock::now();
    asio::co_spawn(io_, dispatch(), asio::detached);
    io_.run();
    return {std::move(records_), seconds(end_ - t0_), max_in_flight_};
  }

 private:
  // Sends each request at its arrival time, or queues it while max_concurrency are open (vLLM's semaphore:
  // a queued request's clock starts when it is sent).
  asio::awaitable<void> dispatch() {
    asio::steady_timer timer(io_);
    for (size_t i = 0; i < plan_.bodies.size(); ++i) {
      const auto at =
          t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan_.arrivals[i]));
      if (at > Clock::now()) {
        timer.expires_at(at);
        co_await timer.async_wait(use_awaitable);
      }
      if (plan_.max_concurrency > 0 && in_flight_ >= plan_.max_concurrency)
        waiting_.push_back(i);
      else
        start(i);
    }
  }

  void start(size_t i) {
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    asio::co_spawn(io_, send(i), [this](std::exception_ptr) {
      --in_flight_;
      end_ = Clock::now();
      if (!waiting_.empty()) {
        const size_t next = waiting_.front();
        waiting_.pop_front();
        start(next);
      }
    });
  }

  asio::awaitable<void> send(size_t i) {
    RequestRecord& rec = records_[i];
    const auto sent = Clock::now();
    rec.start_s = seconds(sent - t0_);
    SseRecorder recorder(rec);
    beast::tcp_stream stream(io_);
    try {
      stream.expires_after(kIdleTimeout);
      co_await stream.async_connect(endpoints_, use_awaitable);
      auto req = make_request(http::verb::post, plan_.url, plan_.endpoint, plan_.api_key, plan_.bodies[i]);
      co_await http::async_write(stream, req, use_awaitable);
      beast::flat_buffer buffer;
      http::response_parser<http::string_body> parser;
      parser.body_limit(boost::none);  // streams are read and dropped as they come
      co_await http::async_read_header(stream, buffer, parser, use_awaitable);
      if (parser.get().result() != http::status::ok) {
        parser.body_limit(1 << 20);
        co_await http::async_read(stream, buffer, parser, use_awaitable);
        rec.error =
            "HTTP " + std::to_string(parser.get().result_int()) + ": " + parser.get().body().substr(0, 500);
        rec.latency_s = seconds(Clock::now() - sent);
      } else {
        while (!parser.is_done()) {
          stream.expires_after(kIdleTimeout);
          co_await http::async_read_some(stream, buffer, parser, use_awaitable);
          // string_body appends at its current end, so the bytes read so far can be consumed and dropped.
          recorder.feed(parser.get().body(), seconds(Clock::now() - sent));
          parser.get().body().clear();
        }
        recorder.finish(seconds(Clock::now() - sent));
      }
    } catch (const boost::system::system_error& e) {
      if (rec.error.empty()) rec.error = std::string("connection: ") + e.code().message();
      rec.ok = false;
      rec.latency_s = seconds(Clock::now() - sent);
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  const LoadPlan& plan_;
  tcp::resolver::results_type endpoints_;
  asio::io_context& io_;
  std::vector<RequestRecord> records_;
  std::deque<size_t> waiting_;
  int in_flight_ = 0, max_in_flight_ = 0;
  Clock::time_point t0_, end_;
};

}  // namespace

Result<ServerUrl> parse_server_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!std::string_view(url).starts_with(kScheme))
    return invalid_argument("--url {}: must start with http:// (https is not supported)", url);
  std::string rest = url.substr(kScheme.size());
  ServerUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    rest.resize(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  const size_t colon = rest.rfind(':');
  out.host = rest.substr(0, colon);
  out.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (out.host.size() > 1 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);  // [::1]
  if (out.host.empty()) return invalid_argument("--url {}: no host", url);
  if (out.port.empty() || out.port.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("--url {}: the port must be a number", url);
  return out;
}

Result<HttpReply> http_get(const ServerUrl& url, const std::string& path, const std::string& api_key,
                           double timeout_s) {
  asio::io_context io;
  RILL_ASSIGN_OR_RETURN(auto endpoints, resolve(io, url));
  HttpReply reply;
  std::string error;
  auto get = [&]() -> asio::awaitable<void> {
    beast::tcp_stream stream(io);
    try {
      stream.expires_after(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
      co_await stream.async_connect(endpoints, use_awaitable);
      auto req = make_request(http::verb::get, url, path, api_key, "");
      co_await http::async_write(stream, req, use_awaitable);
      beast::flat_buffer buffer;
      http::response<http::string_body> res;
      co_await http::async_read(stream, buffer, res, use_awaitable);
      reply.status = res.result_int();
      reply.body = std::move(res.body());
    } catch (const boost::system::system_error& e) {
      error = e.code().message();
    }
  };
  asio::co_spawn(io, get(), asio::detached);
  io.run();
  if (!error.empty()) return unavailable("--url {}: GET {}: {}", url.str(), url.base_path + path, error);
  return reply;
}

Result<LoadResult> run_load(const LoadPlan& plan) {
  if (plan.arrivals.size() != plan.bodies.size())
    return internal_error("run_load: {} arrival times for {} requests", plan.arrivals.size(),
                          plan.bodies.size());
  asio::io_context io;
  RILL_ASSIGN_OR_RETURN(auto endpoints, resolve(io, plan.url));
  return LoadRun(plan, std::move(endpoints), io).run();
}

}  // namespace rill::bench::serve
