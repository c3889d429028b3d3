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

With --rounds R the benchmarks alternate R times (Go, PyTorch, ONNX
Runtime, Go, ...) over every shape, so that a noisy neighbour on a shared
machine hits all sides alike. With --interleave shape each round goes
shape by shape instead, every engine on one shape before the next, so
that the times a ratio is made of are seconds apart rather than minutes
(on a VM whose speed moves by 10-20% from one minute to the next); the Go
test binary is then built once and run for each shape. Then the project's rule for published
tables applies (scripts/bench_rounds.py): a shape has settled when each of
its figures that enter the ratios (our best float32 time per step, our
best with bf16 allowed when Pbf16 runs, PyTorch's, ONNX Runtime's with
--onnx) has two rounds within --agree percent of each other (|a-b| /
min(a,b); default 10, 0: no reruns). The shapes that have not are rerun,
only they and all engines in turn, one round at a time, until they settle
or have had --max-rounds rounds (default R + 4). Each figure is the median
of all of its shape's rounds; the table's last column counts them, with a
† on a shape that never settled, and the notes name those shapes, state
the rule, and give the 1-minute load average and the UTC time before the
first round and after the last.

The Go sub-benchmarks are named
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A (or sched=A+) and
BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=10/sched=P (or sched=Pbf16,
or sched=P1: P on one worker) and report the custom metrics ns/step and
B/step.

With --threads N above 1 each engine may also use fewer of the N cores,
as a server does where that is faster: P runs on one worker as well
(P1, the one-core P the server's schedule choice weighs beside P across
every core) whenever P runs, and ONNX Runtime (--onnx) is also timed with
one intra-op thread, its figure being the better of its one and N
threads per shape; the notes count the shapes where one was better.

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

With --clock cpu every figure is CPU time instead of wall time: each
process's user and system time per step over the same repeats (Go's
cpu-ns/step, bench_torch.py's and ort_bench.js's cpu_ns_per_step). On a
shared machine a process waiting for a core then does not count, though
the other tenants' use of the caches and memory still does; with more
than one thread it counts every thread, spinning included, so it is for
one-thread runs.

If PyTorch or ONNX Runtime cannot be run, the other columns are printed
with a note saying so. --go-output, --torch-output and --ort-output read
captured outputs instead of running the benchmarks, to re-render a table or
to test the parsing; then nothing is rerun (what is not captured runs
once), and the agreement is judged over the rounds the outputs hold: the
k-th result of a benchmark in a file is its round k.

bench_torch.py and ort_bench.js take the shapes as four lists (their
product) and, when the shapes rerun are no product, as --shapes
cell/hidden/layers/T,...; go test's -bench pattern then has one
alternative per model, joined by |.

With --int8 the table is int8's instead: our P with float32, bf16 and
int8 weights (sched=P, Pbf16, Pint8), PyTorch's int8
(bench_torch.py --int8: quantize_dynamic) and, with --onnx, ONNX
Runtime's (bench_onnx.py --int8: DynamicQuantizeLSTM, LSTM shapes only),
each ratio against our int8 (above 1 ours is faster), and notes on the
targets: int8 at least 1.8x our float32 P and 1.3x our bf16 P at hidden
>= 512 and T = 100, and ahead of both peers at every shape they run. The
rounds rule applies to our three times and the peers' int8 times. Where
ONNX Runtime's graphs with 8-bit weights fail their check (their products
saturate on a CPU without VNNI), its column times the graphs with 7-bit
weights that its quantizer writes for such CPUs, and a note says so.

Usage:
    python3 scripts/bench_compare.py --hidden 64,512 --layers 1,2 --lengths 1,100
    python3 scripts/bench_compare.py --onnx --ort-modules /tmp/ort/node_modules --rounds 3 --threads 2
    python3 scripts/bench_compare.py --rounds 2 --agree 5 --max-rounds 8
    python3 scripts/bench_compare.py --int8 --onnx --ort-modules .scratch/ort/node_modules --hidden 512,1024 --layers 1 --lengths 100
    python3 scripts/bench_compare.py --int8 --clock cpu --hidden 512,1024 --layers 1 --lengths 100
