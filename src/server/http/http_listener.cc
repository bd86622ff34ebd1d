#include "server/http/http_listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <fmt/format.h>

#include "server/http/handler_pool.h"
#include "server/http/memory_budget.h"
#include "server/http/request_reader.h"

namespace rill::server {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

// After the last response on a connection that closes: how long unread request bytes are drained so the
// close does not reset the connection before the client has read the response.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
// A stepped stream that waits (StreamStep::Wait) steps again after this even without a wake, so a route that
// cannot arrange a wake (or misses one) is still polled.
constexpr auto kStreamWakeFallback = std::chrono::milliseconds(100);
constexpr auto kPeerCloseProbe = std::chrono::milliseconds(200);
// Threads for the routes the handlers mark reserved (/health, /metrics): never behind the --http-threads
// queue, so a server whose handler threads are all busy still answers its liveness probes.
constexpr int kReservedThreads = 2;

class Session;

}  // namespace

struct HttpListener::Impl {
  Impl(HttpLimits l, HttpHandlers h)
      : limits(l),
        handlers(std::move(h)),
        work(io.get_executor()),
        accept_strand(net::make_strand(io)),
        acceptor(accept_strand),
        pool(l.handler_threads),
        reserved_pool(kReservedThreads),
        budget(l.request_memory_bytes ? l.request_memory_bytes : default_request_memory_bytes()),
        retry_timer(accept_strand) {}

  void accept();
  // Closes the connections not being answered; with `now`, also those lingering after their last response.
  void close_sessions(bool now);

  HttpLimits limits;
  HttpHandlers handlers;
  std::atomic<int> connections{0};
  std::atomic<int> streams{0};  // stepped streams not yet ended (stop() waits for them)
  std::atomic<bool> draining{false};
  // Declared before io: the connections io_context still owns when it is destroyed deregister here.
  std::mutex mu;
  bool stopped = false;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::unordered_map<std::string, int> per_client;  // open connections per peer address

  net::io_context io;
  // Keeps run() running while no socket operation is pending (a stream's route computing its next chunk
  // between writes would otherwise find the I/O threads gone); released by stop().
  net::executor_work_guard<net::io_context::executor_type> work;
  // The acceptor and its retry timer are touched only on this strand (its completions run there; drain posts
  // there), never by two I/O threads at once.
  net::strand<net::io_context::executor_type> accept_strand;
  tcp::acceptor acceptor;
  HandlerPool pool;
  HandlerPool reserved_pool;
  MemoryBudget budget;  // request bodies being read and parsed, all connections together
  net::steady_timer retry_timer;  // after a failed accept (EMFILE): wait, do not spin
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
  // A stepped stream's place: running a step on a handler thread, parked until its output drains or until a
  // wake, or ending.
  enum class StreamState { None, Running, ParkedOutput, ParkedWake, Ending };

 public:
  Session(tcp::socket socket, HttpListener::Impl& server)
      : socket_(std::move(socket)),
        server_(server),
        reader_(server.limits),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        wake_timer_(socket_.get_executor()),
        probe_timer_(socket_.get_executor()),
        gone_(std::make_shared<std::atomic<bool>>(false)) {
    server_.connections.fetch_add(1);
    error_code ec;
    const auto peer = socket_.remote_endpoint(ec);
    if (!ec) {
      client_ = peer.address().to_string();
      client_endpoint_ = peer.address().is_v6() ? "[" + client_ + "]:" + std::to_string(peer.port())
                                                : client_ + ":" + std::to_string(peer.port());
    }
  }
  ~Session() {
    {
      std::lock_guard<std::mutex> lock(server_.mu);
      server_.sessions.erase(this);
    }
    server_.budget.release(charged_);
    release_slot();
  }

  // A refused connection gives its slot back at once: its 503 and linger must not hold the cap against the
  // clients it protects (one address re-opening refused connections filled --max-connections otherwise).
  void release_slot() {
    if (!counted_) return;
    counted_ = false;
    {
      std::lock_guard<std::mutex> lock(server_.mu);
      if (auto it = server_.per_client.find(client_); it != server_.per_client.end() && --it->second <= 0)
        server_.per_client.erase(it);
    }
    server_.connections.fetch_sub(1);
  }

