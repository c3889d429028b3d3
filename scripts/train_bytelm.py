#!/usr/bin/env python3
"""Train the bundled byte-level LSTM language model (models/bundled/bytelm).

The model reads raw bytes (vocabulary 256) and predicts the next byte. It is
trained on the licence texts that every Debian system ships in
/usr/share/common-licenses (the fixed list FILES below; the symlinks GFDL,
GPL and LGPL there are duplicates and are skipped). The files are read in
the sorted order of FILES and concatenated as they are; the first 90% of the
bytes (floor(0.9 * total)) are the training text and the last 10% are held
out (heldout.bin). The held-out bytes are never trained on; their loss is
printed during training for information only, the final model is the one
after the last step, not the best on held-out.

Training: truncated BPTT over BATCH parallel streams of the training text,
SEQ bytes per step with the LSTM state carried (detached) from chunk to
chunk within an epoch; each epoch starts the streams at a seeded random
offset. PyTorch's default initialisation except a forget-gate bias of 1.
Adam, linear warm-up then cosine decay of the learning rate, gradient norm
clipping, a fixed seed, 2 threads.

Outputs, in models/bundled/bytelm/ (or --out):

    model.yaml          the rnnserve model spec
    model.safetensors   float32 state_dict() of ByteLM (written by the small
                        writer below; the safetensors package is not needed)
    heldout.bin         the held-out bytes (the whole last 10%, or its first
                        32768 bytes if it were longer than 64 KiB)
    eval.json           PyTorch float32 evaluation on heldout.bin, data
                        files and sha256, hyperparameters, timings
    README.md           description, perplexity and a sample

Usage (from the repository root):

    /usr/bin/python3 scripts/train_bytelm.py
    /usr/bin/python3 scripts/train_bytelm.py --steps 20 --out /tmp/bytelm   # smoke test
    /usr/bin/python3 scripts/train_bytelm.py --resume       # continue after a kill
    /usr/bin/python3 scripts/train_bytelm.py --readme-only  # README.md from eval.json
    /usr/bin/python3 scripts/train_bytelm.py --int8-eval    # PyTorch's int8 on heldout.bin

--int8-eval trains nothing: it loads the committed model.safetensors and
prints the held-out bits per byte of the model in float32 and with its
LSTM dynamically quantized by PyTorch (quantize_dynamic: int8 weights per
output row, symmetric, as rnnserve's precision int8; activations
quantized per step; the embedding and head float32, as in rnnserve), an
independent reference for the change int8 costs (docs/precision.md).

A checkpoint (model, optimizer, data position, RNG and LSTM state) is saved
every CKPT_EVERY steps to --ckpt (default /tmp/train_bytelm.ckpt); --resume
continues from it and gives the same result as an uninterrupted run, up to
the floating point nondeterminism noted below.

Retraining on another machine (or torch version) may give slightly different
weights, because the order of floating point reductions depends on thread
scheduling and the BLAS in use; that is why the weights are committed.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "models" / "bundled" / "bytelm"
DATA_DIR = Path("/usr/share/common-licenses")

# Plain-text licence files present on Debian 12 (bookworm); sorted. The
# symlinks GFDL -> GFDL-1.3, GPL -> GPL-3 and LGPL -> LGPL-3 are skipped.
FILES = [
    "Apache-2.0",
    "Artistic",
    "BSD",
    "CC0-1.0",
    "GFDL-1.2",
    "GFDL-1.3",
    "GPL-1",
    "GPL-2",
    "GPL-3",
    "LGPL-2",
    "LGPL-2.1",
    "LGPL-3",
    "MPL-1.1",
    "MPL-2.0",
]

HELDOUT_FRACTION = 0.10
HELDOUT_MAX = 64 * 1024   # longer held-out parts are cut to HELDOUT_KEEP bytes
HELDOUT_KEEP = 32768

# Model shape.
E = 48   # embedding width = LSTM input size
H = 192  # LSTM hidden size
L = 2    # LSTM layers

# Training.
SEED = 20240521
THREADS = 2
SEQ = 32
BATCH = 32
STEPS = 1200
LR = 4e-3
LR_MIN = 1e-4
WARMUP = 30
CLIP = 1.0
LOG_EVERY = 40
HELDOUT_EVERY = 400
CKPT_EVERY = 50

# Sampling for the README.
PROMPT = "This program is free software"
SAMPLE_TEMPERATURE = 0.8
SAMPLE_SEED = 7
SAMPLE_BYTES = 400
FIRST_LOGPROBS = 20


class ByteLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(256, E)
        self.rnn = nn.LSTM(E, H, num_layers=L, batch_first=False)  # bias=True, no proj
        self.head = nn.Linear(H, 256)

    def forward(self, tokens, state=None):   # tokens: LongTensor [T, B]
        out, state = self.rnn(self.embedding(tokens), state)
        return self.head(out), state           # logits [T, B, 256]


# ---------------------------------------------------------------------------
# data


def load_data():
    """Returns (text bytes, [{"name", "bytes", "sha256"}])."""
    parts, listing = [], []
    for name in FILES:
        path = DATA_DIR / name
        if path.is_symlink() or not path.is_file():
            sys.exit(f"train_bytelm: {path} is missing or not a regular file")
        data = path.read_bytes()
        parts.append(data)
        listing.append({"name": name, "bytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    return b"".join(parts), listing


def split(text):
    cut = int(len(text) * (1 - HELDOUT_FRACTION))
    train, held = text[:cut], text[cut:]
    if len(held) > HELDOUT_MAX:
        held = held[:HELDOUT_KEEP]
    return cut, train, held


def locate(offset, listing):
    """Names the file and in-file offset of a byte of the concatenation."""
    for f in listing:
        if offset < f["bytes"]:
            return f["name"], offset
        offset -= f["bytes"]
    return None, offset


# ---------------------------------------------------------------------------
# safetensors writer


def write_safetensors(path, tensors, metadata=None):
    """Writes float32 tensors: u64le header length N, N bytes of JSON padded
    with spaces to a multiple of 8, then the tensors' little-endian bytes in
    sorted-name order, contiguous; offsets are relative to the data start."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        raw = t.numpy().astype("<f4", copy=False).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Reads back a file written above (F32 only), for a self-check."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base, out = 8 + n, {}
    for name, info in header.items():
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        a = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


