#include "text/parsers/xtml_call.h"

#include <algorithm>

#include <fmt/format.h>

#include "text/parsers/json_text.h"
#include "text/parsers/marker_scanner.h"

namespace rill::text::k3 {
namespace {

bool is_key_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

// Inverse of the renderer's escape (& -> &amp; first, then " -> &quot;), in one left-to-right pass.
std::string unescape_attribute(std::string_view value) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value.substr(i).starts_with("&quot;")) {
      out.push_back('"');
      i += 5;
    } else if (value.substr(i).starts_with("&amp;")) {
      out.push_back('&');
      i += 4;
    } else {
      out.push_back(value[i]);
    }
  }
  return out;
}

const std::string* find_attribute(const std::vector<std::pair<std::string, std::string>>& attrs,
                                  std::string_view key) {
  for (const auto& [k, v] : attrs) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Markers that end an argument or json body even though its closing tag is missing. The others
// (channel tags, lone <|open|>/<|close|>/<|sep|>) are literal text inside a value.
bool ends_value(int marker) {
  switch (marker) {
    case kCallOpen:
    case kCallClose:
    case kArgOpen:
    case kArgClose:
    case kJsonOpen:
    case kJsonClose:
    case kToolsClose:
    case kMessageClose:
    case kEndOfMsg:
    case kEos:
    case kEot:
      return true;
    default:
      return false;
  }
}

// The argument's value as JSON text: a string's raw text as a JSON string, any other type's JSON as the
// model wrote it (trimmed), so numbers keep their digits and spelling (no trip through a double).
std::string coerce_argument(const std::string& key, const std::string& type, const std::string& value,
                            std::vector<std::string>& problems) {
  if (type == "string") return dump_compact(value);  // raw text, exactly as generated
  bool known = type == "number" || type == "boolean" || type == "null" || type == "object" || type == "array";
  if (!known) problems.push_back(fmt::format("argument \"{}\" has unknown type \"{}\"", key, type));
  const std::string_view text = trim_json_space(value);
  auto parsed = parse_json(text);
  if (!parsed) {
    problems.push_back(fmt::format("argument \"{}\" of type {} is not valid JSON, kept as a string: {}", key,
                                   type, quote_excerpt(value)));
    return dump_compact(value);
  }
  if (known && type != json_type_name(*parsed)) {
    problems.push_back(
        fmt::format("argument \"{}\" declared {} holds a {}", key, type, json_type_name(*parsed)));
  }
  return std::string(text);
}

}  // namespace

const std::vector<std::string_view>& markers() {
  static const std::vector<std::string_view> list = {
      "<|open|>think<|sep|>",
      "<|close|>think<|sep|>",
      "<|open|>response<|sep|>",
      "<|close|>response<|sep|>",
      "<|open|>tools<|sep|>",
      "<|close|>tools<|sep|>",
      "<|open|>call",
      "<|close|>call<|sep|>",
      "<|open|>argument",
      "<|close|>argument<|sep|>",
      "<|open|>json",
      "<|close|>json<|sep|>",
      "<|close|>message<|sep|>",
      "<|open|>",
      "<|close|>",
      "<|sep|>",
      "<|end_of_msg|>",
      "[EOS]",
      "[EOT]",
  };
  return list;
}

bool parse_attributes(std::string_view header, std::vector<std::pair<std::string, std::string>>& out) {
  size_t i = 0;
  while (true) {
    size_t space = i;
    while (i < header.size() && is_json_space(header[i])) ++i;
    if (i == header.size()) return true;
    if (i == space) return false;  // the tag name and each attribute are followed by whitespace
    size_t key = i;
    while (i < header.size() && is_key_char(header[i])) ++i;
    if (i == key || !header.substr(i).starts_with("=\"")) return false;
    size_t value = i + 2;
    size_t quote = header.find('"', value);
    if (quote == std::string_view::npos) return false;
    out.emplace_back(std::string(header.substr(key, i - key)),
                     unescape_attribute(header.substr(value, quote - value)));
    i = quote + 1;
  }
}

XtmlCall::XtmlCall() : raw_(spelling(kCallOpen)) {}

void XtmlCall::fail(std::string problem) {
  if (phase_ == Phase::Malformed) return;
  problem_ = std::move(problem);
  phase_ = Phase::Malformed;
}

void XtmlCall::text(std::string_view text) {
  raw_.append(text);
  switch (phase_) {
    case Phase::Header:
    case Phase::ArgHeader:
    case Phase::JsonHeader:
      header_.append(text);
      return;
    case Phase::ArgValue:
    case Phase::JsonValue:
      value_.append(text);
      return;
    case Phase::Body:
      // No quote of `text` here: the problem must not depend on how the text was chunked.
      if (!is_blank(text)) fail("text between arguments");
      return;
    case Phase::Malformed:
      return;
  }
}

