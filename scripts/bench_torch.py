#!/usr/bin/env python3
"""Time PyTorch LSTM/GRU inference over the DRE paper's Table I shapes.

Each shape is an nn.LSTM or nn.GRU with input_size == hidden_size,
batch_first=False, batch 1 and a float input of T steps, run under
torch.no_grad(). After a warm-up, the number of calls is calibrated so that
one repeat takes at least --min-time seconds; the result is the median time
per call over --repeats repeats. One JSON object per shape goes to stdout:

    {"cell": "lstm", "hidden": 64, "layers": 1, "T": 10, "threads": 1,
     "ns_per_step": 1234.5, "ns_per_op": 12345.0, "cpu_ns_per_step": 1200.1}

where ns_per_op is the time of one inference over all T steps and
ns_per_step = ns_per_op / T. cpu_ns_per_step is the process's CPU time
(user and system, time.process_time) per step over the same repeats,
median: on a shared machine, the time PyTorch ran rather than waited.
Progress and the BLAS in use go to stderr.

With --int8 the modules are first dynamically quantized
(torch.ao.quantization.quantize_dynamic: int8 weights, per output row
and symmetric as rnnserve's, activations quantized per step), and each
line adds "precision": "int8" and "engine", the quantized engine that
ran (this torch's default, onednn on Debian's build, which has no
fbgemm). Before timing, the quantized module's output for a fixed input
must be within --int8-check of the float module's, or the script stops.

PyTorch must be running on OpenBLAS (Debian's torch reaches it through
libblas.so.3); the script stops otherwise unless --any-blas is given. The
thread count applies to torch (torch.set_num_threads) and to OpenBLAS's own
pthread pool, which torch.set_num_threads does not reach.

Exit status: 0 on success, 2 on bad flags, 3 if torch cannot be imported,
4 if the BLAS is not OpenBLAS, 5 if a quantized module cannot be built or
disagrees with its float module.

--shapes times a list of shapes (cell/hidden/layers/T) instead of the
product of --cells, --hidden, --layers and --lengths.

Usage:
    /usr/bin/python3 scripts/bench_torch.py --hidden 64,512 --layers 1,2 \\
        --cells lstm --lengths 1,100 --threads 1
    /usr/bin/python3 scripts/bench_torch.py --shapes lstm/64/1/10,gru/512/2/1
    /usr/bin/python3 scripts/bench_torch.py --int8 --cells lstm,gru --hidden 512 --layers 1 --lengths 100
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HIDDEN = [64, 128, 256, 512, 1024]
LAYERS = [1, 2, 3, 4, 5, 6, 7, 8]
CELLS = ["lstm", "gru"]
LENGTHS = [1, 10, 50, 100]

EXIT_NO_TORCH = 3
EXIT_NOT_OPENBLAS = 4
EXIT_INT8 = 5


def int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def cell_list(text):
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in CELLS]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"cells must be among {','.join(CELLS)}: {text!r}")
    return values


def shape_list(text):
    """cell/hidden/layers/T,... -> [(cell, hidden, layers, T)]."""
    shapes = []
    for item in (v.strip() for v in text.split(",")):
        if not item:
            continue
        parts = item.split("/")
        if len(parts) != 4 or parts[0] not in CELLS or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
            raise argparse.ArgumentTypeError(f"shapes are cell/hidden/layers/T with a cell among "
                                             f"{','.join(CELLS)}: {item!r}")
        shapes.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    if not shapes:
        raise argparse.ArgumentTypeError(f"no shapes in {text!r}")
    return shapes


def shapes(args):
    """The shapes to time: --shapes, or the product of the four lists."""
    if args.shapes:
        return args.shapes
    return [(c, h, l, t) for c in args.cells for h in args.hidden for l in args.layers for t in args.lengths]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int_list, default=HIDDEN, help="hidden sizes (default: %(default)s)")
    ap.add_argument("--layers", type=int_list, default=LAYERS, help="layer counts (default: 1..8)")
    ap.add_argument("--cells", type=cell_list, default=CELLS, help="lstm,gru (default: both)")
    ap.add_argument("--lengths", type=int_list, default=LENGTHS, help="input lengths T (default: %(default)s)")
    ap.add_argument("--shapes", type=shape_list, metavar="CELL/HIDDEN/LAYERS/T,...",
                    help="time these shapes instead of the product of the four lists above")
    ap.add_argument("--threads", type=int, default=1, help="torch and OpenBLAS threads (default: 1)")
    ap.add_argument("--min-time", type=float, default=0.2, metavar="SECONDS",
                    help="least duration of one timed repeat (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported (default: 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls before timing (default: 2)")
    ap.add_argument("--any-blas", action="store_true", help="run even if the BLAS is not OpenBLAS")
    ap.add_argument("--int8", action="store_true",
                    help="time the modules dynamically quantized to int8 (quantize_dynamic)")
    ap.add_argument("--int8-check", type=float, default=0.05, metavar="TOL",
                    help="largest |quantized - float| output allowed on the check input (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.repeats < 1 or args.warmup < 0 or args.min_time <= 0:
        ap.error("--threads and --repeats must be >= 1, --warmup >= 0, --min-time > 0")
    return args


def log(msg):
    print(f"bench_torch: {msg}", file=sys.stderr, flush=True)


def loaded_blas_libraries():
    """Paths of the shared libraries with 'blas' in their name mapped into this process."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if path.startswith("/") and "blas" in os.path.basename(path).lower():
                    paths.add(path)
    except OSError:
        pass
    return sorted(paths)