"""

import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from itertools import zip_longest
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))
import bench_rounds  # noqa: E402
import bench_torch  # noqa: E402  (flag parsing and defaults only; it imports torch lazily)

SCHEDULES = ("A", "A+", "P", "P1", "Pbf16")
F32_SCHEDULES = ("A", "A+", "P", "P1")
INT8_SCHEDULES = ("P", "Pbf16", "Pint8")
ALL_SCHEDULES = SCHEDULES + ("Pint8",)

# The int8 targets (issue: int8 weights): against our float32 and bf16 P at
# hidden >= INT8_MIN_HIDDEN and T = INT8_T, and against the peers' int8
# everywhere they run.
INT8_MIN_HIDDEN = 512
INT8_T = 100
INT8_OVER_F32 = 1.8
INT8_OVER_BF16 = 1.3

# One result line of `go test -bench`, e.g.
# BenchmarkTableI/cell=gru/hidden=64/layers=2/T=10/sched=A+-4   1000   123456 ns/op   12345 ns/step   98304 B/step
# The -4 is GOMAXPROCS, appended only when it is not 1; newer builds add
# cpu-ns/step, the process's CPU time per step.
GO_RESULT = re.compile(
    r"^BenchmarkTableIP?/cell=(?P<cell>[a-z]+)/hidden=(?P<hidden>\d+)/layers=(?P<layers>\d+)"
    r"/T=(?P<T>\d+)/sched=(?P<sched>A\+?|Pbf16|Pint8|P1|P)(?:-(?P<procs>\d+))?\s+(?P<iters>\d+)\s+(?P<metrics>.+)$"
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
    if any(s in ("P", "P1", "Pbf16", "Pint8") for s in schedules):
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


def product_lists(shapes):
    """([cells], [hidden], [layers], [lengths]) when shapes are exactly their product, else None."""
    lists = [list(dict.fromkeys(s[i] for s in shapes)) for i in range(4)]
    size = len(lists[0]) * len(lists[1]) * len(lists[2]) * len(lists[3])
    return lists if size == len(set(shapes)) else None


def go_shapes_regex(shapes, schedules=SCHEDULES):
    """The -bench pattern for a list of shapes (cell, hidden, layers, T).

    A full product of values is go_bench_regex's pattern; any other subset
    (the shapes rerun) is one alternative per (cell, hidden, layers) with
    its lengths, joined by a top-level | (go test tries each alternative).
    """
    lists = product_lists(shapes)
    if lists:
        return go_bench_regex(*lists, schedules)
    groups = {}
    for cell, hidden, layers, steps in shapes:
        groups.setdefault((cell, hidden, layers), []).append(steps)
    return "|".join(go_bench_regex([c], [h], [l], ts, schedules) for (c, h, l), ts in groups.items())


def shape_flags(shapes):
    """bench_torch.py's and ort_bench.js's flags selecting shapes: the four lists, or --shapes."""
    lists = product_lists(shapes)
    if lists:
        return [f for name, values in zip(("--cells", "--hidden", "--layers", "--lengths"), lists)
                for f in (name, ",".join(map(str, values)))]
    return ["--shapes", ",".join("/".join(map(str, s)) for s in shapes)]


# The figure each clock reads: Go's metric, the JSON lines' field.
CLOCKS = {"wall": ("ns/step", "ns_per_step"), "cpu": ("cpu-ns/step", "cpu_ns_per_step")}


def parse_go_output(text, clock="wall"):
    """Parse go test -bench output.

    Returns ({(cell, hidden, layers, T, sched): {"ns/step": .., "B/step": .., ...}}, info)
    where repeated results of one benchmark (-count > 1) are reduced to
    their median and info holds the goos/goarch/cpu header lines. With
    clock "cpu", "ns/step" holds the line's cpu-ns/step (a line without
    one has none).
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
        if clock == "cpu":
            cpu = metrics.pop("cpu-ns/step", None)
            metrics.pop("ns/step", None)
            if cpu is not None:
                metrics["ns/step"] = cpu
        key = (m.group("cell"), int(m.group("hidden")), int(m.group("layers")),
               int(m.group("T")), m.group("sched"))
        samples.setdefault(key, []).append(metrics)
    results = {}
    for key, runs in samples.items():
        units = set().union(*runs)
        results[key] = {u: statistics.median(r[u] for r in runs if u in r) for u in units}
    return results, info


