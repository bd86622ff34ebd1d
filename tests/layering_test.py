#!/usr/bin/env python3
"""The dependency rule of design.md §3 as a test: every `#include "folder/..."` under src/ and bench/ points down.

Levels (a folder may include its own files and those of lower levels only):
  core 0;  io, text, dist 1 (siblings: none includes another);  backend 2;  model 3;  cache 4;  runner 5;
  engine 6;  server 7;  bench 8;  cli 9;  tests 10 (tests/ itself may include anything and is not checked).
bench/ (the drivers behind `rill bench` and `rill bench serve`, micro-benchmarks, the kernel labs) sits below cli/:
the subcommands in cli/bench.cc and cli/bench_serve.cc are thin mains over bench/driver and bench/serve
(style.md: "each tool is a thin main"), so cli -> bench is the declared direction and bench -> cli is not.
Plus: the device is the runner's (issue #37: the executor owns the backends and every model, the draft model
included) — engine/, cache/ and server/ include nothing of backend/ (they reach devices only through runner/'s
Executor and the cache operations runners apply; the server holds an engine, whose executor owns the rest).

Usage: layering_test.py REPO_ROOT   (exit 1 naming every offending include)
"""
import os
import re
import sys

LEVELS = {
    "core": 0,
    "io": 1, "text": 1, "dist": 1,
    "backend": 2,
    "model": 3,
    "cache": 4,
    "runner": 5,
    "engine": 6,
    "server": 7,
    "bench": 8,
    "cli": 9,
    "tests": 10,
}
# Folders that may not include a lower folder the levels alone would allow.
FORBIDDEN = {
    "engine": {"backend"},
    "cache": {"backend"},
    "server": {"backend"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def checked_folders(root):
    """(folder name, path) of every folder the rule covers: each one under src/, and bench/."""
    src = os.path.join(root, "src")
    folders = [(f, os.path.join(src, f)) for f in sorted(os.listdir(src)) if os.path.isdir(os.path.join(src, f))]
    return folders + [("bench", os.path.join(root, "bench"))]


def offending_includes(root):
    problems = []
    for folder, top in checked_folders(root):
        if folder not in LEVELS:
            problems.append(f"{os.path.relpath(top, root)}/: a folder the layering rule does not place (add it to LEVELS)")
            continue
        for here, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".cu", ".cuh", ".in")):
                    continue
                path = os.path.join(here, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == folder:
                            continue
                        target = m.group(1)
                        rel = os.path.relpath(path, root)
                        if target not in LEVELS:
                            continue  # a library's own folder (e.g. "nlohmann/json.hpp")
                        if LEVELS[target] >= LEVELS[folder] or target in FORBIDDEN.get(folder, ()):
                            problems.append(f"{rel}:{lineno}: {folder}/ includes {target}/ ({line.strip()})")
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = offending_includes(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) against the layering of design.md §3")
        return 1
    print("layering: every include under src/ and bench/ points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
