#include "text/k3/xtml_writer.h"

#include "text/k3/python_json.h"

namespace rill::text::k3 {

std::string escape_attr_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

void XtmlWriter::open_tag(std::string_view tag, const std::vector<Attr>& attrs) {
  control(kOpen);
  text(tag);
  for (const auto& [key, value] : attrs) {
    text(" " + key);
    text("=\"");
    text(escape_attr_value(value));
    text("\"");
  }
  control(kSep);
}

void XtmlWriter::close_tag(std::string_view tag) {
  control(kClose);
  text(tag);
  control(kSep);
}

void XtmlWriter::internal_system_message(std::string_view kind, std::string_view body) {
  open_tag("message", {{"role", "system"}, {"type", std::string(kind)}});
  text(python_strip(body));
  close_tag("message");
  end_of_msg();
}

}  // namespace rill::text::k3