def parse_torch_output(text, clock="wall"):
    """Parse bench_torch.py JSON lines into {(cell, hidden, layers, T): ns_per_step}
    (cpu_ns_per_step with clock "cpu"; a line without it is skipped).

    A shape timed more than once (several rounds) gets the median.
    """
    samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if CLOCKS[clock][1] in rec:
            samples.setdefault((rec["cell"], rec["hidden"], rec["layers"], rec["T"]), []).append(rec[CLOCKS[clock][1]])
    return {k: statistics.median(v) for k, v in samples.items()}


def parse_ort_output(text, clock="wall"):
    """Parse ort_bench.js JSON lines into ({(cell, hidden, layers, T): ns_per_step}, floor)
    (cpu_ns_per_step with clock "cpu"; a line without it is skipped).

    A shape timed with several thread counts gets the better of them, each
    the median of its repeats (ort_by_threads has them apart). floor is
    {"ns": median per-call floor, "version": ..., "threads": ...} of the
    most threads seen, or None when no floor line was seen.
    """
    by, floors, version = ort_by_threads(text, clock)
    if not floors:
        floor = None
    else:
        most = max(floors, key=lambda t: t or 0)
        floor = {"version": version, "threads": most, "ns": statistics.median(floors[most])}
    return {shape: min(ts.values()) for shape, ts in by.items()}, floor


def ort_by_threads(text, clock="wall"):
    """ort_bench.js JSON lines as ({shape: {threads: median ns_per_step}},
    {threads: [floor ns, ...]}, version)."""
    samples, floors, version = {}, {}, "?"
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if "floor_ns" in rec:
            floors.setdefault(rec.get("threads"), []).append(rec["floor_ns"])
            version = rec.get("version", "?")
            continue
        if CLOCKS[clock][1] in rec:
            shape = (rec["cell"], rec["hidden"], rec["layers"], rec["T"])
            samples.setdefault(shape, {}).setdefault(rec.get("threads"), []).append(rec[CLOCKS[clock][1]])
    by = {shape: {t: statistics.median(v) for t, v in ts.items()} for shape, ts in samples.items()}
    return by, floors, version


def _result_key(line):
    """The benchmark a line of output is a result of: a Go result's shape and schedule, a JSON line's shape."""
    line = line.strip()
    m = GO_RESULT.match(line)
    if m:
        return m.group("cell", "hidden", "layers", "T", "sched")
    if line.startswith("{"):
        rec = json.loads(line)
        if "floor_ns" in rec:
            return ("floor", rec.get("threads"))
        return (rec["cell"], rec["hidden"], rec["layers"], rec["T"], rec.get("threads"))
    return None


def split_rounds(text):
    """Split captured output into rounds: the k-th result of each benchmark is in the k-th text.

    Lines that are no result (headers, logs) go with the first.
    """
    chunks, seen = [[]], {}
    for line in text.splitlines(keepends=True):
        key = _result_key(line)
        k = seen.get(key, 0) if key else 0
        if key:
            seen[key] = k + 1
        chunks.extend([] for _ in range(k + 1 - len(chunks)))
        chunks[k].append(line)
    return ["".join(c) for c in chunks]


def parse_round(go_text, torch_text, ort_text, clock="wall"):
    """One round's (Go results, PyTorch results, ONNX Runtime results), parsed."""
    return (parse_go_output(go_text, clock)[0], parse_torch_output(torch_text, clock),
            parse_ort_output(ort_text, clock)[0])


