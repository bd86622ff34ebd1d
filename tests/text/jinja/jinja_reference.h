// Runs test cases through Python's jinja2 in the reference environment (render_reference.py, beside this
// file) and checks that rill's engine renders the same bytes, or fails where jinja2 fails.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rill::text::jinja::testing {

struct RenderCase {
  std::string name;
  std::string source;         // inline template text, or
  std::string template_file;  // a path (the shared chat templates)
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

struct ReferenceResult {
  bool ok = false;
  std::string output;
  std::string kind;  // "raised" (raise_exception), "template_error", "exception"
  std::string type;
  std::string message;
  int line = 0;  // syntax errors: the line jinja2 reports
};

// One python3 process renders all cases (jinja_reference.py). Fails the test if python cannot run.
std::vector<ReferenceResult> render_with_jinja2(const std::vector<RenderCase>& cases);

// Renders every case with rill and with jinja2 and expects identical output; where jinja2 fails rill must
// fail too, and for raise_exception() rill's message must carry the template's text. Returns jinja2's
// results.
std::vector<ReferenceResult> expect_same_as_jinja2(const std::vector<RenderCase>& cases);

std::string read_file(const std::string& path);

}  // namespace rill::text::jinja::testing
