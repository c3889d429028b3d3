#!/usr/bin/env python3
"""Turn BenchmarkPPlacement's output, one run per process, into figures.

Each BenchmarkPPlacement line is one process: P on four copies of a
network taken in turn (cN-time: copy N's median time over the copies'),
and each copy's W_hh pages read from DRAM against fresh pages
(cN-whh-dram). Over the processes of a shape this asks how far the copies
of one process differ, and whether that follows where their pages
landed: the correlation of a copy's time with its pages' DRAM time (each
taken over its process's mean), the slope (the share of a page-rate
difference that reaches P's step), and what keeping the fastest pages
would buy (the mean over processes of the copies' mean time over the
time of the copy whose pages read fastest).

Usage:
    for i in $(seq 10); do ./schedule.test -test.run '^$' \\
        -test.bench 'PPlacement/cell=lstm/hidden=1024/layers=1/T=100$' \\
        -test.cpu 1 -test.benchtime 60x; done > out.txt
    python3 scripts/placement.py RUN < out.txt >> docs/data/figures.csv

It writes figures.csv rows (run, subject, metric, value): one subject per
process ("SHAPE, N core(s), process I") and a summary subject per shape
("SHAPE, N core(s)"); with --table, the summary as a Markdown table.
"""

import argparse
import csv
import re
import statistics
import sys

COPIES = 4
LINE = re.compile(r"^BenchmarkPPlacement/cell=(\w+)/hidden=(\d+)/layers=(\d+)/T=(\d+)(?:-(\d+))?\s+\d+\s+(.*)$")


def parse(text):
    """The processes in text: shape, cores and metrics of each line."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        f = m.group(6).split()
        metrics = {f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2)}
        need = ["ns/step", "copy-spread", "ref-dram-GB/s"]
        need += [f"c{c}-{k}" for c in range(COPIES) for k in ("time", "whh-dram")]
        missing = [k for k in need if k not in metrics]
        if missing:
            raise ValueError(f"{line.strip()[:60]}...: no {', '.join(missing)}")
        cell, hidden, layers, T, cores = m.group(1, 2, 3, 4, 5)
        out.append({"shape": f"{cell}/{hidden}/{layers}/{T}", "cores": int(cores or 1), "m": metrics})
    return out


def where(p):
    return f"{p['shape']}, {p['cores']} core{'s' if p['cores'] > 1 else ''}"


def summary(procs):
    """Per shape and cores: the figures over its processes."""
    groups = {}
    for p in procs:
        groups.setdefault(where(p), []).append(p)
    out = {}
    for name, ps in groups.items():
        times, drams = [], []
        for p in ps:
            mean = statistics.fmean(p["m"][f"c{c}-whh-dram"] for c in range(COPIES))
            for c in range(COPIES):
                times.append(p["m"][f"c{c}-time"])
                drams.append(p["m"][f"c{c}-whh-dram"] / mean)
        # What keeping the fastest pages would buy: each process's mean
        # copy time over the time of its copy whose pages read fastest.
        gains = []
        for p in ps:
            best = min(range(COPIES), key=lambda c: p["m"][f"c{c}-whh-dram"])
            gains.append(statistics.fmean(p["m"][f"c{c}-time"] for c in range(COPIES)) / p["m"][f"c{best}-time"])
        spreads = sorted(p["m"]["copy-spread"] for p in ps)
        steps = [p["m"]["ns/step"] / 1e3 for p in ps]
        s = {
            "processes": str(len(ps)),
            "µs/step": f"{min(steps):.1f}-{max(steps):.1f}",
            "slowest/fastest process": f"{max(steps) / min(steps):.2f}",
            "copy spread (median)": f"{statistics.median(spreads):.3f}",
            "copy spread (max)": f"{spreads[-1]:.3f}",
            "W_hh DRAM sd": f"{statistics.pstdev(drams):.3f}",
            "fastest pages' gain": f"{statistics.fmean(gains):.3f}",
        }
        if len(ps) > 1 and statistics.pstdev(drams) > 0 and statistics.pstdev(times) > 0:
            s["r(time, W_hh DRAM)"] = f"{statistics.correlation(drams, times):.2f}"
            s["slope"] = f"{statistics.linear_regression(drams, times).slope:.2f}"
        out[name] = s
    return out


def rows(run, procs):
    """figures.csv rows: every process's figures, then the summary."""
    out = []
    seen = {}
    for p in procs:
        i = seen[where(p)] = seen.get(where(p), 0) + 1
        subject = f"{where(p)}, process {i}"
        m = p["m"]
        out.append([run, subject, "µs/step", f"{m['ns/step'] / 1e3:.1f}"])
        out.append([run, subject, "copy spread", f"{m['copy-spread']:.3f}"])
        out.append([run, subject, "fresh pages GB/s", f"{m['ref-dram-GB/s']:.1f}"])
        for c in range(COPIES):
            out.append([run, subject, f"copy {c} time", f"{m[f'c{c}-time']:.3f}"])
            out.append([run, subject, f"copy {c} W_hh DRAM", f"{m[f'c{c}-whh-dram']:.3f}"])
    for name, s in summary(procs).items():
        for k, v in s.items():
            out.append([run, name, k, v])
    return out


def table(procs):
    sums = summary(procs)
    cols = list(dict.fromkeys(k for s in sums.values() for k in s))
    lines = ["| shape | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, s in sums.items():
        lines.append(f"| {name} | " + " | ".join(s.get(k, "-") for k in cols) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", nargs="?", help="the run id of the rows (runs.csv)")
    ap.add_argument("--table", action="store_true", help="print the summary as a Markdown table")
    a = ap.parse_args(argv)
    procs = parse(sys.stdin.read())
    if not procs:
        sys.exit("placement.py: no BenchmarkPPlacement lines on stdin")
    if a.table:
        print(table(procs))
        return
    if not a.run:
        sys.exit("placement.py: give the run id, or --table")
    csv.writer(sys.stdout, lineterminator="\n").writerows(rows(a.run, procs))


if __name__ == "__main__":
    main()