# ---------------------------------------------------------------------------
# training


def lr_at(step, steps):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    p = (step - WARMUP) / max(1, steps - WARMUP)
    return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * p))


class Batches:
    """The training chunks: next() returns (epoch, x, y, first) with x, y
    [SEQ, BATCH] input and target chunks of BATCH parallel streams; first is
    True at the start of an epoch, when the LSTM state must be reset. Each
    epoch starts the streams at an offset in [0, SEQ) drawn from gen. The
    position can be saved and restored (state_dict) for resuming."""

    def __init__(self, train, gen):
        self.data = torch.tensor(list(train), dtype=torch.long)
        self.gen = gen
        self.epoch = -1
        self.i = self.n = 0

    def _start_epoch(self, off):
        self.off = off
        n = (len(self.data) - 1 - off) // BATCH
        self.n = n - n % SEQ
        self.xs = self.data[off:off + BATCH * self.n].view(BATCH, self.n).t()
        self.ys = self.data[off + 1:off + 1 + BATCH * self.n].view(BATCH, self.n).t()
        self.i = 0

    def next(self):
        if self.i >= self.n:
            self.epoch += 1
            self._start_epoch(int(torch.randint(0, SEQ, (1,), generator=self.gen)))
        i = self.i
        self.i += SEQ
        return self.epoch, self.xs[i:i + SEQ], self.ys[i:i + SEQ], i == 0

    def state_dict(self):
        return {"gen": self.gen.get_state(), "epoch": self.epoch,
                "off": getattr(self, "off", 0), "i": self.i}

    def load_state_dict(self, d):
        self.gen.set_state(d["gen"])
        self.epoch = d["epoch"]
        if self.epoch >= 0:
            self._start_epoch(d["off"])
            self.i = d["i"]


