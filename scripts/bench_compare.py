#!/usr/bin/env python3
"""Compare the Go Table I benchmark with PyTorch and ONNX Runtime in one Markdown table.

Runs, one after the other and with the same number of threads,

    GOMAXPROCS=N go test ./schedule/ -run '^$' -bench <shapes> -benchtime 200ms -cpu N
    /usr/bin/python3 scripts/bench_torch.py <shapes> --threads N
    node scripts/ort_bench.js --models DIR <shapes> --threads N      (with --onnx)

over the shapes chosen by --cells, --hidden, --layers and --lengths (the DRE
paper's Table I by default) and prints, per shape, the Go time per step
under schedules A, A+ and P (partitioned over N cores; float32 and bf16
weights), PyTorch's time per step, the ratios PyTorch/schedule (above 1
the Go code is faster), the fastest float32 schedule and its ratio, and
the bytes of weights each schedule touches per step. A summary follows:
the median and smallest ratio of the best float32 schedule (and of the
best with bf16 allowed), and the shapes below 2x.

With --rounds R the two benchmarks alternate R times (Go, PyTorch, Go,
PyTorch, ...) and each figure is the median of its R results, so that a
noisy neighbour on a shared machine hits both sides alike.

The Go sub-benchmarks are named
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A (or sched=A+) and
BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=10/sched=P (or sched=Pbf16)
and report the custom metrics ns/step and B/step.

With --onnx, ONNX Runtime (its CPU build, through onnxruntime-node) runs
the same shapes: scripts/bench_onnx.py first exports them with Debian's
PyTorch into --onnx-models (kept between runs), then scripts/ort_bench.js
times them with intra-op threads = N, one session per model reused across
calls, after checking each model's output against PyTorch's. The table
gains ORT ns/step and ORT/best f32 (above 1 the Go code is faster), and the
notes its per-call floor (a session that adds 1 to 64 floats) and the
shapes with T >= 10 below 1.25x. onnxruntime-node is installed outside the
repository (npm install --ignore-scripts onnxruntime-node in a scratch
directory) and found through --ort-modules or NODE_PATH.

If PyTorch or ONNX Runtime cannot be run, the other columns are printed
with a note saying so. --go-output, --torch-output and --ort-output read
captured outputs instead of running the benchmarks, to re-render a table or
to test the parsing.

Usage:
    python3 scripts/bench_compare.py --hidden 64,512 --layers 1,2 --lengths 1,100
    python3 scripts/bench_compare.py --onnx --ort-modules /tmp/ort/node_modules --rounds 3 --threads 2
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))
import bench_torch  # noqa: E402  (flag parsing and defaults only; it imports torch lazily)

SCHEDULES = ("A", "A+", "P", "Pbf16")
F32_SCHEDULES = ("A", "A+", "P")

# One result line of `go test -bench`, e.g.
# BenchmarkTableI/cell=gru/hidden=64/layers=2/T=10/sched=A+-4   1000   123456 ns/op   12345 ns/step   98304 B/step
# The -4 is GOMAXPROCS, appended only when it is not 1.
GO_RESULT = re.compile(
    r"^BenchmarkTableIP?/cell=(?P<cell>[a-z]+)/hidden=(?P<hidden>\d+)/layers=(?P<layers>\d+)"
    r"/T=(?P<T>\d+)/sched=(?P<sched>A\+?|Pbf16|P)(?:-(?P<procs>\d+))?\s+(?P<iters>\d+)\s+(?P<metrics>.+)$"
)


def go_bench_regex(cells, hidden, layers, lengths, schedules=SCHEDULES):
    """The -bench pattern that selects exactly the requested shapes and schedules.

    A and A+ are sub-benchmarks of BenchmarkTableI, P and Pbf16 of
    BenchmarkTableIP; a top-level pattern that names only one of them keeps
    go test from running the other's shapes at all.
    """
    def alt(values):
        return "(" + "|".join(re.escape(str(v)) for v in values) + ")"
    tops = []
    if any(s in ("A", "A+") for s in schedules):
        tops.append("BenchmarkTableI")
    if any(s in ("P", "Pbf16") for s in schedules):
        tops.append("BenchmarkTableIP")
    top = "^" + tops[0] + "$" if len(tops) == 1 else "^(" + "|".join(tops) + ")$"
    return "/".join([
        top,
        f"^cell={alt(cells)}$",
        f"^hidden={alt(hidden)}$",
        f"^layers={alt(layers)}$",
        f"^T={alt(lengths)}$",
        f"^sched={alt(schedules)}$",
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
    """Parse bench_torch.py JSON lines into {(cell, hidden, layers, T): ns_per_step}.

    A shape timed more than once (several rounds) gets the median.
    """
    samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        samples.setdefault((rec["cell"], rec["hidden"], rec["layers"], rec["T"]), []).append(rec["ns_per_step"])
    return {k: statistics.median(v) for k, v in samples.items()}


def parse_ort_output(text):
    """Parse ort_bench.js JSON lines into ({(cell, hidden, layers, T): ns_per_step}, floor).

    floor is {"ns": median per-call floor, "version": ..., "threads": ...}
    or None when no floor line was seen; repeated shapes get the median.
    """
    samples, floors, floor = {}, [], None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if "floor_ns" in rec:
            floors.append(rec["floor_ns"])
            floor = {"version": rec.get("version", "?"), "threads": rec.get("threads")}
            continue
        samples.setdefault((rec["cell"], rec["hidden"], rec["layers"], rec["T"]), []).append(rec["ns_per_step"])
    if floor is not None:
        floor["ns"] = statistics.median(floors)
    return {k: statistics.median(v) for k, v in samples.items()}, floor


def go_duration_seconds(text):
    """Seconds in a Go -benchtime duration such as 200ms or 1.5s; None for counts like 100x."""
    m = re.fullmatch(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m)", text.strip())
    if not m:
        return None
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]
    return float(m.group(1)) * scale


def run_go(args):
    cmd = ["go", "test", "./schedule/", "-run", "^$",
           "-bench", go_bench_regex(args.cells, args.hidden, args.layers, args.lengths, args.schedules),
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
    python = _python(args)
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


def _python(args):
    return args.python or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)


def export_onnx(args):
    """Export the shapes for ONNX Runtime; return None or the reason it failed."""
    cmd = [_python(args), str(SCRIPTS / "bench_onnx.py"), "--out", str(args.onnx_models),
           "--cells", ",".join(args.cells), "--hidden", ",".join(map(str, args.hidden)),
           "--layers", ",".join(map(str, args.layers))]
    print("bench_compare: " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return "export failed: " + last[0].removeprefix("bench_onnx: ")
    return None


def run_ort(args):
    """Return (stdout, None) or (None, reason ONNX Runtime could not be run)."""
    node = shutil.which(args.node)
    if not node:
        return None, f"{args.node} not found"
    min_time = go_duration_seconds(args.benchtime) or 0.2
    cmd = [node, str(SCRIPTS / "ort_bench.js"), "--models", str(args.onnx_models),
           "--cells", ",".join(args.cells), "--hidden", ",".join(map(str, args.hidden)),
           "--layers", ",".join(map(str, args.layers)), "--lengths", ",".join(map(str, args.lengths)),
           "--threads", str(args.threads), "--min-time", str(min_time)]
    env = dict(os.environ)
    if args.ort_modules:
        env["NODE_PATH"] = str(args.ort_modules)
    print(f"bench_compare: NODE_PATH={env.get('NODE_PATH', '')} " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return None, last[0].removeprefix("ort_bench: ")
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


def best(go, shape, schedules):
    """(name, ns/step) of the fastest of schedules on shape, or (None, None)."""
    times = [(go[shape + (s,)]["ns/step"], s) for s in schedules
             if "ns/step" in go.get(shape + (s,), {})]
    if not times:
        return None, None
    ns, name = min(times)
    return name, ns


def render_table(shapes, go, torch, notes, ort=None):
    """The Markdown table for shapes [(cell, hidden, layers, T)], then notes.

    With ort (ONNX Runtime's results), its time per step follows PyTorch's
    and its ratio to the best float32 schedule follows PyTorch's.
    """
    label = {"Pbf16": "P bf16"}
    with_ort = ort is not None
    header = (["cell", "hidden", "layers", "T"]
              + [f"{label.get(s, s)} ns/step" for s in SCHEDULES] + ["PyTorch ns/step"]
              + (["ORT ns/step"] if with_ort else [])
              + [f"PyTorch/{label.get(s, s)}" for s in SCHEDULES]
              + ["best f32", "PyTorch/best f32"] + (["ORT/best f32"] if with_ort else [])
              + [f"{label.get(s, s)} B/step" for s in SCHEDULES])
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for shape in shapes:
        res = [go.get(shape + (s,), {}) for s in SCHEDULES]
        t = torch.get(shape) if torch is not None else None
        name, ns = best(go, shape, F32_SCHEDULES)
        cell, hidden, layers, steps = shape
        o = ort.get(shape) if with_ort else None
        row = ([cell, str(hidden), str(layers), str(steps)]
               + [_num(r.get("ns/step")) for r in res] + [_num(t)]
               + ([_num(o)] if with_ort else [])
               + [_ratio(t, r.get("ns/step")) for r in res]
               + [name or "n/a", _ratio(t, ns)] + ([_ratio(o, ns)] if with_ort else [])
               + [_num(r.get("B/step")) for r in res])
        out.append("| " + " | ".join(row) + " |")
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out) + "\n"


def summary(shapes, go, torch, target=2.0, peer="PyTorch", min_steps=1):
    """Notes on peer/best over shapes with both results (and T >= min_steps): median, minimum, misses."""
    notes = []
    for label, schedules in (("best float32 schedule", F32_SCHEDULES), ("best schedule, bf16 allowed", SCHEDULES)):
        ratios = []
        for shape in shapes:
            if shape[3] < min_steps:
                continue
            t = torch.get(shape)
            name, ns = best(go, shape, schedules)
            if t is not None and ns:
                ratios.append((t / ns, shape, name))
        if not ratios:
            continue
        ratios.sort()
        med = statistics.median(r for r, _, _ in ratios)
        low, shape, name = ratios[0]
        misses = [r for r in ratios if r[0] < target]
        where = f" with T >= {min_steps}" if min_steps > 1 else ""
        notes.append(f"{peer}/{label}: median {med:.2f}, smallest {low:.2f} "
                     f"({'/'.join(map(str, shape))}, {name}); {len(misses)} of {len(ratios)} shape(s){where} below {target:g}x"
                     + ("" if not misses else ": " + ", ".join(
                         f"{'/'.join(map(str, s))} {r:.2f}" for r, s, _ in misses[:20])
                        + (" ..." if len(misses) > 20 else "")) + ".")
    return notes


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
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the Go and PyTorch runs this many times; medians of all rounds (default: 1)")
    ap.add_argument("--schedules", type=schedule_list, default=list(SCHEDULES),
                    help="Go schedules to run, among " + ",".join(SCHEDULES) + " (default: all)")
    ap.add_argument("--python", help="interpreter with torch (default: /usr/bin/python3)")
    ap.add_argument("--go-output", type=Path, metavar="FILE", help="parse this go test output instead of running go")
    ap.add_argument("--torch-output", type=Path, metavar="FILE",
                    help="parse these bench_torch.py JSON lines instead of running PyTorch")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch; print the Go columns only")
    ap.add_argument("--onnx", action="store_true", help="also run ONNX Runtime (scripts/bench_onnx.py, ort_bench.js)")
    ap.add_argument("--onnx-models", type=Path, default=Path(tempfile.gettempdir(), "rnnserve-onnx"),
                    help="directory for the exported ONNX models (default: %(default)s)")
    ap.add_argument("--node", default="node", help="Node.js binary (default: %(default)s)")
    ap.add_argument("--ort-modules", type=Path,
                    help="node_modules directory holding onnxruntime-node (default: NODE_PATH)")
    ap.add_argument("--ort-output", type=Path, metavar="FILE",
                    help="parse these ort_bench.js JSON lines instead of running ONNX Runtime")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.count < 1 or args.rounds < 1:
        ap.error("--threads, --count and --rounds must be >= 1")
    return args


def schedule_list(text):
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in SCHEDULES]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"schedules must be among {','.join(SCHEDULES)}: {text!r}")
    return values


def main(argv=None, out=sys.stdout):
    args = parse_args(argv)
    shapes = [(c, h, l, t) for c in args.cells for h in args.hidden for l in args.layers for t in args.lengths]

    # Alternate Go, PyTorch and ONNX Runtime, round by round; medians over all rounds.
    go_texts, torch_texts, ort_texts, reason, ort_reason = [], [], [], None, None
    want_ort = args.onnx or args.ort_output is not None
    if args.onnx and args.ort_output is None:
        ort_reason = export_onnx(args)
    rounds = 1 if args.go_output else args.rounds
    for r in range(rounds):
        if rounds > 1:
            print(f"bench_compare: round {r + 1} of {rounds}", file=sys.stderr)
        go_texts.append(args.go_output.read_text() if args.go_output else run_go(args))
        if args.torch_output:
            torch_texts.append(args.torch_output.read_text())
        elif args.no_torch:
            reason = "skipped with --no-torch"
        elif reason is None:
            text, reason = run_torch(args)
            if text is not None:
                torch_texts.append(text)
        if args.ort_output:
            ort_texts.append(args.ort_output.read_text())
        elif want_ort and ort_reason is None:
            text, ort_reason = run_ort(args)
            if text is not None:
                ort_texts.append(text)
    go, info = parse_go_output("".join(go_texts))
    if not go:
        raise SystemExit("bench_compare: no BenchmarkTableI results in the go test output")

    notes = []
    torch = parse_torch_output("".join(torch_texts)) if torch_texts else None
    if torch is None:
        notes.append(f"PyTorch was unavailable: {reason}; its columns are n/a.")
    else:
        notes.extend(summary(shapes, go, torch))
    ort = None
    if want_ort:
        ort, floor = parse_ort_output("".join(ort_texts))
        if not ort:
            notes.append(f"ONNX Runtime was unavailable: {ort_reason or 'no results'}; its columns are n/a.")
        else:
            notes.extend(summary(shapes, go, ort, target=1.25, peer="ONNX Runtime", min_steps=10))
        if floor is not None:
            notes.append(f"ONNX Runtime {floor['version']} per-call floor (a session adding 1 to 64 floats, "
                         f"{floor['threads']} intra-op thread(s)): {floor['ns'] / 1000:.1f} µs.")

    missing = [s for s in shapes if not any(s + (k,) in go for k in SCHEDULES)]
    if missing:
        notes.append(f"{len(missing)} requested shape(s) had no Go result.")
    machine = ", ".join(f"{k} {info[k]}" for k in ("goos", "goarch", "cpu") if k in info)
    notes.append(f"Threads: {args.threads}; Go -benchtime {args.benchtime}"
                 + (f"; {rounds} alternating rounds, medians" if rounds > 1 else "")
                 + (f"; {machine}" if machine else "") + ".")
    out.write(render_table(shapes, go, torch, notes, ort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
