#!/usr/bin/env python3
"""The Go tree executors beside PyTorch's, interleaved, in one table.

Model and trees are those of schedule's BenchmarkTreeLSTM and of
scripts/torch_tree.py bench: a Binary TreeLSTM (embeddings 300, hidden
150, vocabulary 5000, class probabilities at every node) on the SST-like
trees of schedule/testdata/trees/sstlike.txt, at batch 1, 10 and 25.

Go: the recursive and the depth-batched executor, a plan per batch from
the program's released plans (TreeProgram.Acquire, Run, Release), with
GOMAXPROCS = the thread count (-test.cpu), so both executors use that many
workers. PyTorch 1.13 (Debian's, on OpenBLAS): per_node walks each tree
node by node, depth_batched runs one Linear per height (TensorFlow Fold's
dynamic batching), with torch's threads and OpenBLAS's pool pinned. At one
thread both are 1; at two threads PyTorch runs three configurations (torch
x OpenBLAS threads: 2x2, 1x2, 2x1) and the table keeps, figure by figure,
the fastest, naming it.

The runs are interleaved: every round runs, for each thread count, the Go
benchmark and each PyTorch configuration one after the other (Go first in
odd rounds, last in even ones), so that other processes on a shared
machine weigh on both sides alike. After --rounds rounds, a row (a
thread count and a batch) has settled when each of its figures (Go
recursive, Go depth-batched, and PyTorch per-node and depth-batched in the
configuration the table shows) has two rounds that agree within --agree
percent (|a-b| / min(a,b); default 10, 0: no reruns); the rows that have
not are rerun, only they, round by round, until they settle or have had
--max-rounds rounds (default --rounds + 4). Each figure is the median of
all its rounds; the rounds column counts them, with a † on a row that
never settled (named in the notes); the spread column is the largest
max/min over the rounds of the row's figures. The load average is read
before and after every run and printed with the table, with the 1-minute
load and the UTC time before the first round and after the last: figures
taken while other processes ran are from a loaded machine and say where we
stand, not what an idle machine gives.

The ratios are best Go (the faster executor) over PyTorch per-node and
over PyTorch depth-batched; the targets (issue 16) are >= 5x per-node at
batch 1 and >= 2x depth-batched at batch 25, at 1 and 2 threads.

Usage (from anywhere; PyTorch is run with /usr/bin/python3):

    python3 scripts/tree_bench.py                       # 3 rounds, 1 and 2 threads
    python3 scripts/tree_bench.py --rounds 5 --benchtime 2s --min-time 2
    python3 scripts/tree_bench.py --agree 5 --max-rounds 10
    python3 scripts/tree_bench.py --go-output go.txt --torch-output torch.txt   # re-render

--go-output and --torch-output render captured outputs instead of running
(each a concatenation of runs, as --save writes them); they are not rerun,
but whether each row's rounds agree is checked and reported all the same.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))
import bench_rounds  # noqa: E402

BATCHES = (1, 10, 25)
EXECUTORS = ("recursive", "depth_batched")
IMPLS = ("per_node", "depth_batched")
TORCH_CONFIGS = {1: [(1, 1)], 2: [(2, 2), (1, 2), (2, 1)]}
FIGURES = "trees/s of Go recursive and depth-batched, PyTorch per-node and depth-batched as shown"

# BenchmarkTreeLSTM/executor=depth_batched/batch=25-2   262   4778022 ns/op   5232 trees/s ...
# (the -N suffix is GOMAXPROCS, absent when it is 1)
GO_RESULT = re.compile(
    r"^BenchmarkTreeLSTM/executor=(?P<ex>[a-z_]+)/batch=(?P<batch>\d+)(?:-(?P<procs>\d+))?\s+\d+\s+(?P<metrics>.*)$")


def parse_go(text):
    """Go benchmark output -> {(threads, executor, batch): [trees/s, ...]}."""
    out = {}
    for line in text.splitlines():
        m = GO_RESULT.match(line.strip())
        if not m:
            continue
        fields = m.group("metrics").split()
        tps = None
        for value, unit in zip(fields[::2], fields[1::2]):
            if unit == "trees/s":
                tps = float(value)
        if tps is None:
            continue
        key = (int(m.group("procs") or 1), m.group("ex"), int(m.group("batch")))
        out.setdefault(key, []).append(tps)
    return out


def parse_torch(text):
    """torch_tree.py bench output -> {(threads, (torch, blas), impl, batch): [trees/s, ...]}.

    A run at torch threads t and OpenBLAS threads b counts for max(t, b)
    threads."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        t, b = int(r["threads"]), int(r.get("blas_threads", r["threads"]))
        key = (max(t, b), (t, b), r["impl"], int(r["batch"]))
        out.setdefault(key, []).append(float(r["trees_per_s"]))
    return out


