// A raw-socket HTTP/1.x client for the in-process server tests: sends exactly the bytes a test writes (bad
// framing included) and reads responses itself, so what the server does on the wire is what is checked
// (an HTTP client library would normalise both).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

namespace rill::server::testing {

struct RawResponse {
  int status = 0;                              // 0: none (the connection closed or timed out first)
  std::string version;                         // "HTTP/1.1"
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
  bool chunked = false;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawConnection {
 public:
  // `from`: the local address to connect from (any of 127.0.0.0/8 on Linux), so one test can be several
  // clients.
  explicit RawConnection(int port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &local.sin_addr);
      ::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(size_t(n));
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    ::close(fd_);
    fd_ = -1;
  }

  // True when the server closed the connection (EOF or reset) within `timeout`; buffered bytes are kept.
  bool closed_within(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (fill(deadline)) {
    }
    return eof_;
  }

  // Reads one response (Content-Length, chunked, or up to EOF), waiting at most `timeout` in all.
  RawResponse read_response(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    RawResponse r;
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline)) return r;
    const std::string head = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    r.version = status_line.substr(0, status_line.find(' '));
    r.status = std::atoi(status_line.c_str() + r.version.size() + 1);
    while (line_end != std::string::npos && line_end < head.size()) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line =
          head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    if (r.status == 100) return r;
    if (r.header("transfer-encoding") == "chunked") {
      r.chunked = true;
      for (;;) {
        size_t e;
        while ((e = buf_.find("\r\n")) == std::string::npos)
          if (!fill(deadline)) return r;
        const size_t size = std::strtoul(buf_.c_str(), nullptr, 16);
        while (buf_.size() < e + 2 + size + 2)
          if (!fill(deadline)) return r;
        r.body += buf_.substr(e + 2, size);
        buf_.erase(0, e + 2 + size + 2);
        if (size == 0) break;
      }
    } else if (!r.header("content-length").empty()) {
      const size_t size = std::strtoul(r.header("content-length").c_str(), nullptr, 10);
      while (buf_.size() < size)
        if (!fill(deadline)) return r;
      r.body = buf_.substr(0, size);
      buf_.erase(0, size);
    } else {
      while (fill(deadline)) {
      }
      r.body = std::move(buf_);
      buf_.clear();
    }
    return r;
  }

 private:
  // Reads what arrives before `deadline`; false at EOF, on an error or at the deadline.
  bool fill(std::chrono::steady_clock::time_point deadline) {
    if (eof_) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) return false;
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(chunk, size_t(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

}  // namespace rill::server::testing
