#!/usr/bin/env python3
"""Compare the Go Table I benchmark with PyTorch in one Markdown table.

Runs, one after the other and with the same number of threads,

    GOMAXPROCS=N go test ./schedule/ -run '^$' -bench <shapes> -benchtime 200ms -cpu N
    /usr/bin/python3 scripts/bench_torch.py <shapes> --threads N

over the shapes chosen by --cells, --hidden, --layers and --lengths (the DRE
paper's Table I by default) and prints, per shape, the Go time per step
under schedules A and A+, PyTorch's time per step, the ratios
PyTorch/A and PyTorch/A+ (above 1 the Go code is faster) and the bytes of
weights each schedule touches per step.

The Go sub-benchmarks are named
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A (or sched=A+) and
report the custom metrics ns/step and B/step.

If PyTorch cannot be run, the Go columns are printed with a note saying so.
--go-output and --torch-output read captured outputs instead of running the
benchmarks, to re-render a table or to test the parsing.

Usage:
    python3 scripts/bench_compare.py --hidden 64,512 --layers 1,2 --lengths 1,100
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))
import bench_torch  # noqa: E402  (flag parsing and defaults only; it imports torch lazily)

SCHEDULES = ("A", "A+")

# One result line of `go test -bench`, e.g.
# BenchmarkTableI/cell=gru/hidden=64/layers=2/T=10/sched=A+-4   1000   123456 ns/op   12345 ns/step   98304 B/step
# The -4 is GOMAXPROCS, appended only when it is not 1.
GO_RESULT = re.compile(
    r"^BenchmarkTableI/cell=(?P<cell>[a-z]+)/hidden=(?P<hidden>\d+)/layers=(?P<layers>\d+)"
    r"/T=(?P<T>\d+)/sched=(?P<sched>A\+?)(?:-(?P<procs>\d+))?\s+(?P<iters>\d+)\s+(?P<metrics>.+)$"
)


def go_bench_regex(cells, hidden, layers, lengths):
    """The -bench pattern that selects exactly the requested shapes, both schedules."""
    def alt(values):
        return "(" + "|".join(re.escape(str(v)) for v in values) + ")"
    return "/".join([
        "^BenchmarkTableI$",
        f"^cell={alt(cells)}$",
        f"^hidden={alt(hidden)}$",
        f"^layers={alt(layers)}$",
        f"^T={alt(lengths)}$",
        f"^sched={alt(SCHEDULES)}$",
    ])


def parse_go_output(text):
    """Parse go test -bench output.

    Returns ({(cell, hidden, layers, T, sched): {"ns/step": .., "B/step": .., ...}}, info)
    where repeated results of one benchmark (-count > 1) are reduced to
    their median and info holds the goos/goarch/cpu header lines.
    """
    samples = {}
    info = {}
    for line in text.splitlines():
        line = line.strip()
        for key in ("goos", "goarch", "cpu"):
            if line.startswith(key + ":"):
                info[key] = line.split(":", 1)[1].strip()
        m = GO_RESULT.match(line)
        if not m:
            continue
        fields = m.group("metrics").split()
        metrics = {}
        for value, unit in zip(fields[0::2], fields[1::2]):
            try:
                metrics[unit] = float(value)
            except ValueError:
                continue
        key = (m.group("cell"), int(m.group("hidden")), int(m.group("layers")),
               int(m.group("T")), m.group("sched"))
        samples.setdefault(key, []).append(metrics)
    results = {}
    for key, runs in samples.items():
        units = set().union(*runs)
        results[key] = {u: statistics.median(r[u] for r in runs if u in r) for u in units}
    return results, info


def parse_torch_output(text):
    """Parse bench_torch.py JSON lines into {(cell, hidden, layers, T): ns_per_step}."""
    results = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        results[(rec["cell"], rec["hidden"], rec["layers"], rec["T"])] = rec["ns_per_step"]
    return results


def go_duration_seconds(text):
    """Seconds in a Go -benchtime duration such as 200ms or 1.5s; None for counts like 100x."""
    m = re.fullmatch(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m)", text.strip())
    if not m:
        return None
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]
    return float(m.group(1)) * scale


def run_go(args):
    cmd = ["go", "test", "./schedule/", "-run", "^$",
           "-bench", go_bench_regex(args.cells, args.hidden, args.layers, args.lengths),
           "-benchtime", args.benchtime, "-cpu", str(args.threads), "-count", str(args.count)]
    env = dict(os.environ, GOMAXPROCS=str(args.threads))
    print("bench_compare: GOMAXPROCS=%d %s" % (args.threads, " ".join(_quote(c) for c in cmd)), file=sys.stderr)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Benchmark"):
            print("  " + line.rstrip(), file=sys.stderr, flush=True)
    if proc.wait() != 0:
        sys.stderr.write("".join(lines))
        raise SystemExit(f"bench_compare: go test failed with status {proc.returncode}")
    return "".join(lines)


def run_torch(args):
    """Return (stdout, None) or (None, reason PyTorch could not be run)."""
    python = args.python or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
    if not shutil.which(python):
        return None, f"{python} not found"
    min_time = go_duration_seconds(args.benchtime) or 0.2
    cmd = [python, str(SCRIPTS / "bench_torch.py"),
           "--cells", ",".join(args.cells), "--hidden", ",".join(map(str, args.hidden)),
           "--layers", ",".join(map(str, args.layers)), "--lengths", ",".join(map(str, args.lengths)),
           "--threads", str(args.threads), "--min-time", str(min_time)]
    print("bench_compare: " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return None, last[0].removeprefix("bench_torch: ")
    return proc.stdout, None


def _quote(s):
    return s if re.fullmatch(r"[\w./=,:+-]+", s) else "'" + s.replace("'", "'\\''") + "'"


def _num(v):
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _ratio(torch_ns, go_ns):
    if torch_ns is None or not go_ns:
        return "n/a"
    return f"{torch_ns / go_ns:.2f}"


def render_table(shapes, go, torch, notes):
    """The Markdown table for shapes [(cell, hidden, layers, T)], then notes."""
    header = ["cell", "hidden", "layers", "T", "A ns/step", "A+ ns/step", "PyTorch ns/step",
              "PyTorch/A", "PyTorch/A+", "A B/step", "A+ B/step"]
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for shape in shapes:
        a = go.get(shape + ("A",), {})
        ap = go.get(shape + ("A+",), {})
        t = torch.get(shape) if torch is not None else None
        cell, hidden, layers, steps = shape
        row = [cell, str(hidden), str(layers), str(steps),
               _num(a.get("ns/step")), _num(ap.get("ns/step")), _num(t),
               _ratio(t, a.get("ns/step")), _ratio(t, ap.get("ns/step")),
               _num(a.get("B/step")), _num(ap.get("B/step"))]
        out.append("| " + " | ".join(row) + " |")
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=bench_torch.int_list, default=bench_torch.HIDDEN)
    ap.add_argument("--layers", type=bench_torch.int_list, default=bench_torch.LAYERS)
    ap.add_argument("--cells", type=bench_torch.cell_list, default=bench_torch.CELLS)
    ap.add_argument("--lengths", type=bench_torch.int_list, default=bench_torch.LENGTHS)
    ap.add_argument("--threads", type=int, default=1, help="GOMAXPROCS, -cpu and torch threads (default: 1)")
    ap.add_argument("--benchtime", default="200ms",
                    help="go test -benchtime; also PyTorch's least time per repeat (default: %(default)s)")
    ap.add_argument("--count", type=int, default=1, help="go test -count; the median is used (default: 1)")
    ap.add_argument("--python", help="interpreter with torch (default: /usr/bin/python3)")
    ap.add_argument("--go-output", type=Path, metavar="FILE", help="parse this go test output instead of running go")
    ap.add_argument("--torch-output", type=Path, metavar="FILE",
                    help="parse these bench_torch.py JSON lines instead of running PyTorch")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch; print the Go columns only")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.count < 1:
        ap.error("--threads and --count must be >= 1")
    return args


def main(argv=None, out=sys.stdout):
    args = parse_args(argv)
    shapes = [(c, h, l, t) for c in args.cells for h in args.hidden for l in args.layers for t in args.lengths]

    go_text = args.go_output.read_text() if args.go_output else run_go(args)
    go, info = parse_go_output(go_text)
    if not go:
        raise SystemExit("bench_compare: no BenchmarkTableI results in the go test output")

    notes = []
    if args.torch_output:
        torch, reason = parse_torch_output(args.torch_output.read_text()), None
    elif args.no_torch:
        torch, reason = None, "skipped with --no-torch"
    else:
        text, reason = run_torch(args)
        torch = parse_torch_output(text) if text is not None else None
    if torch is None:
        notes.append(f"PyTorch was unavailable: {reason}; its columns are n/a.")

    missing = [s for s in shapes if not any(s + (k,) in go for k in SCHEDULES)]
    if missing:
        notes.append(f"{len(missing)} requested shape(s) had no Go result.")
    machine = ", ".join(f"{k} {info[k]}" for k in ("goos", "goarch", "cpu") if k in info)
    notes.append(f"Threads: {args.threads}; Go -benchtime {args.benchtime}"
                 + (f"; {machine}" if machine else "") + ".")
    out.write(render_table(shapes, go, torch, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