  void start() {
    int from_client;
    {
      std::lock_guard<std::mutex> lock(server_.mu);
      server_.sessions.emplace(this, weak_from_this());
      from_client = ++server_.per_client[client_];
    }
    net::dispatch(socket_.get_executor(), [self = shared_from_this(), from_client] {
      error_code ignored;
      self->socket_.set_option(tcp::no_delay(true), ignored);
      const HttpLimits& limits = self->server_.limits;
      const int open = self->server_.connections.load();
      // One address cannot hold more than its share (issue #32 N3: one client re-opening trickling
      // connections held every slot); past the cap, a band of reserved connections serves only the
      // reserved routes (/health, /metrics), so probes get through a full server.
      if (limits.max_connections_per_client > 0 && from_client > limits.max_connections_per_client) {
        self->release_slot();
        self->reply_error_and_close(
            503,
            "This client has too many open connections (the limit is " +
                std::to_string(limits.max_connections_per_client) + " per address): retry later",
            /*version=*/11);
        return;
      }
      if (open > limits.max_connections + limits.reserved_connections) {
        self->release_slot();
        self->reply_error_and_close(503, fmt_connections(limits.max_connections), /*version=*/11);
        return;
      }
      self->reserved_only_ = open > limits.max_connections;
      self->process();
    });
  }

  // From any thread: close now unless a response is being produced (then close after it); a connection
  // lingering after its last response is left to finish that unless `now`.
  void drain(bool now) {
    net::post(socket_.get_executor(), [self = shared_from_this(), now] {
      self->closing_ = true;
      if (!self->busy_ && (now || !self->lingering_)) self->close();
    });
  }

 private:
  enum class Deadline { None, FromAccept, KeepAlive, Head, Body };

  static std::string fmt_connections(int cap) {
    return "The server has too many open connections (the limit is " + std::to_string(cap) + "): retry later";
  }

  // Acts on the reader's state: hand a complete request on, answer a failed one, or read on.
  void process() {
    if (closed_) return;
    if (!charge_body())
      return reply_error_and_close(
          503,
          fmt::format("The server is at its memory limit for request bodies ({} MiB, --max-request-memory): "
                      "retry later",
                      server_.budget.capacity() >> 20),
          11);
    switch (reader_.state()) {
      case RequestReader::State::Complete:
        return dispatch(reader_.take());
      case RequestReader::State::Failed:
        return reply_error_and_close(reader_.error_status(), reader_.error_message(), 11);
      default:
        break;
    }
    if (closing_ && reader_.state() == RequestReader::State::Idle) return close();
    if (peer_eof_) {
      reader_.finish();
      if (reader_.state() == RequestReader::State::Failed) return process();
      return close();
    }
    if (reader_.wants_continue()) {
      reader_.continue_sent();
      writing_ = true;
      net::async_write(socket_, net::buffer(kContinue, sizeof kContinue - 1),
                       [self = shared_from_this()](error_code ec, size_t) {
                         self->writing_ = false;
                         if (ec) return self->close();
                         self->process();
                       });
      return;
    }
    arm_read_deadline();
    read();
  }

  // Charges the memory budget for the body being read (or, once complete, for its parse too): false when it
  // does not fit.
  bool charge_body() {
    size_t need = reader_.body_reserve();
    if (reader_.state() == RequestReader::State::Complete) need += need * kParseExpansion;
    if (need <= charged_) return true;
    if (!server_.budget.try_charge(need - charged_)) return false;
    charged_ = need;
    return true;
  }

  void arm_read_deadline() {
    Deadline want = Deadline::None;
    std::chrono::milliseconds after{0};
    switch (reader_.state()) {
      case RequestReader::State::Idle:
        want = first_ ? Deadline::FromAccept : Deadline::KeepAlive;
        after = first_ ? server_.limits.header_timeout : server_.limits.keep_alive_timeout;
        break;
      case RequestReader::State::Head:  // the whole head: from its first byte (or from the accept)
        want = armed_ == Deadline::FromAccept ? Deadline::FromAccept : Deadline::Head;
        after = server_.limits.header_timeout;
        break;
      case RequestReader::State::Body:
        want = Deadline::Body;
        after = server_.limits.body_timeout;
        break;
      default:
        return;
    }
    if (want == armed_) return;
    armed_ = want;
    arm(read_timer_, read_generation_, after, /*unless_busy=*/true);
  }

  void disarm_read_deadline() {
    armed_ = Deadline::None;
    ++read_generation_;
    read_timer_.cancel();
  }