@torch.no_grad()
def quick_heldout(model, held, streams=8):
    """Approximate held-out loss (streams in parallel), for progress only."""
    data = torch.tensor(list(held), dtype=torch.long)
    n = (len(data) - 1) // streams
    x = data[:streams * n].view(streams, n).t()
    y = data[1:1 + streams * n].view(streams, n).t()
    model.eval()
    logits, _ = model(x)
    model.train()
    return F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1)).item()


@torch.no_grad()
def evaluate(model, held):
    """The exact evaluation: one sequence, batch 1, zero state, float32.
    Returns per-position log p(byte[i+1] | byte[0..i]) as float32."""
    model.eval()
    x = torch.tensor(list(held), dtype=torch.long).view(-1, 1)
    logits, _ = model(x[:-1])
    logp = F.log_softmax(logits.float(), dim=-1)[:, 0, :]
    return logp.gather(1, x[1:]).view(-1)


def int8_eval(out):
    """Print the held-out bits per byte of the committed model in float32
    and with its LSTM quantized by torch's quantize_dynamic."""
    torch.set_num_threads(THREADS)
    model = ByteLM()
    model.load_state_dict(read_safetensors(out / "model.safetensors"))
    held = (out / "heldout.bin").read_bytes()
    qa = torch.ao.quantization
    qconfig = qa.QConfig(activation=qa.default_dynamic_quant_observer,
                         weight=qa.default_per_channel_weight_observer)
    quant = qa.quantize_dynamic(model, {nn.LSTM: qconfig}, dtype=torch.qint8)
    if type(quant.rnn) is nn.LSTM:
        raise SystemExit("train_bytelm: quantize_dynamic left the LSTM in float")
    bpb = {}
    for name, m in (("float32", model), ("int8", quant)):
        bpb[name] = -float(evaluate(m, held).double().mean()) / math.log(2)
    for name in ("float32", "int8"):
        print(f"held-out bits per byte, PyTorch {name} ({torch.backends.quantized.engine} engine for int8): "
              f"{bpb[name]:.5f} ({100 * (bpb[name] / bpb['float32'] - 1):+.3f}%) over {len(held)} bytes")


@torch.no_grad()
def sample(model, prompt, nbytes, temperature, seed):
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.tensor(list(prompt.encode()), dtype=torch.long).view(-1, 1)
    logits, state = model(tokens)
    out = bytearray(prompt.encode())
    last = logits[-1, 0]
    for _ in range(nbytes):
        probs = F.softmax(last / temperature, dim=-1)
        b = int(torch.multinomial(probs, 1, generator=gen))
        out.append(b)
        logits, state = model(torch.tensor([[b]]), state)
        last = logits[-1, 0]
    return bytes(out).decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------
# outputs


MODEL_YAML = f"""\
# Generated by scripts/train_bytelm.py
cell: lstm
input_size: {E}
hidden_size: {H}
num_layers: {L}
embedding:
  vocab_size: 256
head:
  out_features: 256
  activation: log_softmax
weights: model.safetensors
"""


def heldout_files(ev):
    """Describes which files the held-out part covers, e.g. "the rest of
    `MPL-1.1` and all of `MPL-2.0`"."""
    d = ev["data"]
    names = [f["name"] for f in d["files"]]
    first = names.index(d["heldout_starts_in_file"])
    parts = []
    if d["heldout_starts_in_file_offset"] > 0:
        parts.append(f"the rest of `{names[first]}`")
        first += 1
    rest = names[first:]
    if rest:
        parts.append("all of " + ", ".join(f"`{n}`" for n in rest))
    return " and ".join(parts)


