"""The bundled bytelm as a PyTorch module, for the serving peers.

models/bundled/bytelm/README.md gives the module (embedding 256 x 48, a
2-layer nn.LSTM of 192, a Linear head over 256 bytes, log_softmax);
model.safetensors holds its state_dict under PyTorch's names. load() reads
model.yaml's shape (so the module follows the spec rather than a copy of
it), builds the module and loads the weights with strict=True: a missing,
extra or misshapen tensor is an error.

BatchFirst wraps it as rnnserve serves it: tokens [B, T] in, and logits
[B, T, V] (after log_softmax), output [B, T, H] (the last layer's h at each
step), hidden and cell [B, L, H] (the final state) out, from a zero initial
state. torch_serve.py runs it; export_onnx.py exports it for ONNX Runtime.
"""

import sys
from pathlib import Path

import torch
from torch import nn

SCRIPTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SCRIPTS))
from torch_golden import decode_safetensors  # noqa: E402

REPO = SCRIPTS.parent
DEFAULT_DIR = REPO / "models" / "bundled" / "bytelm"

# The spec keys this module honours; any other (bidirectional, proj_size,
# a second stack) would make it a different model.
SPEC_KEYS = {"cell", "input_size", "hidden_size", "num_layers", "embedding.vocab_size",
             "head.out_features", "head.activation", "weights"}


def read_spec(path):
    """The flat `key: value` lines of model.yaml that fix the shape, as a dict.

    The spec is plain YAML of scalars and one-level maps; PyYAML is not
    needed for it. Nested keys come back dotted (embedding.vocab_size).
    """
    spec, section = {}, None
    for raw in Path(path).read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if raw.startswith((" ", "\t")):
            if section is None:
                raise ValueError(f"{path}: indented line outside a section: {raw!r}")
            spec[f"{section}.{key}"] = value
        elif value:
            spec[key], section = value, None
        else:
            section = key
    return spec


class ByteLM(nn.Module):
    """bytelm's module, under the names of its state_dict."""

    def __init__(self, vocab, input_size, hidden, layers, head):
        super().__init__()
        self.embedding = nn.Embedding(vocab, input_size)
        self.rnn = nn.LSTM(input_size, hidden, num_layers=layers, batch_first=False)
        self.head = nn.Linear(hidden, head)


class BatchFirst(nn.Module):
    """Batch-first inputs and the four outputs rnnserve names."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, tokens):  # tokens: int64 [B, T]
        out, (h, c) = self.lm.rnn(self.lm.embedding(tokens.t()))
        logits = torch.log_softmax(self.lm.head(out), dim=-1)
        return logits.transpose(0, 1), out.transpose(0, 1), h.transpose(0, 1), c.transpose(0, 1)

    def state(self, tokens):
        """hidden and cell alone (the head skipped), as the module would run for them."""
        out, (h, c) = self.lm.rnn(self.lm.embedding(tokens.t()))
        return out.transpose(0, 1), h.transpose(0, 1), c.transpose(0, 1)


def load(model_dir=DEFAULT_DIR):
    """bytelm from model_dir (model.yaml and its weights), in eval mode."""
    model_dir = Path(model_dir)
    spec = read_spec(model_dir / "model.yaml")
    if spec.get("cell") != "lstm" or spec.get("head.activation") != "log_softmax" or set(spec) - SPEC_KEYS:
        raise ValueError(f"{model_dir}: want a unidirectional LSTM with a log_softmax head, got {spec}")
    lm = ByteLM(int(spec["embedding.vocab_size"]), int(spec["input_size"]), int(spec["hidden_size"]),
                int(spec["num_layers"]), int(spec["head.out_features"]))
    weights, _ = decode_safetensors((model_dir / spec.get("weights", "model.safetensors")).read_bytes())
    lm.load_state_dict(weights, strict=True)
    return BatchFirst(lm).eval()
