#include "text/jinja/jinja_reference.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_paths.h"
#include "text/jinja/template.h"

namespace rill::text::jinja::testing {
namespace {

// Shows where two renders part, with a little context on each side, control characters escaped.
std::string describe_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto window = [&](const std::string& s) {
    const size_t b = i > 40 ? i - 40 : 0;
    return nlohmann::json(s.substr(b, 80)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::ostringstream out;
  out << "first difference at byte " << i << " (jinja2 " << want.size() << " bytes, rill " << got.size()
      << " bytes)\n  jinja2: " << window(want) << "\n  rill:   " << window(got);
  return out.str();
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ReferenceResult> render_with_jinja2(const std::vector<RenderCase>& cases) {
  char path[] = "/tmp/rill_jinja_cases_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  {
    std::ofstream out(path, std::ios::binary);
    for (const RenderCase& c : cases) {
      nlohmann::ordered_json line;
      if (c.template_file.empty()) {
        line["template"] = c.source;
      } else {
        line["template_file"] = c.template_file;
      }
      line["variables"] = c.variables;
      out << line.dump() << "\n";
    }
  }
  const std::string cmd =
      "python3 " + rill::testing::source_dir() + "/tests/text/jinja/jinja_reference.py < " + path;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  if (pipe) {
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, n);
  }
  const int status = pipe ? pclose(pipe) : -1;
  close(fd);
  unlink(path);
  EXPECT_EQ(status, 0) << "python3 jinja_reference.py failed: " << cmd;
  std::vector<ReferenceResult> results;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    ReferenceResult r;
    r.ok = j.at("ok").get<bool>();
    if (r.ok) {
      r.output = j.at("output").get<std::string>();
    } else {
      r.kind = j.at("kind").get<std::string>();
      r.type = j.at("type").get<std::string>();
      r.message = j.at("message").get<std::string>();
      if (j.contains("line") && j["line"].is_number()) r.line = j["line"].get<int>();
    }
    results.push_back(std::move(r));
  }
  EXPECT_EQ(results.size(), cases.size()) << "jinja_reference.py returned too few results";
  return results;
}

std::vector<ReferenceResult> expect_same_as_jinja2(const std::vector<RenderCase>& cases) {
  const std::vector<ReferenceResult> reference = render_with_jinja2(cases);
  for (size_t i = 0; i < cases.size() && i < reference.size(); ++i) {
    const RenderCase& c = cases[i];
    const ReferenceResult& want = reference[i];
    SCOPED_TRACE("case '" + c.name + "' variables " + c.variables.dump().substr(0, 300));
    const std::string source = c.template_file.empty() ? c.source : read_file(c.template_file);
    auto tmpl = Template::parse(source, c.name);
    Result<std::string> got = tmpl.ok() ? tmpl->render(c.variables) : Result<std::string>(tmpl.status());
    if (want.ok) {
      if (!got.ok()) {
        ADD_FAILURE() << "jinja2 renders it, rill fails: " << got.status().message()
                      << "\n  jinja2 output: " << nlohmann::json(want.output).dump().substr(0, 400);
        continue;
      }
      if (*got != want.output) ADD_FAILURE() << describe_difference(want.output, *got);
      continue;
    }
    if (got.ok()) {
      ADD_FAILURE() << "jinja2 fails (" << want.type << ": " << want.message << "), rill renders "
                    << nlohmann::json(*got).dump().substr(0, 400);
      continue;
    }
    if (want.line > 0) {
      // A syntax error: rill must blame the same line ("NAME:LINE: ...").
      EXPECT_NE(got.status().message().find(":" + std::to_string(want.line) + ":"), std::string::npos)
          << "jinja2 reports line " << want.line << " (" << want.message
          << "), rill: " << got.status().message();
    }
    if (want.kind == "raised") {
      EXPECT_NE(got.status().message().find(want.message), std::string::npos)
          << "raise_exception message differs: jinja2 '" << want.message << "', rill '"
          << got.status().message() << "'";
    }
  }
  return reference;
}

}  // namespace rill::text::jinja::testing
