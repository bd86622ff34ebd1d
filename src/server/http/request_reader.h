// Reads HTTP/1.x requests from bytes, one at a time, enforcing HttpLimits and RFC 9112's framing rules:
// the head and the decoded body are bounded whatever the transfer coding; a conflicting or malformed
// length, an unknown transfer coding or a Content-Encoding is refused as soon as the head is read, before
// any body byte is waited for. No socket: the connection feeds what it reads (so does the fuzz target).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/http/http_limits.h"
#include "server/http/http_types.h"

namespace rill::server {

class RequestReader {
 public:
  enum class State {
    Idle,      // no byte of the next request yet
    Head,      // reading the request line and headers
    Body,      // the head passed its checks; reading the body
    Complete,  // take() the request
    Failed,    // error_status() / error_message(); the connection must be closed after the reply
  };

  explicit RequestReader(const HttpLimits& limits);
  ~RequestReader();

  // Appends bytes (kept until parsed: pipelined requests wait here) and parses as far as one request.
  void feed(std::string_view bytes);
  // The peer sent EOF: a request cut short fails (400); between requests nothing happens.
  void finish();
  State state() const { return state_; }
  // The head asked for `Expect: 100-continue` and its body has not begun: answer it once, then clear.
  bool wants_continue() const { return wants_continue_; }
  void continue_sent() { wants_continue_ = false; }
  size_t buffered() const { return pending_.size(); }
  // Memory the body in progress holds or will hold: its Content-Length once the head is read, else (chunked)
  // what the decoded body holds so far; 0 before the body.
  size_t body_reserve() const;

  // The complete request; the reader moves on to the next one (buffered bytes are parsed at once).
  HttpRequest take();
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  struct Parser;

  void parse();
  void check_head();
  void fail(int status, std::string message);

  HttpLimits limits_;
  std::unique_ptr<Parser> parser_;
  std::string pending_;
  State state_ = State::Idle;
  bool wants_continue_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace rill::server