def merge(into, more):
    for k, v in more.items():
        into.setdefault(k, []).extend(v)


def spread(values):
    return max(values) / min(values) if values and min(values) > 0 else float("nan")


def torch_best(torch, n, impl, B):
    """(median, (torch, OpenBLAS threads), values) of PyTorch's fastest configuration, or None."""
    best = None
    for cfg in TORCH_CONFIGS.get(n, [(n, n)]):
        v = torch.get((n, cfg, impl, B), [])
        if v and (best is None or statistics.median(v) > best[0]):
            best = (statistics.median(v), cfg, v)
    return best


def row_series(go, torch, row):
    """A row's figures, {name: [trees/s per round]}: the Go executors and PyTorch's shown configurations."""
    n, B = row
    series = {f"Go {ex}": go.get((n, ex, B), []) for ex in EXECUTORS}
    for impl in IMPLS:
        series[f"PyTorch {impl}"] = (torch_best(torch, n, impl, B) or (None, None, []))[2]
    return series


def row_rounds(go, torch, row):
    """How many rounds a row has: the most of any of its figures."""
    return max(len(v) for v in row_series(go, torch, row).values())


def row_name(row):
    return f"{row[0]} thread(s) batch {row[1]}"


def table(go, torch, threads, loads=None, notes=(), rounds=None):
    """The Markdown table (and notes) of medians over the rounds; rounds: {(threads, batch): rounds column}."""
    lines = []
    loads = [x for x in loads or [] if x is not None]
    if loads:
        lo, hi = min(loads), max(loads)
        lines.append(f"Load average (1 min) read before and after every run: {lo:.2f} to {hi:.2f} "
                     f"on {os.cpu_count()} CPUs."
                     + (" Other processes were running: these figures are from a loaded machine."
                        if hi >= 0.5 else ""))
        lines.append("")
    lines.append("| threads | batch | Go recursive | Go depth-batched | PyTorch per-node | PyTorch depth-batched "
                 "| best Go / per-node | best Go / depth-batched | spread |" + (" rounds |" if rounds else ""))
    lines.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if rounds else ""))
    verdicts = []
    for n in threads:
        for B in BATCHES:
            g = {ex: go.get((n, ex, B), []) for ex in EXECUTORS}
            gm = {ex: statistics.median(v) if v else None for ex, v in g.items()}
            pt = {}
            spreads = [spread(v) for v in g.values() if v]
            for impl in IMPLS:
                best = torch_best(torch, n, impl, B)
                if best:
                    pt[impl] = best
                    spreads.append(spread(best[2]))
            bg = max(((v, ex) for ex, v in gm.items() if v), default=None)

            def fmt_go(ex):
                return f"{gm[ex]:.0f}" if gm[ex] else "-"

            def fmt_pt(impl):
                if impl not in pt:
                    return "-"
                v, cfg, _ = pt[impl]
                return f"{v:.0f}" + (f" ({cfg[0]}x{cfg[1]})" if n > 1 else "")

            def ratio(impl):
                if not bg or impl not in pt:
                    return "-"
                return f"{bg[0] / pt[impl][0]:.2f}x"

            sp = max((s for s in spreads if s == s), default=float("nan"))
            lines.append(f"| {n} | {B} | {fmt_go('recursive')} | {fmt_go('depth_batched')} | {fmt_pt('per_node')} "
                         f"| {fmt_pt('depth_batched')} | {ratio('per_node')} | {ratio('depth_batched')} "
                         f"| {sp:.2f} |" + (f" {rounds[(n, B)]} |" if rounds else ""))
            if B == 1 and bg and "per_node" in pt:
                r = bg[0] / pt["per_node"][0]
                rec = f"; recursive alone {gm['recursive'] / pt['per_node'][0]:.2f}x" if gm["recursive"] else ""
                verdicts.append(f"{n} thread(s), batch 1: best Go ({bg[1]}) {r:.2f}x PyTorch per-node "
                                f"(target 5x): {'met' if r >= 5 else 'missed'}{rec}")
            if B == 25 and bg and "depth_batched" in pt:
                r = bg[0] / pt["depth_batched"][0]
                verdicts.append(f"{n} thread(s), batch 25: best Go ({bg[1]}) {r:.2f}x PyTorch depth-batched "
                                f"(target 2x): {'met' if r >= 2 else 'missed'}")
    lines.append("")
    lines.append("Trees/s, median of the rounds; at 2 threads PyTorch's figure is its fastest configuration "
                 "(torch x OpenBLAS threads). Spread: the largest max/min over the rounds of the row's figures.")
    for v in verdicts:
        lines.append(f"- {v}")
    for note in notes:
        lines.append(f"- {note}")
    return "\n".join(lines)


