#include "bench/serve/latency_plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

extern char** environ;

namespace rill::bench::serve {
namespace {

namespace fs = std::filesystem;

// A gnuplot single-quoted string: only the quote itself is special (doubled).
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string script(const fs::path& data, const fs::path& png, const std::string& tail,
                   const std::string& title) {
  std::string s;
  // pngcairo draws antialiased lines; plain png (libgd) is the fallback of builds without cairo.
  s += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1200,480 noenhanced } "
       "else { set terminal png size 1200,480 noenhanced }\n";
  s += "set output " + quoted(png.string()) + "\n";
  s += "set multiplot layout 1,2 title " + quoted(title) + "\n";
  s += "set grid\nset key top left\nset xlabel 'achieved request rate (req/s)'\nset yrange [0:*]\n";
  s += "set ylabel 'TTFT (ms)'\n";
  s += fmt::format(
      "plot {0} using 1:2 with linespoints lw 2 title 'mean TTFT', {0} using 1:3 with linespoints "
      "lw 2 title '{1} TTFT'\n",
      quoted(data.string()), tail);
  s += "set ylabel 'TPOT (ms)'\n";
  s += fmt::format(
      "plot {0} using 1:4 with linespoints lw 2 title 'mean TPOT', {0} using 1:5 with linespoints "
      "lw 2 title '{1} TPOT'\n",
      quoted(data.string()), tail);
  s += "unset multiplot\n";
  return s;
}

}  // namespace

Result<bool> plot_latency(std::vector<PlotPoint> points, const fs::path& png, const std::string& tail_label,
                          const std::string& title) {
  std::sort(points.begin(), points.end(),
            [](const PlotPoint& a, const PlotPoint& b) { return a.achieved_rate < b.achieved_rate; });
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec) / fmt::format("rill_bench_plot_{}", getpid());
  fs::create_directories(dir, ec);
  if (ec) return internal_error("--plot: cannot create {}: {}", dir.string(), ec.message());
  const fs::path data = dir / "points.dat", gp = dir / "plot.gp";
  {
    std::ofstream d(data);
    for (const PlotPoint& p : points)
      d << fmt::format("{} {} {} {} {}\n", p.achieved_rate, p.ttft_mean_ms, p.ttft_tail_ms, p.tpot_mean_ms,
                       p.tpot_tail_ms);
    std::ofstream(gp) << script(data, png, tail_label, title);
  }
  const std::string gp_arg = gp.string();
  char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(gp_arg.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  fs::remove_all(dir, ec);
  if (rc == ENOENT) return false;
  if (rc != 0) return internal_error("--plot: cannot run gnuplot: {}", std::strerror(rc));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return internal_error("--plot {}: gnuplot failed (exit status {})", png.string(), status);
  return true;
}

}  // namespace rill::bench::serve