def configure_blas(torch, threads):
    """Pin OpenBLAS's thread count, describe the BLAS on stderr; return whether it is OpenBLAS."""
    a = torch.randn(64, 64)
    _ = a @ a  # make sure the BLAS is loaded before looking for it

    settings = ""
    for line in torch.__config__.show().splitlines():
        if "Build settings:" in line:
            settings = line
        elif line.strip():
            log(f"torch config: {line.strip()}")
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        start = settings.find(key + "=")
        if start >= 0:
            log(f"torch build: {settings[start:].split(',')[0]}")

    libs = loaded_blas_libraries()
    log(f"loaded BLAS libraries: {', '.join(libs) or 'none found'}")
    openblas = [p for p in libs if "openblas" in os.path.basename(p).lower()]
    if openblas:
        lib = ctypes.CDLL(openblas[0])
        lib.openblas_set_num_threads(ctypes.c_int(threads))
        lib.openblas_get_config.restype = ctypes.c_char_p
        log(f"OpenBLAS: {lib.openblas_get_config().decode()}; "
            f"{lib.openblas_get_num_threads()} thread(s)")
    log(f"torch {torch.__version__}: get_num_threads()={torch.get_num_threads()}, "
        f"get_num_interop_threads()={torch.get_num_interop_threads()}")
    return bool(openblas)


def build(torch, cell, hidden, layers):
    """The module timed for a shape: seed 0, input_size == hidden_size."""
    torch.manual_seed(0)
    rnn_class = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
    return rnn_class(hidden, hidden, layers, batch_first=False).eval()


def quantized(torch, module, tol):
    """module dynamically quantized to int8 weights, per output row and
    symmetric, with its largest output difference from module on a fixed
    input; raises ValueError past tol or if nothing was quantized."""

    class Holder(torch.nn.Module):  # quantize_dynamic swaps children, not the root
        def __init__(self, rnn):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            return self.rnn(x)

    qa = torch.ao.quantization
    qconfig = qa.QConfig(activation=qa.default_dynamic_quant_observer,
                         weight=qa.default_per_channel_weight_observer)
    q = qa.quantize_dynamic(Holder(module), {type(module): qconfig}, dtype=torch.qint8)
    if type(q.rnn) is type(module):
        raise ValueError(f"quantize_dynamic left the {type(module).__name__} in float")
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(5, 1, module.input_size, generator=gen) * 2 - 1
    with torch.no_grad():
        diff = (q(x)[0] - module(x)[0]).abs().max().item()
    if not diff <= tol:
        raise ValueError(f"the quantized module's output differs from the float one's by {diff:.3g} (allowed {tol})")
    return q, diff


def time_shape(torch, cell, hidden, layers, steps, args):
    """Median seconds per inference for one shape, and median CPU seconds
    per inference over the same repeats."""
    model = build(torch, cell, hidden, layers)
    if args.int8:
        model, diff = quantized(torch, model, args.int8_check)
        log(f"{cell}/{hidden}/{layers}: int8 ({torch.backends.quantized.engine}), output within {diff:.3g} of float")
    x = torch.randn(steps, 1, hidden)

    cpu = []

    def run(calls):
        start, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            model(x)
        cpu.append((time.process_time() - cpu0) / calls)
        return time.perf_counter() - start

    with torch.no_grad():
        for _ in range(args.warmup):
            model(x)
        calls = 1
        elapsed = run(calls)
        while elapsed < args.min_time:
            # Aim 20% past the target, at most 100x more calls per round.
            calls = max(calls + 1, min(100 * calls, int(calls * 1.2 * args.min_time / max(elapsed, 1e-9))))
            elapsed = run(calls)
        del cpu[:]
        samples = [run(calls) / calls for _ in range(args.repeats)]
    return statistics.median(samples), statistics.median(cpu)


def main(argv=None):
    args = parse_args(argv)
    # OpenBLAS and OpenMP size their thread pools from the environment when
    # they are loaded, so set it before torch is imported.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    try:
        import torch
    except ImportError as err:
        log(f"cannot import torch: {err}")
        return EXIT_NO_TORCH
    torch.set_num_threads(args.threads)
    if not configure_blas(torch, args.threads) and not args.any_blas:
        log("PyTorch is not using OpenBLAS; pass --any-blas to time it anyway")
        return EXIT_NOT_OPENBLAS

    for cell, hidden, layers, steps in shapes(args):
        try:
            seconds, cpu_seconds = time_shape(torch, cell, hidden, layers, steps, args)
        except (ValueError, RuntimeError) as err:
            log(f"{cell}/{hidden}/{layers}: int8: {err}")
            return EXIT_INT8
        ns_per_op = seconds * 1e9
        rec = {
            "cell": cell, "hidden": hidden, "layers": layers, "T": steps,
            "threads": args.threads,
            "ns_per_step": round(ns_per_op / steps, 1),
            "ns_per_op": round(ns_per_op, 1),
            "cpu_ns_per_step": round(cpu_seconds * 1e9 / steps, 1),
        }
        if args.int8:
            rec.update(precision="int8", engine=torch.backends.quantized.engine)
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
