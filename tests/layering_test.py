#!/usr/bin/env python3
"""The dependency rule of design.md §3 as a test: every `#include "folder/..."` under src/ points down.

Levels (a folder may include its own files and those of lower levels only):
  core 0;  io, text, dist 1 (siblings: none includes another);  backend 2;  model 3;  cache 4;  runner 5;
  engine 6;  server 7;  cli 8.
Plus: the engine and the cache manager hold no device code — neither includes backend/ (they reach devices
only through runner/'s Executor and the cache operations runners apply).

Usage: layering_test.py SRC_DIR   (exit 1 naming every offending include)
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
    "cli": 8,
}
# Folders that may not include a lower folder the levels alone would allow.
FORBIDDEN = {
    "engine": {"backend"},
    "cache": {"backend"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def offending_includes(src):
    problems = []
    for folder in sorted(os.listdir(src)):
        top = os.path.join(src, folder)
        if not os.path.isdir(top):
            continue
        if folder not in LEVELS:
            problems.append(f"src/{folder}/: a folder the layering rule does not place (add it to LEVELS)")
            continue
        for root, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".cu", ".cuh", ".in")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == folder:
                            continue
                        target = m.group(1)
                        rel = os.path.relpath(path, os.path.dirname(src))
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
    print("layering: every include under src/ points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
