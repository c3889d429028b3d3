#!/usr/bin/env python3
"""Compare two builds' Go benchmarks, run in turn: old, new, old, new, ...

Each build is a test binary (go test -c -o old.test ./pkg/ on one commit,
the same on the other). The two run alternately --rounds times with the
same -test.bench, -test.cpu and -test.benchtime, GOMAXPROCS set to the
CPU count, so that whatever else the machine does hits both alike. For
every benchmark the script prints the median of each build's rounds, its
range, and old/new (above 1: the new build is faster), in a Markdown
table, with the load average and the time before and after.

The figure compared is the first of ns/step (the Table I benchmarks) or
ns/op found on the benchmark's line; --metric picks another unit that
the benchmarks report (e.g. GFLOP/s, MB/s, for which higher is faster;
cpu-ns/step, the Table I benchmarks' CPU time per step, and cpu-ns/op,
the tree benchmarks' CPU time per batch: lower).

Usage:
    go test -c -o /tmp/old.test ./schedule/   # on the old commit
    go test -c -o /tmp/new.test ./schedule/   # on the new one
    python3 scripts/ab_bench.py /tmp/old.test /tmp/new.test \\
        --bench 'TableIP/cell=lstm/hidden=256/layers=4/T=10$/sched=P$' --cpu 1 --rounds 9
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rounds  # noqa: E402

LOWER_IS_FASTER = ("ns/step", "ns/op", "cpu-ns/step", "cpu-ns/op")
LINE = re.compile(r"^(Benchmark\S+)\s+\d+\s+(.*)$")


def parse(text, metric=None):
    """{benchmark name: value} from go test -bench output.

    The value is the figure before `metric`, or before ns/step or else
    ns/op when metric is None. Lines without it are skipped; a name seen
    twice keeps its last value.
    """
    out = {}
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        fields = m.group(2).split()
        pairs = dict(zip(fields[1::2], fields[0::2]))
        for unit in ([metric] if metric else LOWER_IS_FASTER):
            if unit in pairs:
                try:
                    out[m.group(1)] = float(pairs[unit])
                except ValueError:
                    pass
                break
    return out


def table(results, builds, metric=None):
    """The Markdown table of medians, ranges and old/new speed ratios."""
    lower = metric is None or metric in LOWER_IS_FASTER
    unit = metric or "time"
    lines = [f"| benchmark | {builds[0]} median ({unit}) | range | {builds[1]} median | range | speed-up new/old |",
             "|---|---:|---:|---:|---:|---:|"]
    def fmt(v):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"

    for name, per in results.items():
        if any(not per.get(b) for b in builds):
            continue
        med = [statistics.median(per[b]) for b in builds]
        ratio = med[0] / med[1] if lower else med[1] / med[0]
        rng = [f"{fmt(min(per[b]))}-{fmt(max(per[b]))}" for b in builds]
        lines.append(f"| {name} | {fmt(med[0])} | {rng[0]} | {fmt(med[1])} | {rng[1]} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


def run_binary(path, args):
    env = dict(os.environ, GOMAXPROCS=str(args.cpu))
    cmd = [path, "-test.run", "^$", "-test.bench", args.bench, "-test.cpu", str(args.cpu),
           "-test.benchtime", args.benchtime]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"ab_bench: {' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def main(argv=None, out=sys.stdout, runner=run_binary):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="test binary of the old build")
    ap.add_argument("new", help="test binary of the new build")
    ap.add_argument("--bench", required=True, help="-test.bench pattern")
    ap.add_argument("--cpu", type=int, default=1, help="-test.cpu and GOMAXPROCS (default: 1)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, each running old then new (default: 5)")
    ap.add_argument("--benchtime", default="300ms", help="-test.benchtime (default: %(default)s)")
    ap.add_argument("--metric", help="unit to compare instead of ns/step or ns/op (higher is faster, "
                                     "but for cpu-ns/step and cpu-ns/op)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.cpu < 1:
        ap.error("--rounds and --cpu must be >= 1")
    builds = ("old", "new")
    start = bench_rounds.stamp()
    results = {}
    for r in range(args.rounds):
        print(f"ab_bench: round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
        for build, path in zip(builds, (args.old, args.new)):
            for name, value in parse(runner(path, args), args.metric).items():
                results.setdefault(name, {}).setdefault(build, []).append(value)
    if not results:
        raise SystemExit("ab_bench: no benchmark results; check --bench")
    out.write(table(results, builds, args.metric))
    out.write(f"\n{args.rounds} alternating rounds, -test.cpu {args.cpu}, -test.benchtime {args.benchtime}; "
              + bench_rounds.load_note(start, bench_rounds.stamp()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