  // Closes the connection when `timer` expires, unless it was re-armed or cancelled since (`generation`
  // moved on: a wait that completed just before a cancel still runs its handler without an error).
  void arm(net::steady_timer& timer, uint64_t& generation, std::chrono::milliseconds after,
           bool unless_busy) {
    const uint64_t armed = ++generation;
    timer.expires_after(after);
    timer.async_wait([self = shared_from_this(), &generation, armed, unless_busy](error_code ec) {
      if (ec || generation != armed || (unless_busy && self->busy_)) return;
      self->close();
    });
  }

  void disarm_write_deadline() {
    ++write_generation_;
    write_timer_.cancel();
  }

  void read() {
    if (reading_ || closed_ || peer_eof_) return;
    // While a request is handled the connection is still read (to see the peer go, and to buffer pipelined
    // requests), but only up to one head's worth of bytes.
    if (busy_ && reader_.buffered() >= server_.limits.max_header_bytes) return watch_for_peer_close();
    reading_ = true;
    socket_.async_read_some(net::buffer(buf_),
                            [self = shared_from_this()](error_code ec, size_t n) { self->on_read(ec, n); });
  }

  // Reading has stopped behind pipelined bytes while a request runs, so an EOF or reset behind them cannot be
  // read: ask the kernel instead, every kPeerCloseProbe, whether the peer closed (TCP_INFO's state), so a
  // whole generation whose client left is still cancelled (issue #32).
  void watch_for_peer_close() {
    if (probing_) return;
    probing_ = true;
    probe_timer_.expires_after(kPeerCloseProbe);
    probe_timer_.async_wait([self = shared_from_this()](error_code ec) {
      self->probing_ = false;
      if (ec || self->closed_ || !self->busy_) return;
      tcp_info info{};
      socklen_t len = sizeof info;
      if (::getsockopt(self->socket_.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
          info.tcpi_state != TCP_ESTABLISHED) {
        self->gone_->store(true);
        return;
      }
      self->read();  // still busy and full: probes again
    });
  }

  void on_read(error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (lingering_) {
      if (ec) return close();
      return read_lingering();
    }
    if (ec) {
      peer_eof_ = true;
      gone_->store(true);
      // A reset (not a FIN) means nothing more can be written either: a stream learns it at its next write,
      // even an empty one (a stream still waiting for its first token). A FIN ends a stepped stream too (as
      // it cancels a whole generation): a client that left after reading everything sent only a FIN, and a
      // stream still queued in the engine writes nothing that would draw the reset, so it would wait for its
      // turn and be prefilled for no one (vLLM aborts it). start_stepped_stream covers a FIN before the
      // stream started.
      if (ec != net::error::eof || stepped_stream_started()) fail_output();
      if (busy_) return;  // the response is attempted anyway (a half-closed client still reads)
      if (ec != net::error::eof) return close();
      return process();
    }
    reader_.feed(std::string_view(buf_.data(), n));
    if (busy_) return read();
    process();
  }

  void dispatch(HttpRequest req) {
    const bool reserved = server_.handlers.reserved && server_.handlers.reserved(req);
    if (reserved_only_ && !reserved)
      return reply_error_and_close(503, fmt_connections(server_.limits.max_connections), req.version);
    busy_ = true;
    disarm_read_deadline();
    req.gone_ = gone_;
    req.client = client_endpoint_;
    auto self = shared_from_this();
    HandlerPool& pool = reserved ? server_.reserved_pool : server_.pool;
    const size_t charge = std::exchange(charged_, 0);  // returned once the route is done with the body
    if (!pool.submit([self, charge, req = std::move(req)]() mutable {
          self->handle(req);
          self->server_.budget.release(charge);
        })) {
      server_.budget.release(charge);
      busy_ = false;
      return close();
    }
    read();
  }

  // ---- handler thread ---------------------------------------------------------------------------------

  void handle(HttpRequest& req) {
    HttpResponse res;
    try {
      server_.handlers.handle(req, res);
    } catch (const std::bad_alloc&) {  // this request could not be served; the server goes on
      res = server_.handlers.error(503, "The server ran out of memory for this request: retry later");
    } catch (const std::exception& e) {
      res = server_.handlers.error(500, std::string("internal error: ") + e.what());
    }
    req.body = std::string();  // the body's memory goes back before the response is written
    const bool keep_alive = req.keep_alive && !server_.draining.load();
    server_.handlers.responded(res.status);
    if (res.stream_step)
      start_stepped_stream(res, req.version, keep_alive);
    else if (res.stream)
      send_stream(res, req.version, keep_alive);
    else
      send_whole(std::move(res), req.version, keep_alive);
  }

  template <typename Message>
  void start_message(Message& m, const HttpResponse& res, int version, bool keep_alive) {
    m.version(unsigned(version));
    m.result(unsigned(res.status));
    if (res.status == 499) m.reason("Client Closed Request");  // nginx's code: Beast has no text for it
    for (const auto& [k, v] : res.headers) m.set(k, v);
    if (!res.content_type.empty()) m.set(http::field::content_type, res.content_type);
    m.keep_alive(keep_alive);
    if (!keep_alive) m.set(http::field::connection, "close");
    if (keep_alive && m.version() == 11)
      m.set("Keep-Alive", "timeout=" + std::to_string(advertised_keep_alive_seconds(server_.limits.keep_alive_timeout)));
  }

  void send_whole(HttpResponse res, int version, bool keep_alive) {
    auto msg = std::make_shared<http::response<http::string_body>>();
    start_message(*msg, res, version, keep_alive);
    msg->body() = std::move(res.body);
    msg->prepare_payload();
    net::post(socket_.get_executor(), [self = shared_from_this(), msg, keep_alive] {
      if (self->closed_) return;
      self->arm_write_deadline();
      self->writing_ = true;
      http::async_write(self->socket_, *msg, [self, msg, keep_alive](error_code ec, size_t) {
        self->writing_ = false;
        self->disarm_write_deadline();
        self->finish(keep_alive && !ec);
      });
    });
  }

  void send_stream(const HttpResponse& res, int version, bool keep_alive) {
    // HTTP/1.0 has no chunked coding: the body ends when the connection closes.
    const bool chunked = version == 11;
    http::response<http::empty_body> head;
    start_message(head, res, version, keep_alive && chunked);
    if (chunked) head.chunked(true);
    std::ostringstream head_text;
    head_text << head.base();
    bool ok = enqueue(head_text.str());
    const ChunkWriter writer = [&](std::string_view chunk) {
      if (ok && chunk.empty()) ok = !output_failed();
      if (!ok || chunk.empty()) return ok;
      ok = enqueue(chunked ? fmt::format("{:x}\r\n{}\r\n", chunk.size(), chunk) : std::string(chunk));
      return ok;
    };
    if (ok) res.stream(writer);
    if (ok && chunked) ok = enqueue("0\r\n\r\n");
    ok = ok && flush();
    net::post(socket_.get_executor(),
              [self = shared_from_this(), again = ok && chunked && keep_alive] { self->finish(again); });
  }

  // ---- stepped streams (handler threads, one step at a time) ------------------------------------------

  void start_stepped_stream(HttpResponse& res, int version, bool keep_alive) {
    stream_chunked_ = version == 11;
    stream_keep_alive_ = keep_alive && stream_chunked_;
    http::response<http::empty_body> head;
    start_message(head, res, version, stream_keep_alive_);
    if (stream_chunked_) head.chunked(true);
    std::ostringstream head_text;
    head_text << head.base();
    step_ = std::move(res.stream_step);
    server_.streams.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      stream_state_ = StreamState::Running;
      // The peer closed while the route ran (on_read saw no stream then): the first step sees a failed
      // write and ends. gone_ is set before on_read takes this lock, so one of the two sees the other.
      if (gone_->load()) out_failed_ = true;
    }
    enqueue_nowait(head_text.str());
    run_step();
  }

