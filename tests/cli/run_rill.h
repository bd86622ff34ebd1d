// Runs the built `rill` binary in a shell and captures what it printed (stdout and stderr) and its exit code.
#pragma once

#include <sys/wait.h>
#include <cstdio>
#include <string>

#include "test_paths.h"

namespace rill::testing {

struct Run {
  int code = -1;
  std::string out;
};

// `prefix` goes before the binary (e.g. "timeout 60 ").
inline Run run_rill_with_prefix(const std::string& prefix, const std::string& args) {
  Run r;
  const std::string cmd = prefix + rill_binary() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline Run run_rill(const std::string& args) {
  return run_rill_with_prefix("", args);
}

}  // namespace rill::testing
