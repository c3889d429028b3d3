#!/usr/bin/env python3
"""Export the DRE paper's Table I shapes to ONNX for ONNX Runtime.

For every cell, hidden size and layer count, the nn.LSTM or nn.GRU that
bench_torch.py times (input_size == hidden_size, seed 0, batch 1) is
exported with torch.onnx.export (opset 14) to DIR/<cell>_h<H>_l<L>.onnx,
its sequence length left dynamic so one model serves every T. Beside the
models go

- DIR/floor.onnx: y = x + 1 on a [1, 1, 64] tensor, the least work a
  session can do; its time per call is ONNX Runtime's per-call floor;
- DIR/manifest.json: the models, and for each a check: a fixed input of 3
  steps and PyTorch's output for it, which scripts/ort_bench.js compares
  with ONNX Runtime's before timing anything.

A model already in DIR from the same torch version and shape is kept.

With --int8 the LSTM shapes are written instead as ONNX Runtime's int8
form, DIR/lstm_h<H>_l<L>_int8.onnx: one com.microsoft
DynamicQuantizeLSTM node per layer (joined by Squeeze), built with
Debian's onnx helper (ONNX Runtime's own quantization tool is not
packaged there), its weights the same module's quantized as rnnserve
quantizes them: int8 per output row, symmetric (scale max|w|/127, zero
point 0, round to nearest even). ONNX Runtime quantizes the activations
itself, per step. Its manifest entry says "precision": "int8" and holds a
check against PyTorch running the float LSTM on the dequantized weights,
within "tolerance" (1e-2: ONNX Runtime's activation rounding). ONNX
Runtime has no dynamically quantized GRU operator, so GRU shapes get
none.

Beside each such graph --int8 writes DIR/lstm_h<H>_l<L>_int8w7.onnx,
"precision": "int8w7": the same with 7-bit weights (scale max|w|/64,
values in [-64, 64]), as ONNX Runtime's quantizer writes them when asked
to reduce the range for CPUs without VNNI. There its products
(VPMADDUBSW) add pairs of unsigned activation and signed weight bytes
into int16 with saturation: 2·255·127 overflows it, 2·255·64 does not.

Usage (Debian's PyTorch, which carries the exporter):
    /usr/bin/python3 scripts/bench_onnx.py --out /tmp/rnnserve-onnx --hidden 64,256 --layers 1,4
    /usr/bin/python3 scripts/bench_onnx.py --out /tmp/rnnserve-onnx --int8 --hidden 512,1024 --layers 1
"""

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_torch  # noqa: E402  (flag parsing and defaults only)

OPSET = 14
CHECK_STEPS = 3
FLOOR_WIDTH = 64
INT8_TOLERANCE = 1e-2


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the models and manifest.json")
    ap.add_argument("--hidden", type=bench_torch.int_list, default=bench_torch.HIDDEN)
    ap.add_argument("--layers", type=bench_torch.int_list, default=bench_torch.LAYERS)
    ap.add_argument("--cells", type=bench_torch.cell_list, default=bench_torch.CELLS)
    ap.add_argument("--int8", action="store_true",
                    help="write the LSTM shapes as DynamicQuantizeLSTM graphs with int8 weights")
    return ap.parse_args(argv)


def log(msg):
    print(f"bench_onnx: {msg}", file=sys.stderr, flush=True)


def model_name(cell, hidden, layers, precision="f32"):
    suffix = "" if precision == "f32" else "_" + precision
    return f"{cell}_h{hidden}_l{layers}{suffix}.onnx"


# The int8 precisions written with --int8: the largest weight value each takes.
INT8_LEVELS = {"int8": 127, "int8w7": 64}


def quantize_rows(np, w, levels=127):
    """w [rows, cols] as int8 per row, symmetric, in [-levels, levels]:
    (q, scales); q = round(w / scale)."""
    amax = np.abs(w).max(axis=1)
    scale = (amax / levels).astype(np.float32)
    safe = np.where(amax > 0, amax, 1.0)
    q = np.clip(np.rint(w.astype(np.float64) * levels / safe[:, None]), -levels, levels).astype(np.int8)
    return q, scale


def onnx_order(np, m, hidden):
    """PyTorch's LSTM gate blocks i, f, g, o (rows) in ONNX's order i, o, f, c."""
    i, f, g, o = (m[k * hidden:(k + 1) * hidden] for k in range(4))
    return np.concatenate([i, o, f, g])