def round_figures(round_, shape, scheds, int8=False):
    """The figures of one round of shape that enter the ratios, {name: ns/step}.

    Our best float32 time and our best with bf16 allowed (when Pbf16 ran)
    count only when every schedule the shape has in any round (scheds) is
    in this one, so that a round is never judged on part of the schedules.
    With int8 (the --int8 table) they are our P times with float32, bf16
    and int8 weights and the peers' int8 times.
    """
    go, torch, ort = round_
    if int8:
        figures = {f"our {label}": go[shape + (s,)]["ns/step"] for s, label in INT8_LABELS.items()
                   if "ns/step" in go.get(shape + (s,), {})}
        if shape in torch:
            figures["PyTorch's int8"] = torch[shape]
        if shape in ort:
            figures["ONNX Runtime's int8"] = ort[shape]
        return figures
    have = {s for s in SCHEDULES if "ns/step" in go.get(shape + (s,), {})}
    figures = {}
    if scheds & set(F32_SCHEDULES) and scheds <= have:
        figures["our best float32"] = best(go, shape, F32_SCHEDULES)[1]
    if "Pbf16" in scheds and scheds <= have:
        figures["our best with bf16 allowed"] = best(go, shape, SCHEDULES)[1]
    if shape in torch:
        figures["PyTorch's"] = torch[shape]
    if shape in ort:
        figures["ONNX Runtime's"] = ort[shape]
    return figures


def shape_rounds(rounds, shape, int8=False):
    """(how many of rounds timed shape, {figure: [ns/step per round]})."""
    scheds = {s for go, _, _ in rounds for s in SCHEDULES if shape + (s,) in go}
    count, series = 0, {}
    for round_ in rounds:
        go, torch, ort = round_
        if not (any(shape + (s,) in go for s in ALL_SCHEDULES) or shape in torch or shape in ort):
            continue
        count += 1
        for name, ns in round_figures(round_, shape, scheds, int8).items():
            series.setdefault(name, []).append(ns)
    return count, series


def go_duration_seconds(text):
    """Seconds in a Go -benchtime duration such as 200ms or 1.5s; None for counts like 100x."""
    m = re.fullmatch(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m)", text.strip())
    if not m:
        return None
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]
    return float(m.group(1)) * scale