  void run_step() {
    const ChunkWriter writer = [this](std::string_view chunk) {
      if (chunk.empty()) return !output_failed();
      return enqueue_nowait(stream_chunked_ ? fmt::format("{:x}\r\n{}\r\n", chunk.size(), chunk)
                                            : std::string(chunk));
    };
    const StreamWake wake = [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->wake();
    };
    uint64_t wakes_before;
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      wakes_before = wakes_;
    }
    const StreamStep step = out_failed_now() ? StreamStep::Done : step_(writer, wake);
    std::unique_lock<std::mutex> lock(out_mu_);
    if (step == StreamStep::Done || out_failed_) {
      stream_state_ = StreamState::Ending;
      lock.unlock();
      return end_stepped_stream();
    }
    if (step == StreamStep::More) {
      if (out_unwritten_ >= kMaxQueuedBytes) {  // the client does not keep up: wait for the drain
        stream_state_ = StreamState::ParkedOutput;
        return;
      }
      lock.unlock();
      return resubmit_step();
    }
    if (wakes_ != wakes_before) {  // woken while the step ran
      lock.unlock();
      return resubmit_step();
    }
    stream_state_ = StreamState::ParkedWake;
    lock.unlock();
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      // Re-arming cancels the previous wait, whose handler then runs with an error: only the latest wait
      // may resume the stream (else each cancelled wait would start a step, which waits again: a spin).
      const uint64_t armed = ++self->wake_generation_;
      self->wake_timer_.expires_after(kStreamWakeFallback);
      self->wake_timer_.async_wait([self, armed](error_code ec) {
        if (ec || armed != self->wake_generation_) return;
        self->resume(StreamState::ParkedWake);
      });
    });
  }

  void wake() {
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      ++wakes_;
    }
    resume(StreamState::ParkedWake);
  }

  // From any thread: runs the next step if the stream is parked in `from`.
  void resume(StreamState from) {
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      if (stream_state_ != from) return;
      stream_state_ = StreamState::Running;
    }
    resubmit_step();
  }

  // The step goes to the back of the queue, so a stream yields its thread to waiting requests between steps.
  void resubmit_step() {
    auto self = shared_from_this();
    if (server_.pool.submit([self] { self->run_step(); })) return;
    {  // stopping: the stream ends here (releasing the route's state cancels its work)
      std::lock_guard<std::mutex> lock(out_mu_);
      stream_state_ = StreamState::Ending;
    }
    net::post(socket_.get_executor(), [self] {
      self->close();
      self->release_step();
    });
  }

  void end_stepped_stream() {
    bool ok = !output_failed();
    if (ok && stream_chunked_) ok = enqueue_nowait("0\r\n\r\n");
    release_step();
    net::post(socket_.get_executor(), [self = shared_from_this(), again = ok && stream_keep_alive_] {
      self->stream_ending_ = true;
      self->stream_again_ = again;
      self->maybe_finish_stream();
    });
  }

  void release_step() {
    if (!step_) return;
    step_ = nullptr;
    server_.streams.fetch_sub(1);
  }

  // Strand: once an ended stream's bytes are all written (or failed), the connection goes on or closes.
  void maybe_finish_stream() {
    if (!stream_ending_) return;
    const bool failed = output_failed();
    if (!failed && (writing_ || !out_queue_.empty())) return;
    stream_ending_ = false;
    finish(stream_again_ && !failed);
  }

  // A stepped stream has started and not yet ended (an ending one's last bytes are still worth writing).
  bool stepped_stream_started() {
    std::lock_guard<std::mutex> lock(out_mu_);
    return stream_state_ != StreamState::None && stream_state_ != StreamState::Ending;
  }

  bool out_failed_now() {
    std::lock_guard<std::mutex> lock(out_mu_);
    return out_failed_;
  }

  bool enqueue_nowait(std::string bytes) {
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      if (out_failed_) return false;
      out_unwritten_ += bytes.size();
    }
    net::post(socket_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes)]() mutable {
      self->out_queue_.push_back(std::move(bytes));
      self->write_queued();
    });
    return true;
  }

  // Stream output. The handler thread queues bytes and goes on (one hand-over per chunk, no wait for the
  // write: a token's latency is not two thread switches longer); it waits only while more than
  // kMaxQueuedBytes are unwritten (a slow reader), and at the end of the body. False once a write failed or
  // the write deadline closed the connection: the client is gone.
  static constexpr size_t kMaxQueuedBytes = 64u << 10;

  bool enqueue(std::string bytes) {
    {
      std::unique_lock<std::mutex> lock(out_mu_);
      out_cv_.wait(lock, [&] { return out_failed_ || out_unwritten_ < kMaxQueuedBytes; });
      if (out_failed_) return false;
      out_unwritten_ += bytes.size();
    }
    net::post(socket_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes)]() mutable {
      self->out_queue_.push_back(std::move(bytes));
      self->write_queued();
    });
    return true;
  }

  bool output_failed() {
    std::lock_guard<std::mutex> lock(out_mu_);
    return out_failed_;
  }

  // Waits until everything queued is written (or a write failed).
  bool flush() {
    std::unique_lock<std::mutex> lock(out_mu_);
    out_cv_.wait(lock, [&] { return out_failed_ || out_unwritten_ == 0; });
    return !out_failed_;
  }

  // ---- strand ------------------------------------------------------------------------------------------

  void write_queued() {
    if (writing_ || out_queue_.empty()) return;
    if (closed_) return fail_output();
    writing_ = true;
    arm_write_deadline();
    net::async_write(socket_, net::buffer(out_queue_.front()),
                     [self = shared_from_this()](error_code ec, size_t) {
                       self->writing_ = false;
                       self->disarm_write_deadline();
                       if (ec) return self->fail_output();
                       const size_t written = self->out_queue_.front().size();
                       self->out_queue_.pop_front();
                       bool drained;
                       {
                         std::lock_guard<std::mutex> lock(self->out_mu_);
                         self->out_unwritten_ -= written;
                         drained = self->out_unwritten_ <= kMaxQueuedBytes / 2;
                       }
                       self->out_cv_.notify_all();
                       if (drained) self->resume(StreamState::ParkedOutput);
                       self->write_queued();
                       self->maybe_finish_stream();
                     });
  }

  // The queue is left as it is: a write of its front may still be in flight (it is freed with the session).
  void fail_output() {
    gone_->store(true);
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      out_failed_ = true;
    }
    out_cv_.notify_all();
    // A parked stepped stream runs once more to see the failure and end (releasing its route's work).
    resume(StreamState::ParkedOutput);
    resume(StreamState::ParkedWake);
    maybe_finish_stream();
  }

  void arm_write_deadline() { arm(write_timer_, write_generation_, server_.limits.write_timeout, false); }

  // The response is written: read the next request (maybe pipelined already), or close.
  void finish(bool keep_alive) {
    busy_ = false;
    first_ = false;
    if (closed_) return;
    if (!keep_alive || closing_) return linger();
    process();
  }

  void reply_error_and_close(int status, const std::string& message, int version) {
    HttpResponse res = server_.handlers.error(status, message);
    server_.handlers.responded(res.status);
    busy_ = true;  // no reading or deadlines of the request kind from here on
    disarm_read_deadline();
    auto msg = std::make_shared<http::response<http::string_body>>();
    start_message(*msg, res, version, false);
    msg->body() = std::move(res.body);
    msg->prepare_payload();
    arm_write_deadline();
    writing_ = true;
    http::async_write(socket_, *msg, [self = shared_from_this(), msg](error_code, size_t) {
      self->writing_ = false;
      self->disarm_write_deadline();
      self->linger();
    });
  }

  // Half-closes (the client sees the end of the response), then discards what the client still sends for
  // a moment before closing, so the close does not reset the connection under an unread response.
  void linger() {
    if (closed_ || lingering_) return;
    lingering_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm(read_timer_, read_generation_, kLinger, /*unless_busy=*/false);
    if (!reading_) read_lingering();
  }

  void read_lingering() {
    if (peer_eof_) return close();
    reading_ = true;
    socket_.async_read_some(net::buffer(buf_),
                            [self = shared_from_this()](error_code ec, size_t n) { self->on_read(ec, n); });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    gone_->store(true);
    error_code ignored;
    read_timer_.cancel();
    write_timer_.cancel();
    wake_timer_.cancel();
    probe_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    fail_output();  // a stream's handler waiting on its queue wakes (its writes fail)
  }

  tcp::socket socket_;  // its executor is this connection's strand: every member below is touched there
  HttpListener::Impl& server_;
  RequestReader reader_;
  std::array<char, 8192> buf_;
  net::steady_timer read_timer_, write_timer_, wake_timer_, probe_timer_;
  bool probing_ = false;  // a peer-close probe is pending
  std::shared_ptr<std::atomic<bool>> gone_;
  std::string client_;          // the peer's address (the per-client cap's key)
  std::string client_endpoint_;  // address:port, for the request log (HttpRequest::client)
  size_t charged_ = 0;          // bytes of the memory budget held for the request being read
  bool counted_ = true;         // holds a slot of the connection caps (until refused or destroyed)
  bool reserved_only_ = false;  // accepted past --max-connections: only reserved routes are served
  Deadline armed_ = Deadline::None;
  uint64_t read_generation_ = 0, write_generation_ = 0, wake_generation_ = 0;
  bool first_ = true;       // no response written yet (the head deadline runs from the accept)
  bool busy_ = false;       // a request is being handled or its response written
  bool reading_ = false;    // an async read is pending
  bool writing_ = false;    // an async write is pending
  bool peer_eof_ = false;   // the peer closed (or reset) its side
  bool closing_ = false;    // draining: close after the current response
  bool lingering_ = false;  // the last response is out; waiting to close
  bool closed_ = false;
  std::deque<std::string> out_queue_;  // stream bytes not yet written (the front one is being written)
  // Shared with the stream's handler thread:
  std::mutex out_mu_;
  std::condition_variable out_cv_;
  size_t out_unwritten_ = 0;
  bool out_failed_ = false;
  // A stepped stream: where it is (under out_mu_), and the wakes seen (a wake during a step re-runs it).
  StreamState stream_state_ = StreamState::None;
  uint64_t wakes_ = 0;
  // The route's step: touched only by the one handler thread running it (steps never overlap), and by the
  // strand once no step can run any more.
  std::function<StreamStep(const ChunkWriter&, const StreamWake&)> step_;
  bool stream_chunked_ = false, stream_keep_alive_ = false;
  bool stream_ending_ = false, stream_again_ = false;  // strand: the last bytes are queued
};

}  // namespace