def int8_lstm(torch, onnx, np, module, hidden, layers, path, levels=127):
    """Write module as DynamicQuantizeLSTM layers to path, its weights in
    [-levels, levels]; return the module with its weights replaced by their
    dequantized values (the check's reference)."""
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits = [], []
    ref = build(torch, "lstm", hidden, layers)
    x = "x"
    for k in range(layers):
        b = []
        for kind in ("ih", "hh"):
            w = onnx_order(np, getattr(module, f"weight_{kind}_l{k}").detach().numpy(), hidden)
            q, scale = quantize_rows(np, w, levels)
            name = "W" if kind == "ih" else "R"
            inits += [numpy_helper.from_array(q.T[None].copy(), f"{name}{k}"),
                      numpy_helper.from_array(scale[None], f"{name}{k}_scale"),
                      numpy_helper.from_array(np.zeros((1, 4 * hidden), np.int8), f"{name}{k}_zp")]
            # The reference's weights: the same values dequantized, back in PyTorch's order.
            deq = q.astype(np.float32) * scale[:, None]
            i, o, f, g = (deq[j * hidden:(j + 1) * hidden] for j in range(4))
            getattr(ref, f"weight_{kind}_l{k}").data = torch.from_numpy(np.concatenate([i, f, g, o]))
            getattr(ref, f"bias_{kind}_l{k}").data = getattr(module, f"bias_{kind}_l{k}").detach().clone()
            b.append(onnx_order(np, getattr(module, f"bias_{kind}_l{k}").detach().numpy(), hidden))
        inits.append(numpy_helper.from_array(np.concatenate(b)[None].astype(np.float32), f"B{k}"))
        y = f"y{k}_4d"
        nodes.append(helper.make_node(
            "DynamicQuantizeLSTM", [x, f"W{k}", f"R{k}", f"B{k}", "", "", "", "",
                                    f"W{k}_scale", f"W{k}_zp", f"R{k}_scale", f"R{k}_zp"],
            [y], domain="com.microsoft", hidden_size=hidden, name=f"lstm{k}"))
        x = "y" if k == layers - 1 else f"y{k}"
        nodes.append(helper.make_node("Squeeze", [y, "axis1"], [x]))
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    graph = helper.make_graph(
        nodes, "int8_lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 1, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                     helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(path))
    return ref


def build(torch, cell, hidden, layers):
    """The module bench_torch.py times for this shape (same seed)."""
    torch.manual_seed(0)
    rnn_class = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
    return rnn_class(hidden, hidden, layers, batch_first=False).eval()


def export(torch, module, example, path, outputs, dynamic):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's shape-inference chatter
        torch.onnx.export(module, (example,), str(path), input_names=["x"], output_names=outputs,
                          dynamic_axes=dynamic, opset_version=OPSET)


def write_model(torch, args, old, cell, hidden, layers, precision):
    """Export one shape in one precision (or keep it, written before by the
    same torch); return its manifest entry."""
    name = model_name(cell, hidden, layers, precision)
    path = args.out / name
    entry = {"file": name, "cell": cell, "hidden": hidden, "layers": layers,
             "torch": torch.__version__, "opset": OPSET, "precision": precision}
    prev = old.get(name)
    if prev and path.exists() and all(prev.get(k, "f32" if k == "precision" else None) == v
                                      for k, v in entry.items()):
        return prev
    module = build(torch, cell, hidden, layers)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(CHECK_STEPS, 1, hidden, generator=gen) * 2 - 1
    if precision != "f32":
        import numpy as np
        import onnx
        y = int8_lstm(torch, onnx, np, module, hidden, layers, path, INT8_LEVELS[precision])(x)[0]
        entry["tolerance"] = INT8_TOLERANCE
    else:
        y = module(x)[0]
        outputs = ["y", "hn", "cn"] if cell == "lstm" else ["y", "hn"]
        export(torch, module, x, path, outputs, {"x": {0: "T"}, "y": {0: "T"}})
    entry["check"] = {"x": [round(v, 8) for v in x.flatten().tolist()],
                      "y": [round(v, 8) for v in y.flatten().tolist()],
                      "steps": CHECK_STEPS}
    log(f"exported {name} ({path.stat().st_size} bytes)")
    return entry


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as err:
        log(f"cannot import torch: {err}")
        return bench_torch.EXIT_NO_TORCH
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    old = {}
    if manifest_path.exists():
        try:
            old = {m["file"]: m for m in json.loads(manifest_path.read_text())["models"]}
        except (ValueError, KeyError):
            old = {}
    models = []
    with torch.no_grad():
        class AddOne(torch.nn.Module):
            def forward(self, x):
                return x + 1

        floor = args.out / "floor.onnx"
        if not floor.exists():
            export(torch, AddOne().eval(), torch.zeros(1, 1, FLOOR_WIDTH), floor, ["y"], None)
        precisions = list(INT8_LEVELS) if args.int8 else ["f32"]
        for precision in precisions:
            for cell in args.cells:
                if precision != "f32" and cell != "lstm":
                    if precision == "int8":
                        log(f"{cell}: ONNX Runtime has no dynamically quantized {cell.upper()} operator; none written")
                    continue
                for hidden in args.hidden:
                    for layers in args.layers:
                        models.append(write_model(torch, args, old, cell, hidden, layers, precision))
        # Keep the other precisions' models of the manifest.
        models += [m for name, m in old.items() if m.get("precision", "f32") not in precisions
                   and (args.out / name).exists() and all(name != n["file"] for n in models)]
    tmp = manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"floor": {"file": "floor.onnx", "width": FLOOR_WIDTH}, "models": models}) + "\n")
    os.replace(tmp, manifest_path)
    log(f"{len(models)} model(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