def build_go(args):
    """With --interleave shape, build the schedule package's test binary once
    (go test would link it again for every shape) into args.go_binary."""
    if args.interleave != "shape" or args.go_output:
        return
    tmp = tempfile.mkdtemp(prefix="bench_compare-")
    atexit.register(shutil.rmtree, tmp, True)
    args.go_binary = Path(tmp, "schedule.test")
    cmd = ["go", "test", "-c", "-o", str(args.go_binary), "./schedule/"]
    print("bench_compare: " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    if subprocess.run(cmd, cwd=REPO).returncode != 0:
        raise SystemExit("bench_compare: go test -c failed")


def run_go(args, shapes):
    flags = ["-run", "^$", "-bench", go_shapes_regex(shapes, args.schedules),
             "-benchtime", args.benchtime, "-cpu", str(args.threads), "-count", str(args.count)]
    cmd, cwd = ["go", "test", "./schedule/"] + flags, REPO
    if getattr(args, "go_binary", None):
        # go test runs a package's binary in the package's directory.
        cmd, cwd = [str(args.go_binary)] + ["-test." + f[1:] if f.startswith("-") else f for f in flags], REPO / "schedule"
    env = dict(os.environ, GOMAXPROCS=str(args.threads))
    print("bench_compare: GOMAXPROCS=%d %s" % (args.threads, " ".join(_quote(c) for c in cmd)), file=sys.stderr)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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


def run_torch(args, shapes):
    """Time shapes; return (stdout, None) or (None, reason PyTorch could not be run)."""
    python = _python(args)
    if not shutil.which(python):
        return None, f"{python} not found"
    min_time = go_duration_seconds(args.benchtime) or 0.2
    cmd = ([python, str(SCRIPTS / "bench_torch.py")] + shape_flags(shapes)
           + ["--threads", str(args.threads), "--min-time", str(min_time)] + (["--int8"] if args.int8 else []))
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
           "--layers", ",".join(map(str, args.layers))] + (["--int8"] if args.int8 else [])
    print("bench_compare: " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return "export failed: " + last[0].removeprefix("bench_onnx: ")
    return None


def ort_thread_counts(args):
    """The intra-op thread counts ONNX Runtime runs with: --threads, and one
    as well above one (not for the --int8 table)."""
    return [args.threads] + ([1] if args.threads > 1 and not args.int8 else [])


# ort_bench.js's exit status when a model's output is not PyTorch's.
ORT_EXIT_MISMATCH = 4


def run_ort(args, shapes):
    """Time shapes with every thread count of ort_thread_counts; return
    (stdout, None) or (None, reason ONNX Runtime could not be run)."""
    node = shutil.which(args.node)
    if not node:
        return None, f"{args.node} not found"
    min_time = go_duration_seconds(args.benchtime) or 0.2
    env = dict(os.environ)
    if args.ort_modules:
        env["NODE_PATH"] = str(args.ort_modules)
    out = []
    for threads in ort_thread_counts(args):
        while True:
            cmd = ([node, str(SCRIPTS / "ort_bench.js"), "--models", str(args.onnx_models)] + shape_flags(shapes)
                   + ["--threads", str(threads), "--min-time", str(min_time)]
                   + (["--precision", args.ort_int8] if args.int8 else []))
            print(f"bench_compare: NODE_PATH={env.get('NODE_PATH', '')} " + " ".join(_quote(c) for c in cmd),
                  file=sys.stderr)
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            sys.stderr.write(proc.stderr)
            if proc.returncode == 0:
                break
            last = (proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"])[0]
            reason = last.removeprefix("ort_bench: ")
            if not (args.int8 and args.ort_int8 == "int8" and proc.returncode == ORT_EXIT_MISMATCH):
                return None, reason
            # Where ONNX Runtime's int8 products saturate (VPMADDUBSW, on a
            # CPU without VNNI), time the 7-bit weights its quantizer
            # writes for such CPUs instead, and say so.
            args.ort_int8, args.ort_int8_failed = "int8w7", reason
        out.append(proc.stdout)
    return "".join(out), None


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


def render_table(shapes, go, torch, notes, ort=None, rounds=None):
    """The Markdown table for shapes [(cell, hidden, layers, T)], then notes.

    With ort (ONNX Runtime's results), its time per step follows PyTorch's
    and its ratio to the best float32 schedule follows PyTorch's. With
    rounds ({shape: text}), a last column says how many rounds each shape had.
    """
    label = {"Pbf16": "P bf16"}
    with_ort = ort is not None
    # P1's columns only where it ran (runs on more than one thread).
    scheds = [s for s in SCHEDULES if s != "P1" or any(k[4] == "P1" for k in go)]
    header = (["cell", "hidden", "layers", "T"]
              + [f"{label.get(s, s)} ns/step" for s in scheds] + ["PyTorch ns/step"]
              + (["ORT ns/step"] if with_ort else [])
              + [f"PyTorch/{label.get(s, s)}" for s in scheds]
              + ["best f32", "PyTorch/best f32"] + (["ORT/best f32"] if with_ort else [])
              + [f"{label.get(s, s)} B/step" for s in scheds] + (["rounds"] if rounds is not None else []))
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for shape in shapes:
        res = [go.get(shape + (s,), {}) for s in scheds]
        t = torch.get(shape) if torch is not None else None
        name, ns = best(go, shape, F32_SCHEDULES)
        cell, hidden, layers, steps = shape
        o = ort.get(shape) if with_ort else None
        row = ([cell, str(hidden), str(layers), str(steps)]
               + [_num(r.get("ns/step")) for r in res] + [_num(t)]
               + ([_num(o)] if with_ort else [])
               + [_ratio(t, r.get("ns/step")) for r in res]
               + [name or "n/a", _ratio(t, ns)] + ([_ratio(o, ns)] if with_ort else [])
               + [_num(r.get("B/step")) for r in res] + ([rounds.get(shape, "0")] if rounds is not None else []))
        out.append("| " + " | ".join(row) + " |")
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out) + "\n"


INT8_LABELS = {"P": "float32 (P)", "Pbf16": "bf16 (P)", "Pint8": "int8"}


def render_int8_table(shapes, go, torch, ort, notes, rounds=None):
    """The --int8 Markdown table for shapes, then notes: our P with float32,
    bf16 and int8 weights, the peers' int8, and each against our int8."""
    header = (["cell", "hidden", "layers", "T", "P f32 ns/step", "P bf16 ns/step", "P int8 ns/step",
               "PyTorch int8 ns/step", "ORT int8 ns/step", "f32/int8", "bf16/int8",
               "PyTorch int8/int8", "ORT int8/int8", "P int8 B/step"] + (["rounds"] if rounds is not None else []))
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for shape in shapes:
        ns = {s: go.get(shape + (s,), {}).get("ns/step") for s in INT8_SCHEDULES}
        t = torch.get(shape) if torch is not None else None
        o = ort.get(shape) if ort is not None else None
        ours = ns["Pint8"]
        row = ([shape[0], str(shape[1]), str(shape[2]), str(shape[3])]
               + [_num(ns[s]) for s in INT8_SCHEDULES] + [_num(t), _num(o)]
               + [_ratio(ns["P"], ours), _ratio(ns["Pbf16"], ours), _ratio(t, ours), _ratio(o, ours)]
               + [_num(go.get(shape + ("Pint8",), {}).get("B/step"))]
               + ([rounds.get(shape, "0")] if rounds is not None else []))
        out.append("| " + " | ".join(row) + " |")
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out) + "\n"