def run(cmd, cwd, env=None, log=None):
    """Runs cmd, returns its stdout; the load average before and after goes to log."""
    before = bench_rounds.loadavg()
    res = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    after = bench_rounds.loadavg()
    if log is not None:
        log.extend([before, after])
    print(f"  load {bench_rounds.fmt_load(before)} -> {bench_rounds.fmt_load(after)}: "
          f"{' '.join(str(c) for c in cmd)}", file=sys.stderr, flush=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(str(c) for c in cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return res.stdout


def go_pattern(batches):
    """-test.bench for BenchmarkTreeLSTM at these batches, both executors."""
    return "^BenchmarkTreeLSTM$/^executor=/^batch=(" + "|".join(map(str, batches)) + ")$"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every row (default: 3)")
    bench_rounds.add_arguments(ap, "row")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (1 and 2)")
    ap.add_argument("--benchtime", default="1s", help="go test -benchtime for each Go figure")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per PyTorch figure")
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with PyTorch")
    ap.add_argument("--go", default="go", help="the go command")
    ap.add_argument("--save", help="directory to write the raw outputs to (go.txt, torch.txt)")
    ap.add_argument("--go-output", help="render this captured Go output instead of running")
    ap.add_argument("--torch-output", help="render this captured PyTorch output instead of running")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if not threads or any(t not in TORCH_CONFIGS for t in threads) or args.rounds < 1:
        ap.error("--threads takes 1 and/or 2; --rounds at least 1")
    bench_rounds.check_arguments(ap, args)
    rows = [(n, B) for n in threads for B in BATCHES]

    def series(row):
        return row_series(go, torch, row)

    if args.go_output or args.torch_output:
        go = parse_go(Path(args.go_output).read_text()) if args.go_output else {}
        torch = parse_torch(Path(args.torch_output).read_text()) if args.torch_output else {}
        counts = {row: row_rounds(go, torch, row) for row in rows}
        labels, notes = bench_rounds.settle_report(rows, counts, series, args.agree, what="row", name=row_name,
                                                   figures=FIGURES)
        print(table(go, torch, threads, notes=notes, rounds=labels))
        return 0

    loads = []
    go_raw, torch_raw = [], []
    go, torch = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "schedule.test"
        subprocess.run([args.go, "test", "-c", "-o", str(binary), "./schedule"], cwd=REPO, check=True)

        def run_round(subset, r):
            print(f"round {r} ({len(subset)} of {len(rows)} row(s))", file=sys.stderr, flush=True)
            for n in threads:
                batches = [B for m, B in subset if m == n]
                if not batches:
                    continue

                def go_run():
                    out = run([str(binary), "-test.run", "^$", "-test.bench", go_pattern(batches),
                               "-test.benchtime", args.benchtime, "-test.cpu", str(n)],
                              cwd=REPO / "schedule", log=loads)
                    go_raw.append(out)
                    merge(go, parse_go(out))

                def torch_runs():
                    for t, b in TORCH_CONFIGS[n]:
                        out = run([args.python, str(SCRIPTS / "torch_tree.py"), "bench", "--threads", str(t),
                                   "--blas-threads", str(b), "--min-time", str(args.min_time), "--repeats", "1",
                                   "--batch"] + [str(B) for B in batches], cwd=REPO, log=loads)
                        torch_raw.append(out)
                        merge(torch, parse_torch(out))

                for step in ((go_run, torch_runs) if r % 2 == 1 else (torch_runs, go_run)):
                    step()

        start = bench_rounds.stamp()
        counts = bench_rounds.rerun(rows, args.rounds, args.max_rounds, args.agree, run_round, series)
        end = bench_rounds.stamp()
    if args.save:
        d = Path(args.save)
        d.mkdir(parents=True, exist_ok=True)
        (d / "go.txt").write_text("".join(go_raw))
        (d / "torch.txt").write_text("".join(torch_raw))
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    labels, notes = bench_rounds.settle_report(rows, counts, series, args.agree, args.max_rounds, what="row",
                                               name=row_name, figures=FIGURES)
    print(f"Trees side by side, {start[0]}, {cpu}, {args.rounds} round(s) of every row, "
          f"Go -benchtime {args.benchtime}, PyTorch {args.min_time:g} s per figure.")
    print()
    print(table(go, torch, threads, loads, notes + [bench_rounds.load_note(start, end)], labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
