#!/usr/bin/env python3
"""Export the bundled bytelm to ONNX for the ONNX Runtime peer (ort_serve.js).

The module is bytelm.py's BatchFirst (the safetensors weights in an
nn.Module of bytelm's shape), exported with Debian's torch.onnx.export
(opset 14) with B and T dynamic: input `tokens` int64 [B, T], outputs
`logits` [B, T, V] (log_softmax), `output` [B, T, H], `hidden` and `cell`
[B, L, H], as rnnserve names them, to OUT/bytelm.onnx; and the same without
the head (output, hidden and cell) to OUT/bytelm_state.onnx. ONNX Runtime's
inference build runs every node of a graph whatever outputs are fetched,
so the service runs the second for requests that want no head output,
as rnnserve and the PyTorch peer skip the head. Beside them, OUT/check.json holds a few
token batches and PyTorch's outputs for them, and the token vocabulary; ort_serve.js refuses to
serve unless ONNX Runtime's outputs match them within 1e-4.

Usage:
    /usr/bin/python3 scripts/peers/export_onnx.py --out /tmp/peers-onnx [--model-dir models/bundled/bytelm]
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bytelm  # noqa: E402

OPSET = 14
OUTPUTS = ["logits", "output", "hidden", "cell"]
STATE_OUTPUTS = ["output", "hidden", "cell"]
# (B, T) of the check batches: one row and several, one step and many.
CHECK_SHAPES = [(1, 1), (1, 32), (3, 17)]


class StateOnly(torch.nn.Module):
    """The graph without the head: output, hidden and cell."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens):
        return self.model.state(tokens)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for bytelm.onnx and check.json")
    ap.add_argument("--model-dir", type=Path, default=bytelm.DEFAULT_DIR)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = bytelm.load(args.model_dir)
    vocab = model.lm.embedding.num_embeddings
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bytelm.onnx"
    state_path = args.out / "bytelm_state.onnx"
    gen = torch.Generator().manual_seed(16)
    checks = []
    with torch.no_grad():
        example = torch.randint(0, vocab, (2, 5), generator=gen)
        dynamic = {"tokens": {0: "B", 1: "T"}, "logits": {0: "B", 1: "T"}, "output": {0: "B", 1: "T"},
                   "hidden": {0: "B"}, "cell": {0: "B"}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on LSTM batch sizes
            torch.onnx.export(model, (example,), str(path), input_names=["tokens"], output_names=OUTPUTS,
                              dynamic_axes=dynamic, opset_version=OPSET)
            torch.onnx.export(StateOnly(model), (example,), str(state_path), input_names=["tokens"],
                              output_names=STATE_OUTPUTS, dynamic_axes={k: dynamic[k] for k in ["tokens"] + STATE_OUTPUTS},
                              opset_version=OPSET)
        for b, t in CHECK_SHAPES:
            tokens = torch.randint(0, vocab, (b, t), generator=gen)
            got = dict(zip(OUTPUTS, model(tokens)))
            checks.append({"shape": [b, t], "tokens": tokens.flatten().tolist(),
                           "outputs": {n: {"shape": list(v.shape), "data": v.flatten().tolist()} for n, v in got.items()}})
    (args.out / "check.json").write_text(json.dumps({"torch": torch.__version__, "opset": OPSET, "vocab": vocab, "checks": checks}) + "\n")
    print(f"export_onnx: {path} ({path.stat().st_size} bytes), {state_path.name}, {len(checks)} checks", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