def ratio_note(label, ratios, target, where=""):
    """A note on [(ratio, shape)]: median, smallest, and the shapes below target."""
    if not ratios:
        return None
    ratios = sorted(ratios)
    med = statistics.median(r for r, _ in ratios)
    misses = [(r, s) for r, s in ratios if r < target]
    low, shape = ratios[0]
    return (f"{label}: median {med:.2f}, smallest {low:.2f} ({shape_name(shape)}); {len(misses)} of {len(ratios)} "
            f"shape(s){where} below {target:g}x"
            + ("" if not misses else ": " + ", ".join(f"{shape_name(s)} {r:.2f}" for r, s in misses[:20])
               + (" ..." if len(misses) > 20 else "")) + ".")


def int8_summary(shapes, go, torch, ort):
    """Notes on the int8 targets: our int8 against our float32 and bf16 P at
    hidden >= INT8_MIN_HIDDEN and T = INT8_T, and each peer's int8 against
    ours at every shape both ran."""
    def ours(shape, sched):
        return go.get(shape + (sched,), {}).get("ns/step")

    target = [s for s in shapes if s[1] >= INT8_MIN_HIDDEN and s[3] == INT8_T and ours(s, "Pint8")]
    where = f" with hidden >= {INT8_MIN_HIDDEN} and T = {INT8_T}"
    notes = []
    for sched, label, goal in (("P", "our float32 P / our int8", INT8_OVER_F32),
                               ("Pbf16", "our bf16 P / our int8", INT8_OVER_BF16)):
        notes.append(ratio_note(label, [(ours(s, sched) / ours(s, "Pint8"), s) for s in target if ours(s, sched)],
                                goal, where))
    for peer, res in (("PyTorch int8 / our int8", torch), ("ONNX Runtime int8 / our int8", ort)):
        if res:
            notes.append(ratio_note(peer, [(res[s] / ours(s, "Pint8"), s) for s in shapes
                                           if s in res and ours(s, "Pint8")], 1.0))
    if ort is not None and any(s[0] == "gru" for s in shapes):
        notes.append("ONNX Runtime has no dynamically quantized GRU operator: its int8 column is n/a for GRU.")
    return [n for n in notes if n]


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