XtmlCall::Step XtmlCall::marker(int marker) {
  switch (phase_) {
    case Phase::Header:
    case Phase::ArgHeader:
    case Phase::JsonHeader:
      if (marker != kSep) {
        fail(fmt::format("{} inside a tag header", spelling(marker)));
        return malformed_marker(marker);
      }
      raw_.append(spelling(marker));
      end_header();
      return Step::Consumed;
    case Phase::Body:
      if (marker == kCallClose) {
        raw_.append(spelling(marker));
        return Step::Complete;
      }
      if ((marker == kArgOpen && !json_block_) || (marker == kJsonOpen && !json_block_ && args_.empty())) {
        raw_.append(spelling(marker));
        phase_ = marker == kArgOpen ? Phase::ArgHeader : Phase::JsonHeader;
        return Step::Consumed;
      }
      fail(fmt::format("unexpected {} in the call body", spelling(marker)));
      return malformed_marker(marker);
    case Phase::ArgValue:
      return value_marker(marker, kArgClose);
    case Phase::JsonValue:
      return value_marker(marker, kJsonClose);
    case Phase::Malformed:
      return malformed_marker(marker);
  }
  return Step::Consumed;
}

XtmlCall::Step XtmlCall::malformed_marker(int marker) {
  if (marker == kToolsClose || marker == kCallOpen || marker == kMessageClose || is_stop(marker)) {
    return Step::Rejected;
  }
  raw_.append(spelling(marker));
  return marker == kCallClose ? Step::Complete : Step::Consumed;
}

XtmlCall::Step XtmlCall::value_marker(int marker, int close) {
  if (marker == close) {
    raw_.append(spelling(marker));
    if (close == kArgClose) {
      args_.back().value = std::move(value_);
    } else {
      json_block_ = std::move(value_);
    }
    value_.clear();
    phase_ = Phase::Body;
    return Step::Consumed;
  }
  if (ends_value(marker)) {
    fail(fmt::format("{} before {}", spelling(marker), spelling(close)));
    return malformed_marker(marker);
  }
  raw_.append(spelling(marker));
  value_.append(spelling(marker));
  return Step::Consumed;
}

void XtmlCall::end_header() {
  std::vector<std::pair<std::string, std::string>> attrs;
  std::string header = std::exchange(header_, {});
  if (!parse_attributes(header, attrs))
    return fail(fmt::format("bad tag attributes {}", quote_excerpt(header)));
  if (phase_ == Phase::Header) {
    const std::string* tool = find_attribute(attrs, "tool");
    if (tool == nullptr || tool->empty()) return fail("call without a tool=\"NAME\" attribute");
    name_ = *tool;
    phase_ = Phase::Body;
  } else if (phase_ == Phase::ArgHeader) {
    const std::string* key = find_attribute(attrs, "key");
    if (key == nullptr) return fail("argument without a key=\"K\" attribute");
    const std::string* type = find_attribute(attrs, "type");
    args_.push_back({*key, type != nullptr ? *type : "string", ""});  // the renderer always writes a type
    phase_ = Phase::ArgValue;
  } else {
    phase_ = Phase::JsonValue;  // type="object" is the only json block the renderer writes
  }
}

std::string XtmlCall::arguments(std::vector<std::string>& problems) const {
  if (json_block_) {
    std::string_view body = trim_json_space(*json_block_);
    auto parsed = parse_json(body);
    if (!parsed) {
      problems.push_back(
          fmt::format("json block is not valid JSON, kept as written: {}", quote_excerpt(body)));
    } else if (!parsed->is_object()) {
      problems.push_back(fmt::format("json block holds a {}", json_type_name(*parsed)));
    }
    return std::string(body);  // as written: re-serialising would round big numbers through a double
  }
  // Keys in generated order; a repeated key keeps its first place and its last value.
  std::vector<std::pair<std::string, std::string>> members;
  for (const Argument& arg : args_) {
    std::string value = coerce_argument(arg.key, arg.type, arg.value, problems);
    auto same =
        std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.first == arg.key; });
    if (same == members.end()) {
      members.emplace_back(arg.key, std::move(value));
      continue;
    }
    problems.push_back(fmt::format("argument \"{}\" appears twice, the last value is kept", arg.key));
    same->second = std::move(value);
  }
  std::string out = "{";
  for (const auto& [key, value] : members) {
    if (out.size() > 1) out += ",";
    out += dump_compact(key) + ":" + value;
  }
  return out + "}";
}

}  // namespace rill::text::k3
