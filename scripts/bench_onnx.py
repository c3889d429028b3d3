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

Usage (Debian's PyTorch, which carries the exporter):
    /usr/bin/python3 scripts/bench_onnx.py --out /tmp/rnnserve-onnx --hidden 64,256 --layers 1,4
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


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the models and manifest.json")
    ap.add_argument("--hidden", type=bench_torch.int_list, default=bench_torch.HIDDEN)
    ap.add_argument("--layers", type=bench_torch.int_list, default=bench_torch.LAYERS)
    ap.add_argument("--cells", type=bench_torch.cell_list, default=bench_torch.CELLS)
    return ap.parse_args(argv)


def log(msg):
    print(f"bench_onnx: {msg}", file=sys.stderr, flush=True)


def model_name(cell, hidden, layers):
    return f"{cell}_h{hidden}_l{layers}.onnx"


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
        for cell in args.cells:
            for hidden in args.hidden:
                for layers in args.layers:
                    name = model_name(cell, hidden, layers)
                    path = args.out / name
                    entry = {"file": name, "cell": cell, "hidden": hidden, "layers": layers,
                             "torch": torch.__version__, "opset": OPSET}
                    prev = old.get(name)
                    if prev and path.exists() and all(prev.get(k) == v for k, v in entry.items()):
                        models.append(prev)
                        continue
                    module = build(torch, cell, hidden, layers)
                    gen = torch.Generator().manual_seed(1)
                    x = torch.rand(CHECK_STEPS, 1, hidden, generator=gen) * 2 - 1
                    y = module(x)[0]
                    outputs = ["y", "hn", "cn"] if cell == "lstm" else ["y", "hn"]
                    export(torch, module, x, path, outputs, {"x": {0: "T"}, "y": {0: "T"}})
                    entry["check"] = {"x": [round(v, 8) for v in x.flatten().tolist()],
                                      "y": [round(v, 8) for v in y.flatten().tolist()],
                                      "steps": CHECK_STEPS}
                    models.append(entry)
                    log(f"exported {name} ({path.stat().st_size} bytes)")
    tmp = manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"floor": {"file": "floor.onnx", "width": FLOOR_WIDTH}, "models": models}) + "\n")
    os.replace(tmp, manifest_path)
    log(f"{len(models)} model(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