def fewer_cores_notes(shapes, go, ort_texts, args):
    """Above one thread, how often each engine ran a shape better on one
    core: our best float32 on P1, and ONNX Runtime with one intra-op
    thread (from its raw output, every round)."""
    if args.threads <= 1 or args.int8:
        return []
    notes = []
    ones = [s for s in shapes if best(go, s, F32_SCHEDULES)[0] == "P1"]
    if any(s + ("P1",) in go for s in shapes):
        notes.append(f"Our best float32 includes P on one worker (P1): the best at {len(ones)} of "
                     f"{len(shapes)} shape(s)" + (": " + ", ".join(map(shape_name, ones)) if ones else "") + ".")
    if ort_texts:
        by, _, _ = ort_by_threads("".join(ort_texts), args.clock)
        both = {s: ts for s, ts in by.items() if 1 in ts and args.threads in ts}
        if both:
            better = sorted(shape_name(s) for s, ts in both.items() if ts[1] < ts[args.threads])
            notes.append(f"ONNX Runtime's figure is the better of 1 and {args.threads} intra-op threads: "
                         f"1 was better at {len(better)} of {len(both)} shape(s).")
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
                    help="alternate the Go, PyTorch and ORT runs this many times for every shape; "
                         "medians of all rounds (default: 1)")
    bench_rounds.add_arguments(ap, "shape")
    ap.add_argument("--interleave", choices=("engine", "shape"), default="engine",
                    help="engine: in a round each engine runs over every shape, then the next engine; shape: "
                         "every engine runs on one shape, then the next shape, so that the times a ratio is made "
                         "of are seconds apart, not minutes, on a host whose speed drifts (default: %(default)s)")
    ap.add_argument("--schedules", type=schedule_list, default=list(SCHEDULES),
                    help="Go schedules to run, among " + ",".join(SCHEDULES) + " (default: all)")
    ap.add_argument("--int8", action="store_true",
                    help="the int8 table: P with float32, bf16 and int8 weights beside PyTorch's and "
                         "ONNX Runtime's int8 (ignores --schedules)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="time per step as wall time or as each process's CPU time (user and system; "
                         "for one-thread runs on a shared machine) (default: %(default)s)")
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
    bench_rounds.check_arguments(ap, args)
    if args.int8:
        args.schedules = list(INT8_SCHEDULES)
    elif args.threads > 1 and "P" in args.schedules and "P1" not in args.schedules:
        args.schedules.append("P1")  # P on one of the N cores, as a server may run it
    # The int8 graphs ONNX Runtime runs, and why the 8-bit ones did not pass (run_ort).
    args.ort_int8, args.ort_int8_failed = "int8", None
    return args


def schedule_list(text):
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in ALL_SCHEDULES]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"schedules must be among {','.join(ALL_SCHEDULES)}: {text!r}")
    return values


def shape_name(shape):
    return "/".join(map(str, shape))


