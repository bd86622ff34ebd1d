#!/usr/bin/env python3
"""Sums an `ncu --csv --page raw --metrics gpu__time_duration.sum` log per kernel (tools/gpu_check.sh profile).

Prints each kernel's launch count, total and mean device time, sorted by total, and the sum over all launches:
set against the step's wall time it says how much of the step is kernel work and how much launch gaps.
Usage: kernel_profile.py PROFILE.csv
"""
import collections
import csv
import re
import sys


def short(name: str) -> str:
    for anon in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):  # spellings of an anonymous namespace
        name = name.replace(anon, "")
    name = re.sub(r"\(.*$", "", name)          # drop the argument list
    while re.search(r"<[^<>]*>", name):          # and template arguments, innermost first
        name = re.sub(r"<[^<>]*>", "", name)
    return name.replace("void ", "").strip()[:90]


def main(path: str) -> None:
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own log lines are not quoted
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        sys.exit(f"{path}: no kernels profiled")
    head, units = rows[0], rows[1]
    k_name, k_time = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(units[k_time])
    if scale is None:
        sys.exit(f"{path}: unknown time unit {units[k_time]!r}")
    per = collections.defaultdict(lambda: [0, 0.0])
    for r in rows[2:]:
        t = float(r[k_time].replace(",", "")) * scale
        p = per[short(r[k_name])]
        p[0] += 1
        p[1] += t
    total = sum(v[1] for v in per.values())
    n = sum(v[0] for v in per.values())
    print(f"{n} launches, {total:.1f} us of kernel time in total (units: us)")
    print(f"{'launches':>8} {'total':>9} {'mean':>8} {'share':>6}  kernel")
    for name, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{c:8d} {t:9.1f} {t / c:8.2f} {100 * t / total:5.1f}%  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
