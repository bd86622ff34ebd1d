#!/usr/bin/env python3
"""Sums an `ncu --csv --page raw` log per kernel (tools/gpu_check.sh profile).

Prints each kernel's launch count, total and mean device time, sorted by total, and the sum over all launches:
set against the step's wall time it says how much of the step is kernel work and how much launch gaps. When the
log has `dram__bytes_read.sum` (gpu_check.sh profile asks for it), each kernel also gets its DRAM bytes and read
rate, and a second table splits the kernels by launch grid: the per-shape view that shows which launches are far
from the copy rate (a kernel's fixed ramp and tail dominate a short launch).
Usage: kernel_profile.py PROFILE.csv
"""
import collections
import csv
import re
import sys

TIME_SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}  # -> us
BYTE_SCALE = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def short(name: str) -> str:
    for anon in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):  # spellings of an anonymous namespace
        name = name.replace(anon, "")
    name = re.sub(r"\(.*$", "", name)          # drop the argument list
    while re.search(r"<[^<>]*>", name):          # and template arguments, innermost first
        name = re.sub(r"<[^<>]*>", "", name)
    return name.replace("void ", "").strip()[:90]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def main(path: str) -> None:
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own log lines are not quoted
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        sys.exit(f"{path}: no kernels profiled")
    head, units = rows[0], rows[1]
    k_name, k_time = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    t_scale = TIME_SCALE.get(units[k_time])
    if t_scale is None:
        sys.exit(f"{path}: unknown time unit {units[k_time]!r}")
    k_bytes = head.index("dram__bytes_read.sum") if "dram__bytes_read.sum" in head else None
    b_scale = BYTE_SCALE.get(units[k_bytes]) if k_bytes is not None else None
    if k_bytes is not None and b_scale is None:
        sys.exit(f"{path}: unknown byte unit {units[k_bytes]!r}")
    k_grid = head.index("launch__grid_size") if "launch__grid_size" in head else None
    per = collections.defaultdict(lambda: [0, 0.0, 0.0])
    per_grid = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows[2:]:
        t = number(r[k_time]) * t_scale
        b = number(r[k_bytes]) * b_scale if k_bytes is not None else 0.0
        name = short(r[k_name])
        for key, table in ((name, per), ((name, r[k_grid]) if k_grid is not None else None, per_grid)):
            if key is None:
                continue
            table[key][0] += 1
            table[key][1] += t
            table[key][2] += b
    total = sum(v[1] for v in per.values())
    n = sum(v[0] for v in per.values())
    with_bytes = k_bytes is not None
    gb = sum(v[2] for v in per.values()) / 1e9
    print(f"{n} launches, {total:.1f} us of kernel time in total (units: us)" +
          (f", {gb:.3f} GB read from DRAM ({gb * 1e3 / total:.2f} TB/s over the kernel time)" if with_bytes else ""))
    rate = lambda b, t: f" {b / 1e6:10.2f} {b / t / 1e6 if t else 0:6.2f}" if with_bytes else ""
    print(f"{'launches':>8} {'total':>9} {'mean':>8} {'share':>6}" + (f" {'MB':>10} {'TB/s':>6}" if with_bytes else "") +
          "  kernel")
    for name, (c, t, b) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{c:8d} {t:9.1f} {t / c:8.2f} {100 * t / total:5.1f}%" + rate(b, t) + f"  {name}")
    if k_grid is None:
        return
    print(f"\nby launch grid (the 40 largest totals):")
    print(f"{'launches':>8} {'grid':>8} {'mean':>8}" + (f" {'MB/launch':>10} {'TB/s':>6}" if with_bytes else "") + "  kernel")
    for (name, grid), (c, t, b) in sorted(per_grid.items(), key=lambda kv: -kv[1][1])[:40]:
        print(f"{c:8d} {grid:>8} {t / c:8.2f}" + (f" {b / c / 1e6:10.2f} {b / t / 1e6 if t else 0:6.2f}" if with_bytes else "") +
              f"  {name}")


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except BrokenPipeError:  # the reader (`| head`) has what it wanted
        sys.stderr.close()