void HttpListener::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open() || draining.load()) return;
    if (ec) {
      retry_timer.expires_after(std::chrono::milliseconds(50));
      retry_timer.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    std::make_shared<Session>(std::move(socket), *this)->start();
    accept();
  });
}

void HttpListener::Impl::close_sessions(bool now) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [ptr, weak] : sessions)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->drain(now);
}

HttpListener::HttpListener(HttpLimits limits, HttpHandlers handlers)
    : impl_(std::make_unique<Impl>(limits, std::move(handlers))) {}

HttpListener::~HttpListener() {
  stop();
}

Status HttpListener::bind(const std::string& host, int port) {
  if (impl_->pool.size() < impl_->limits.handler_threads)
    return unavailable("--http-threads {}: the system started only {} threads (see ulimit -u and memory)",
                       impl_->limits.handler_threads, impl_->pool.size());
  error_code ec;
  const auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return invalid_argument("--host {}: not an IP address ({})", host, ec.message());
  const tcp::endpoint endpoint(address, uint16_t(port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  // SO_REUSEADDR for fast restarts; never SO_REUSEPORT, which would let a second server share the port.
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    a.close();
    return unavailable("cannot bind {}:{} ({})", host, port, ec.message());
  }
  return {};
}

int HttpListener::port() const {
  error_code ec;
  const auto endpoint = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : int(endpoint.port());
}

void HttpListener::run() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    net::post(impl_->accept_strand, [this] { impl_->accept(); });
  }
  // A completion handler that throws (std::bad_alloc) ends only that handler: run() is entered again.
  auto serve = [this] {
    for (;;) {
      try {
        impl_->io.run();
        return;
      } catch (const std::exception&) {
      }
    }
  };
  std::vector<std::thread> others;
  for (int i = 1; i < impl_->limits.io_threads; ++i) others.emplace_back(serve);
  serve();
  for (std::thread& t : others) t.join();
}

void HttpListener::begin_drain() {
  if (impl_->draining.exchange(true)) return;
  net::post(impl_->accept_strand, [this] {
    error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->retry_timer.cancel();
  });
  impl_->close_sessions(/*now=*/false);
}

void HttpListener::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  begin_drain();
  // Stepped streams run on the pool between parks: let them end (each park is bounded by the write deadline
  // or the wake fallback) before the pool stops taking their steps.
  const auto streams_deadline = std::chrono::steady_clock::now() + impl_->limits.write_timeout + std::chrono::seconds(1);
  while (impl_->streams.load() > 0 && std::chrono::steady_clock::now() < streams_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->pool.stop();
  impl_->reserved_pool.stop();  // every request taken runs to its end; its writes are bounded by the write deadline
  impl_->close_sessions(/*now=*/true);  // the connections whose last response is now out
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (impl_->connections.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->work.reset();
  impl_->io.stop();
}

int HttpListener::open_connections() const {
  return impl_->connections.load();
}

}  // namespace rill::server
