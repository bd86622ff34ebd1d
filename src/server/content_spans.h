// User and tool content is text (issue #32; OpenAI's behaviour): a control token it spells ("<|im_end|>",
// "[EOS]") must not become the control id, which would let a user close their own turn and write the
// assistant's. The Jinja template only sees strings, so before rendering each such content string is
// replaced by a marker no request can contain (a fresh random nonce per render between \x02 and \x03); the
// rendered prompt is then cut at the markers and encoded span by span: the template's own text with control
// tokens, the content without. A template that does not write every marker once, verbatim and in order (it
// transformed a content string), gets nullopt from split(): the caller renders the original body instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai/errors.h"

namespace rill::server {

class ContentSpans {
 public:
  // Replaces every non-empty string content (and text part) of the user and tool messages in body.messages.
  explicit ContentSpans(Json* body);
  size_t size() const { return texts_.size(); }

  struct Span {
    std::string text;
    bool content;  // true: the client's text (encode without control tokens)
  };
  // The rendered prompt with the content put back, as alternating template / content spans (adjacent spans
  // of one kind merged); nullopt when the markers are not all there once, in order.
  std::optional<std::vector<Span>> split(std::string_view rendered) const;

 private:
  std::string marker(size_t i) const;

  std::string nonce_;
  std::vector<std::string> texts_;
};

}  // namespace rill::server
