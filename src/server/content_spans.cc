#include "server/content_spans.h"

#include <random>

#include <fmt/format.h>

namespace rill::server {

ContentSpans::ContentSpans(Json* body) {
  std::random_device rd;
  nonce_ = fmt::format("{:08x}{:08x}", rd(), rd());
  if (!body->is_object() || !body->contains("messages") || !(*body)["messages"].is_array()) return;
  auto mark = [&](Json& text) {
    if (!text.is_string() || text.get_ref<const std::string&>().empty()) return;
    texts_.push_back(text.get<std::string>());
    text = marker(texts_.size() - 1);
  };
  for (Json& m : (*body)["messages"]) {
    if (!m.is_object()) continue;
    const std::string role = m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (role != "user" && role != "tool") continue;
    if (!m.contains("content")) continue;
    Json& content = m["content"];
    if (content.is_string()) {
      mark(content);
    } else if (content.is_array()) {
      for (Json& part : content)
        if (part.is_object() && part.contains("text")) mark(part["text"]);
    }
  }
}

std::string ContentSpans::marker(size_t i) const {
  return fmt::format("\x02{}.{}\x03", nonce_, i);
}

std::optional<std::vector<ContentSpans::Span>> ContentSpans::split(std::string_view rendered) const {
  std::vector<Span> spans;
  auto add = [&](std::string_view text, bool content) {
    if (text.empty()) return;
    if (!spans.empty() && spans.back().content == content)
      spans.back().text += text;
    else
      spans.push_back(Span{std::string(text), content});
  };
  size_t at = 0;
  for (size_t i = 0; i < texts_.size(); ++i) {
    const std::string m = marker(i);
    const size_t found = rendered.find(m, at);
    if (found == std::string_view::npos) return std::nullopt;
    add(rendered.substr(at, found - at), false);
    add(texts_[i], true);
    at = found + m.size();
  }
  const std::string_view rest = rendered.substr(at);
  if (rest.find(fmt::format("\x02{}.", nonce_)) != std::string_view::npos) return std::nullopt;  // a repeat
  add(rest, false);
  return spans;
}

}  // namespace rill::server
