#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations (a `ncu --csv --page raw` log with the metric
gpu__time_duration.sum) by kernel name, for `gpu/run.sh kprof`.

usage: kprof.py NCU_CSV TOKENS

TOKENS: the decode steps the profiled run made (llama-bench --no-warmup -p 0 -n TOKENS -r 1).
Prints the kernels' time a token in all, then one line per kernel name, largest total
first: launches, time a token and a launch's mean in microseconds, share; then the 16
largest by kernel and grid size (which matrices cost most). Exit 1 when the log holds no kernel row (ncu
could not read the counters, or the window missed every launch), saying so.
"""
import csv
import sys

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9}


def rows(path):
    """The CSV part of an ncu log: the lines from the header (which names `Kernel Name`) on."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    if start is None:
        return None, []
    table = list(csv.reader(lines[start:]))
    return table[0], table[1:]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    header, body = rows(sys.argv[1])
    if header is None or "gpu__time_duration.sum" not in header:
        print(f"kprof: no kernel rows in {sys.argv[1]} (did ncu read the counters?)")
        sys.exit(1)
    tokens = int(sys.argv[2])
    name_col, dur_col = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    scale = 1.0
    grid_col = header.index("Grid Size") if "Grid Size" in header else None
    totals, by_grid = {}, {}
    launches = 0
    for r in body:
        if len(r) <= max(name_col, dur_col):
            continue
        value = r[dur_col].replace(",", "")
        if r[dur_col] in UNIT_NS:  # the units row that follows the header
            scale = UNIT_NS[r[dur_col]]
            continue
        try:
            ns = float(value) * scale
        except ValueError:
            continue
        name = r[name_col].split("(")[0].strip()
        n, t = totals.get(name, (0, 0.0))
        totals[name] = (n + 1, t + ns)
        if grid_col is not None:
            key = f"{name} {r[grid_col]}"
            n, t = by_grid.get(key, (0, 0.0))
            by_grid[key] = (n + 1, t + ns)
        launches += 1
    if not launches:
        print(f"kprof: no kernel rows in {sys.argv[1]}")
        sys.exit(1)
    whole = sum(t for _, t in totals.values())
    print(f"kprof: {launches} launches over {tokens} tokens ({launches / tokens:.1f} a token); "
          f"kernels {whole / 1e3 / tokens:.1f} us a token")
    for table, limit in ((totals, None), (by_grid, 16)):
        if table is by_grid:
            print("  by kernel and grid:")
        for name, (n, t) in sorted(table.items(), key=lambda kv: -kv[1][1])[:limit]:
            print(f"  {name:56s} {n:6d} launches  {t / 1e3 / tokens:8.1f} us a token  "
                  f"{t / n / 1e3:7.2f} us each  {100 * t / whole:5.1f} %")


if __name__ == "__main__":
    main()