def readme(ev, sample_text):
    files = "\n".join(f"| `{f['name']}` | {f['bytes']} | `{f['sha256'][:16]}…` |"
                      for f in ev["data"]["files"])
    hp = ev["hyperparameters"]
    sample_block = "\n".join("    " + line for line in sample_text.splitlines())
    return f"""\
<!-- Generated by scripts/train_bytelm.py; edit the script, not this file. -->
# bytelm: a byte-level LSTM language model

A small character (byte) level language model trained on software licence
texts. It reads raw bytes (token = byte value, vocabulary 256) and its head
gives `log_softmax` scores for the next byte. It is a real trained model for
tests, examples and benchmarks of rnnserve: its output is checked against
PyTorch in `eval.json`, and a sample of its text is below.

| | |
|---|---|
| cell | LSTM, {L} layers, hidden {H}, no projection, unidirectional |
| embedding | 256 × {E} (`input_size: {E}`) |
| head | Linear {H} → 256, `log_softmax` |
| parameters | {ev['parameters']} float32 ({ev['parameters'] * 4} bytes) |
| held-out perplexity | **{ev['perplexity']:.3f}** ({ev['mean_nll']:.4f} nats/byte, {ev['mean_nll'] / math.log(2):.3f} bits/byte) over {ev['tokens'] - 1} predictions |
| unigram baseline | perplexity {ev['unigram_baseline_perplexity']:.2f} on the same bytes (byte frequencies of the training text) |
| training perplexity | {math.exp(ev['final_train_loss']):.2f} (final training loss, see below) |
| torch | {ev['torch_version']} |
| training | {hp['steps']} steps, {ev['training_seconds']:.0f} s wall time, {ev['training_cpu_seconds']:.0f} s CPU time, {hp['threads']} threads |

## Files

- `model.yaml`: the rnnserve spec.
- `model.safetensors`: `state_dict()` of the PyTorch module below, all F32
  (`embedding.weight`, `rnn.weight_ih_l0` … `rnn.bias_hh_l{L - 1}`, `head.weight`,
  `head.bias`).
- `heldout.bin`: the held-out evaluation bytes ({ev['tokens']} bytes).
- `eval.json`: the PyTorch evaluation of the final model on `heldout.bin`,
  computed as one sequence, batch 1, from a zero state, in float32: the
  model predicts byte i+1 from bytes 0..i, so there are `tokens - 1`
  predictions; `nll_sum` is the sum of −log p(true next byte) (float32
  log_softmax values summed in float64), `mean_nll = nll_sum / (tokens - 1)`,
  `perplexity = exp(mean_nll)`, and `first_logprobs` are the first
  {FIRST_LOGPROBS} per-position log-probabilities of the true next byte. It
  also records the data files and their sha256, the hyperparameters, the
  training time and the final training loss.

```python
class ByteLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(256, {E})
        self.rnn = nn.LSTM({E}, {H}, num_layers={L}, batch_first=False)
        self.head = nn.Linear({H}, 256)
    def forward(self, tokens, state=None):   # tokens: LongTensor [T, B]
        out, state = self.rnn(self.embedding(tokens), state)
        return self.head(out), state           # logits [T, B, 256]
```

## Data and split

The plain-text licences in Debian's `/usr/share/common-licenses` (the
symlinks `GFDL`, `GPL`, `LGPL` there duplicate other files and are
skipped), read in this order and concatenated as they are
({ev['data']['total_bytes']} bytes):

| file | bytes | sha256 |
|---|---|---|
{files}

The held-out part is mostly Mozilla licence text, whose wording differs
from the GNU licences that dominate the training text, so the held-out
perplexity is well above the training perplexity: the model has learnt
English licence words and layout, not the MPL itself. The full digests are
in `eval.json`. The first 90% of the concatenation
(bytes 0 … {ev['data']['split_offset'] - 1}) is the training text; the last
10% (from byte {ev['data']['split_offset']}, which is offset
{ev['data']['heldout_starts_in_file_offset']} of `{ev['data']['heldout_starts_in_file']}`,
to the end: {heldout_files(ev)}) is held out, and is `heldout.bin` as a
whole ({ev['data']['heldout_bytes']} bytes, sha256 `{ev['data']['heldout_sha256'][:16]}…`).
The held-out bytes were never trained on. Their loss is only printed as
progress, and the model is the one after the last training step, not the
best on held-out. It is not entirely unseen by the hyperparameter choice,
though: an earlier run (64 bytes per step, 1000 steps) reached perplexity
8.81, and the held-out progress of a longer run with 32 bytes per step
(killed before it finished) is why the values below were chosen.

## Training

Truncated BPTT: {hp['batch']} parallel streams of the training text,
{hp['seq']} bytes per step, LSTM state carried (detached) between the chunks
of an epoch and reset at each epoch, whose streams start at a seeded random
offset. PyTorch's default initialisation except forget-gate biases
(`bias_ih`) of 1. Adam (lr {hp['lr']}, {hp['warmup']} warm-up steps, cosine decay to
{hp['lr_min']}), gradient norm clipped to {hp['clip']}, {hp['steps']} steps
(≈{hp['epochs']:.1f} epochs), seed {hp['seed']}, `torch.set_num_threads({hp['threads']})`.
Final training loss {ev['final_train_loss']:.4f} nats/byte (mean of the last
{ev['final_train_loss_window']} steps).

The committed run took {ev['training_seconds'] / 60:.0f} minutes of wall time
and {ev['training_cpu_seconds'] / 60:.0f} minutes of CPU time summed over its
{hp['threads']} threads ({ev['training_resumes']} resumes from a checkpoint); the
machine's 2 cores were shared with other jobs, so on an idle 2-core machine
expect about {ev['training_cpu_seconds'] / hp['threads'] / 60:.0f} minutes. To
retrain, from the repository root:

    /usr/bin/python3 scripts/train_bytelm.py

(add `--resume` to continue from the checkpoint in `/tmp/train_bytelm.ckpt`
after an interruption).

Seeds are fixed, but retraining on another machine or torch version may
give slightly different weights (the order of floating point reductions
depends on thread scheduling and the BLAS in use), and a different Debian
release may ship different licence texts (the script prints their sha256;
compare with `eval.json`). That is why the weights are committed rather than
rebuilt.

## Sample

{SAMPLE_BYTES} bytes sampled at temperature {SAMPLE_TEMPERATURE} (seed
{SAMPLE_SEED}, `torch.multinomial`) after the prompt "{PROMPT}". A
model this small trained on 200 KB writes licence-flavoured near-English:
real words and phrases ("the source", "the License", "a public License")
mixed with invented ones.

{sample_block}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--ckpt", type=Path, default=Path("/tmp/train_bytelm.ckpt"),
                    help=f"checkpoint written every {CKPT_EVERY} steps (outside the repository)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from --ckpt if it exists (same configuration)")
    ap.add_argument("--readme-only", action="store_true",
                    help="rewrite README.md from the existing eval.json, train nothing")
    ap.add_argument("--int8-eval", action="store_true",
                    help="bits per byte on heldout.bin in float32 and with PyTorch's int8 LSTM, train nothing")
    args = ap.parse_args()
    if args.int8_eval:
        int8_eval(args.out)
        return
    if args.readme_only:
        ev = json.loads((args.out / "eval.json").read_text())
        (args.out / "README.md").write_text(readme(ev, ev["sample"]["text"]))
        print(f"wrote {args.out / 'README.md'}")
        return

    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    np.random.seed(SEED)

    text, listing = load_data()
    cut, train, held = split(text)
    where, where_off = locate(cut, listing)
    print(f"data: {len(text)} bytes from {len(FILES)} files; train {len(train)}, "
          f"held-out {len(held)} (from byte {cut} = {where}+{where_off})", flush=True)
    for f in listing:
        print(f"  {f['name']:<12} {f['bytes']:>6}  {f['sha256']}")

    # Unigram baseline: training byte frequencies (add-one), scored on held-out.
    counts = np.bincount(np.frombuffer(train, dtype=np.uint8), minlength=256) + 1.0
    logq = np.log(counts / counts.sum())
    hb = np.frombuffer(held, dtype=np.uint8)
    unigram_ppl = float(np.exp(-logq[hb[1:]].mean()))
    print(f"unigram baseline held-out perplexity {unigram_ppl:.3f}", flush=True)

    model = ByteLM()
    with torch.no_grad():  # forget-gate bias 1 (gate order i, f, g, o): faster start
        for k in range(L):
            getattr(model.rnn, f"bias_ih_l{k}")[H:2 * H].fill_(1.0)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: E={E} H={H} L={L}, {nparams} parameters ({nparams * 4 / 1e6:.2f} MB f32)")
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(SEED)

    losses = []
    state = None
    it = Batches(train, gen)
    start, prev_wall, prev_cpu, resumes = 0, 0.0, 0.0, 0
    ckpt_config = {"E": E, "H": H, "L": L, "SEQ": SEQ, "BATCH": BATCH, "steps": args.steps,
                   "LR": LR, "LR_MIN": LR_MIN, "WARMUP": WARMUP, "CLIP": CLIP, "SEED": SEED,
                   "data": [f["sha256"] for f in listing]}
    if args.resume and args.ckpt.exists():
        ck = torch.load(args.ckpt)
        if ck["config"] != ckpt_config:
            sys.exit(f"train_bytelm: {args.ckpt} is from a different configuration; delete it")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        it.load_state_dict(ck["batches"])
        state, losses, start = ck["state"], ck["losses"], ck["step"]
        prev_wall, prev_cpu, resumes = ck["wall"], ck["cpu"], ck["resumes"] + 1
        print(f"resumed from {args.ckpt} at step {start} ({prev_wall:.0f}s so far)", flush=True)
    t0, c0 = time.time(), time.process_time()
    model.train()
    for step in range(start, args.steps):
        epoch, x, y, first = it.next()
        if first:
            state = None
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps)
        logits, state = model(x, state)
        state = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        gnorm = nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0 or step == 0:
            el = prev_wall + time.time() - t0
            recent = sum(losses[-LOG_EVERY:]) / len(losses[-LOG_EVERY:])
            print(f"step {step + 1:>5}/{args.steps} epoch {epoch:>2} lr {lr_at(step, args.steps):.2e} "
                  f"loss {recent:.4f} (ppl {math.exp(recent):6.2f}) gnorm {float(gnorm):.2f} "
                  f"{el:6.0f}s ({el / (step + 1):.2f}s/step)", flush=True)
        if (step + 1) % HELDOUT_EVERY == 0 and step + 1 < args.steps:
            hl = quick_heldout(model, held)
            print(f"  held-out (approx., progress only) loss {hl:.4f} ppl {math.exp(hl):.3f}", flush=True)
        if args.ckpt and (step + 1) % CKPT_EVERY == 0 and step + 1 < args.steps:
            tmp = args.ckpt.with_name(args.ckpt.name + ".tmp")
            torch.save({"config": ckpt_config, "step": step + 1, "model": model.state_dict(),
                        "opt": opt.state_dict(), "batches": it.state_dict(), "state": state,
                        "losses": losses, "wall": prev_wall + time.time() - t0,
                        "cpu": prev_cpu + time.process_time() - c0, "resumes": resumes}, tmp)
            os.replace(tmp, args.ckpt)
    train_seconds = prev_wall + time.time() - t0
    train_cpu_seconds = prev_cpu + time.process_time() - c0
    window = min(LOG_EVERY, len(losses))
    final_train_loss = sum(losses[-window:]) / window
    print(f"trained {args.steps} steps in {train_seconds:.0f}s; final train loss {final_train_loss:.4f}")

    args.out.mkdir(parents=True, exist_ok=True)
    sd = model.state_dict()
    st_path = args.out / "model.safetensors"
    write_safetensors(st_path, sd)
    (args.out / "model.yaml").write_text(MODEL_YAML)
    (args.out / "heldout.bin").write_bytes(held)

    # Evaluate a model loaded back from the written file, so eval.json
    # describes exactly the committed weights.
    back = read_safetensors(st_path)
    assert sorted(back) == sorted(sd), "safetensors names differ"
    for k in sd:
        assert torch.equal(back[k], sd[k].float()), k
    model = ByteLM()
    model.load_state_dict(back)
    t1 = time.time()
    lp = evaluate(model, held)
    eval_seconds = time.time() - t1
    nll_sum = -float(lp.double().sum())
    npred = len(held) - 1
    mean_nll = nll_sum / npred
    ppl = math.exp(mean_nll)
    print(f"held-out: {len(held)} bytes, {npred} predictions, nll_sum {nll_sum:.4f}, "
          f"mean {mean_nll:.5f} nats/byte, perplexity {ppl:.4f} ({eval_seconds:.1f}s)", flush=True)

    sample_text = sample(model, PROMPT, SAMPLE_BYTES, SAMPLE_TEMPERATURE, SAMPLE_SEED)
    print("sample:\n" + sample_text, flush=True)

    steps_per_epoch = ((len(train) - 1) // BATCH) // SEQ
    ev = {
        "tokens": len(held),
        "predictions": npred,
        "nll_sum": nll_sum,
        "mean_nll": mean_nll,
        "perplexity": ppl,
        "first_logprobs": [float(v) for v in lp[:FIRST_LOGPROBS]],
        "evaluation": "heldout.bin as one sequence, batch 1, zero initial state, float32; "
                      "byte i+1 predicted from bytes 0..i; log_softmax in float32, summed in float64",
        "unigram_baseline_perplexity": unigram_ppl,
        "torch_version": torch.__version__,
        "parameters": nparams,
        "data": {
            "dir": str(DATA_DIR),
            "files": listing,
            "total_bytes": len(text),
            "split": "concatenation of files in this order; training = bytes [0, split_offset), "
                     "held-out = bytes [split_offset, total_bytes) with split_offset = floor(0.9 * total_bytes)",
            "split_offset": cut,
            "train_bytes": len(train),
            "heldout_bytes": len(held),
            "heldout_starts_in_file": where,
            "heldout_starts_in_file_offset": where_off,
            "heldout_sha256": hashlib.sha256(held).hexdigest(),
        },
        "hyperparameters": {
            "embedding_dim": E, "hidden_size": H, "num_layers": L,
            "seq": SEQ, "batch": BATCH, "steps": args.steps,
            "epochs": args.steps / steps_per_epoch,
            "optimizer": "Adam", "lr": LR, "lr_min": LR_MIN, "warmup": WARMUP,
            "schedule": "linear warm-up then cosine decay", "clip": CLIP,
            "seed": SEED, "threads": THREADS,
        },
        "training_seconds": train_seconds,
        "training_cpu_seconds": train_cpu_seconds,
        "training_resumes": resumes,
        "final_train_loss": final_train_loss,
        "final_train_loss_window": window,
        "sample": {"prompt": PROMPT, "temperature": SAMPLE_TEMPERATURE,
                   "seed": SAMPLE_SEED, "bytes": SAMPLE_BYTES, "text": sample_text},
    }
    (args.out / "eval.json").write_text(json.dumps(ev, indent=2) + "\n")
    (args.out / "README.md").write_text(readme(ev, sample_text))
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
