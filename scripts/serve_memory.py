#!/usr/bin/env python3
"""Memory of serve builds side by side with one large model loaded.

Each build serves a model repository holding one seeded random model
(default: a 4-layer hidden-1024 LSTM over a 256-token embedding, 128 MiB
of recurrent weights), answers one inference request (so the batcher's
lanes exist), and is read after a pause: its resident set (VmRSS and
AnonHugePages from /proc), and from /metrics the Go heap in use and the
bytes on huge pages (rnnserve_hugepage_mapped_bytes). The builds take
turns, the order swapped every round; the table gives each build's median
and the ratio of the last build to the first. The resident peak (VmHWM,
"hwm") counts what the load held for a while and let go again, such as
programs built, timed and dropped.

    go build -o /tmp/a/serve ./cmd/serve     # on the old commit
    go build -o /tmp/b/serve ./cmd/serve     # on the new one
    python3 scripts/serve_memory.py /tmp/a/serve /tmp/b/serve [--rounds 3]

Extra serve flags follow --serve-args, e.g. --serve-args=-huge-pages=off.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, data=None, timeout=30):
    req = urllib.request.Request(url, data=data)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def proc_kib(pid, path, field):
    with open(f"/proc/{pid}/{path}") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def metric(text, name):
    m = re.search(r"(?m)^" + re.escape(name) + r" (\S+)$", text)
    return float(m.group(1)) if m else float("nan")


def measure(binary, repo, model, extra, pause):
    port = free_port()
    args = [binary, "-listen", f"127.0.0.1:{port}", "-grpc-listen", "off",
            "-model-repository", repo, "-lame-duck", "0s", "-log-access=off"] + extra
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            if p.poll() is not None:
                raise SystemExit(f"{binary} exited: {p.stderr.read().decode()[-2000:]}")
            try:
                get(base + f"/v2/models/{model}/ready", timeout=2)
                break
            except Exception:
                if time.time() > deadline:
                    raise SystemExit(f"{binary}: model not ready in 120 s")
                time.sleep(0.2)
        body = json.dumps({"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 8],
                                       "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}).encode()
        get(base + f"/v2/models/{model}/infer", data=body)
        time.sleep(pause)
        text = get(base + "/metrics")
        return {
            "rss_mib": proc_kib(p.pid, "status", "VmRSS") / 2**20,
            "hwm_mib": proc_kib(p.pid, "status", "VmHWM") / 2**20,
            "anon_huge_mib": proc_kib(p.pid, "smaps_rollup", "AnonHugePages") / 2**20,
            "heap_inuse_mib": metric(text, "go_memstats_heap_inuse_bytes") / 2**20,
            "mapped_mib": metric(text, "rnnserve_hugepage_mapped_bytes") / 2**20,
        }
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("serve", nargs="+", help="serve binaries")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cell", default="lstm")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between the request and the reading")
    ap.add_argument("--serve-args", default="", help="extra serve flags, space-separated")
    a = ap.parse_args()
    bins = [os.path.realpath(b) for b in a.serve]
    extra = a.serve_args.split()
    with tempfile.TemporaryDirectory() as repo:
        model = f"{a.cell}{a.hidden}x{a.layers}"
        os.mkdir(os.path.join(repo, model))
        with open(os.path.join(repo, model, "model.yaml"), "w") as f:
            f.write(f"cell: {a.cell}\ninput_size: {a.hidden}\nhidden_size: {a.hidden}\n"
                    f"num_layers: {a.layers}\nembedding: {{vocab_size: 256}}\n"
                    f"head: {{out_features: 256, activation: log_softmax}}\nseed: 1\n")
        runs = {b: [] for b in bins}
        for r in range(a.rounds):
            order = bins if r % 2 == 0 else bins[::-1]
            for b in order:
                runs[b].append(measure(b, repo, model, extra, a.pause))
    keys = ["rss_mib", "hwm_mib", "anon_huge_mib", "heap_inuse_mib", "mapped_mib"]
    print(f"model {model}, {a.rounds} rounds, medians in MiB" + (f", serve {a.serve_args}" if extra else ""))
    print(f"{'build':40s}" + "".join(f"{k[:-4]:>14s}" for k in keys))
    for b in bins:
        print(f"{b[-40:]:40s}" + "".join(f"{statistics.median(x[k] for x in runs[b]):14.1f}" for k in keys))
    if len(bins) > 1:
        first, last = bins[0], bins[-1]
        print(f"{'last/first':40s}" + "".join(
            f"{statistics.median(x[k] for x in runs[last]) / statistics.median(x[k] for x in runs[first]):14.2f}"
            if statistics.median(x[k] for x in runs[first]) else f"{'-':>14s}" for k in keys))


if __name__ == "__main__":
    main()