def main(argv=None, out=sys.stdout):
    args = parse_args(argv)
    shapes = [(c, h, l, t) for c in args.cells for h in args.hidden for l in args.layers for t in args.lengths]
    want_ort = args.onnx or args.ort_output is not None
    captured = any(f is not None for f in (args.go_output, args.torch_output, args.ort_output))
    reason = "skipped with --no-torch" if args.no_torch else None
    ort_reason = None
    if args.onnx and args.ort_output is None:
        ort_reason = export_onnx(args)
    build_go(args)
    start = bench_rounds.stamp()

    # Each round runs Go, PyTorch and ONNX Runtime in turn over the shapes it
    # is given; texts gathers every round's output, for the medians.
    texts, rounds = {"go": [], "torch": [], "ort": []}, []

    def run_engines(subset):
        """Go, PyTorch and ONNX Runtime in turn over subset; each engine's output."""
        nonlocal reason, ort_reason
        go_text = args.go_output.read_text() if args.go_output else run_go(args, subset)
        torch_text = ort_text = None
        if args.torch_output:
            torch_text = args.torch_output.read_text()
        elif reason is None:
            torch_text, reason = run_torch(args, subset)
        if args.ort_output:
            ort_text = args.ort_output.read_text()
        elif want_ort and ort_reason is None:
            ort_text, ort_reason = run_ort(args, subset)
        return go_text, torch_text, ort_text

    def run_round(subset, r):
        if not captured and (r > 1 or args.rounds > 1):
            print(f"bench_compare: round {r} ({len(subset)} of {len(shapes)} shape(s))", file=sys.stderr)
        if args.interleave == "shape" and not captured:
            # Every engine on one shape before the next shape: seconds, not
            # minutes, between the times a ratio is made of.
            parts = [run_engines([s]) for s in subset]
            go_text, torch_text, ort_text = (
                "".join(p[i] for p in parts if p[i] is not None) or None for i in range(3))
        else:
            go_text, torch_text, ort_text = run_engines(subset)
        for engine, text in (("go", go_text), ("torch", torch_text), ("ort", ort_text)):
            if text is not None:
                texts[engine].append(text)
        rounds.append(parse_round(go_text, torch_text or "", ort_text or "", args.clock))

    def series(shape):
        return shape_rounds(rounds, shape, args.int8)[1]

    if captured:
        # No reruns: one pass, and the rounds are those the outputs hold.
        run_round(shapes, 1)
        rounds = [parse_round(*parts, args.clock) for parts in zip_longest(
            *(split_rounds("".join(texts[e])) for e in ("go", "torch", "ort")), fillvalue="")]
        counts = {s: shape_rounds(rounds, s, args.int8)[0] for s in shapes}
    else:
        counts = bench_rounds.rerun(shapes, args.rounds, args.max_rounds, args.agree, run_round, series)
    end = bench_rounds.stamp()

    go, info = parse_go_output("".join(texts["go"]), args.clock)
    if not go:
        raise SystemExit("bench_compare: no BenchmarkTableI results in the go test output")
    if not any("ns/step" in r for r in go.values()):
        raise SystemExit(f"bench_compare: the go test output has no {CLOCKS[args.clock][0]} figures")

    notes = []
    torch = parse_torch_output("".join(texts["torch"]), args.clock) if texts["torch"] else None
    if torch is None:
        notes.append(f"PyTorch was unavailable: {reason}; its columns are n/a.")
    elif not args.int8:
        notes.extend(summary(shapes, go, torch))
    ort = None
    if want_ort:
        ort, floor = parse_ort_output("".join(texts["ort"]), args.clock)
        if not ort:
            notes.append(f"ONNX Runtime was unavailable: {ort_reason or 'no results'}; its columns are n/a.")
        elif not args.int8:
            notes.extend(summary(shapes, go, ort, target=1.25, peer="ONNX Runtime", min_steps=10))
    if args.int8:
        notes.extend(int8_summary(shapes, go, torch, ort))
        engines = {json.loads(line).get("engine") for line in "".join(texts["torch"]).splitlines()
                   if line.startswith("{")}
        if ort and args.ort_int8_failed:
            notes.append("ONNX Runtime int8: its graphs with 8-bit weights failed their check "
                         f"({args.ort_int8_failed}), so its column times the same graphs with 7-bit weights "
                         "(values in [-64, 64], bench_onnx.py's int8w7), as ONNX Runtime's quantizer writes them "
                         "for CPUs without VNNI, whose int8 products (VPMADDUBSW) saturate int16 pairs; "
                         "ours keep 8-bit weights and give the activations 7 bits instead.")
        if torch:
            notes.append("PyTorch int8: quantize_dynamic, int8 weights per output row (symmetric), "
                         f"quantized engine {', '.join(sorted(e for e in engines if e)) or 'unknown'}.")
    notes.extend(fewer_cores_notes(shapes, go, texts["ort"] if want_ort else [], args))
    if want_ort and floor is not None:
        notes.append(f"ONNX Runtime {floor['version']} per-call floor (a session adding 1 to 64 floats, "
                     f"{floor['threads']} intra-op thread(s)): {floor['ns'] / 1000:.1f} µs.")

    missing = [s for s in shapes if not any(s + (k,) in go for k in ALL_SCHEDULES)]
    if missing:
        notes.append(f"{len(missing)} requested shape(s) had no Go result.")
    figures = dict.fromkeys(name for s in shapes for name in series(s))  # those measured, in order
    labels, agreement = bench_rounds.settle_report(
        shapes, counts, series, args.agree, None if captured else args.max_rounds, name=shape_name,
        figures=", ".join(figures) + " ns/step" if figures else "")
    notes.extend(agreement)
    live = [not args.go_output, not (args.torch_output or args.no_torch), args.onnx and not args.ort_output]
    if any(live):
        notes.append(bench_rounds.load_note(start, end))
    machine = ", ".join(f"{k} {info[k]}" for k in ("goos", "goarch", "cpu") if k in info)
    notes.append(f"Threads: {args.threads}; Go -benchtime {args.benchtime}"
                 + ("; every ns/step is the process's CPU time (user and system) per step, not wall time"
                    if args.clock == "cpu" else "")
                 + (f"; {args.rounds} alternating round(s) of every shape first" if not captured else "")
                 + ("; each round shape by shape, every engine on a shape before the next"
                    if args.interleave == "shape" and not captured else "")
                 + (f"; {machine}" if machine else "") + ".")
    if args.int8:
        out.write(render_int8_table(shapes, go, torch, ort, notes, labels))
    else:
        out.write(render_table(shapes, go, torch, notes, ort, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
