#!/usr/bin/env python3
"""Check that servers answer the same infer requests with the same outputs.

Sends a few bytelm requests (the load test's: one row of 32 tokens asking
for `hidden`; and others: several rows, one step, every output, last_step)
to each URL and compares every response with the first URL's (rnnserve):
the same output names, datatypes and shapes, the same id, and every value
within --tolerance (absolute). Then it sends the requests of
testdata/requests.json (the cases the peers' parsers are tested on) and
checks each server's status: the case's, or for the reference its
rnnserve_status where rnnserve differs on purpose (it serves more); the
over-size body is left out (a server may close the connection before the
client has sent it all). Prints one line per request and server and exits
1 at the first disagreement, so the load script times nothing that
computes something else or refuses differently.

Usage:
    python3 scripts/peers/compare.py --tolerance 1e-4 http://127.0.0.1:18080 http://127.0.0.1:18081 ...
"""

import argparse
import json
import random
import sys
import urllib.error
import urllib.request
from pathlib import Path

MODEL = "bytelm"
CASES = Path(__file__).resolve().parent / "testdata" / "requests.json"


def requests(vocab=256, seed=16):
    """The (B, T, outputs) requests compared, tokens drawn with seed."""
    rng = random.Random(seed)
    shapes = [
        (1, 32, [{"name": "hidden", "parameters": {"binary_data": False}}]),  # what loadgen sends
        (1, 32, [{"name": "cell"}, {"name": "logits", "parameters": {"last_step": True}}]),
        (1, 1, [{"name": "hidden"}, {"name": "output"}, {"name": "probs"}]),
        (4, 9, [{"name": "output", "parameters": {"last_step": True}}, {"name": "hidden"}, {"name": "cell"}]),
        (2, 100, None),  # no outputs: the default, logits
    ]
    out = []
    for i, (b, t, outputs) in enumerate(shapes):
        body = {"id": f"check-{i}", "inputs": [{"name": "tokens", "datatype": "INT64", "shape": [b, t],
                                                "data": [rng.randrange(vocab) for _ in range(b * t)]}]}
        if outputs is not None:
            body["outputs"] = outputs
        out.append(body)
    return out


def send(url, data):
    """POST data (bytes) to url's infer endpoint: (status, body bytes)."""
    req = urllib.request.Request(f"{url}/v2/models/{MODEL}/infer", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post(url, body):
    status, data = send(url, json.dumps(body).encode())
    if status != 200:
        raise RuntimeError(f"{url}: {status} {data[:300]!r}")
    return json.loads(data)


def case_bodies(path=CASES):
    """(name, body bytes, {"reference": status, "peer": status}) for each case but the over-size one."""
    out = []
    for c in json.loads(Path(path).read_text())["cases"]:
        if "body_bytes" in c:
            continue
        body = c["raw"].encode() if "raw" in c else json.dumps(c["body"]).encode()
        out.append((c["name"], body, {"reference": c.get("rnnserve_status", c["status"]), "peer": c["status"]}))
    return out


def diff(want, got):
    """The largest absolute difference between two responses, or a string saying how they differ in form."""
    if want.get("id") != got.get("id"):
        return f"id {got.get('id')!r}, want {want.get('id')!r}"
    wo, go = want.get("outputs", []), got.get("outputs", [])
    if [o["name"] for o in wo] != [o["name"] for o in go]:
        return f"outputs {[o['name'] for o in go]}, want {[o['name'] for o in wo]}"
    worst = 0.0
    for w, g in zip(wo, go):
        for key in ("datatype", "shape"):
            if w[key] != g[key]:
                return f"{w['name']}: {key} {g[key]}, want {w[key]}"
        if len(w["data"]) != len(g["data"]):
            return f"{w['name']}: {len(g['data'])} values, want {len(w['data'])}"
        for a, b in zip(w["data"], g["data"]):
            if not isinstance(b, (int, float)) or isinstance(b, bool):
                return f"{w['name']}: value {b!r} is not a number"
            worst = max(worst, abs(a - b))
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("urls", nargs="+", help="the reference server first")
    args = ap.parse_args(argv)
    if len(args.urls) < 2:
        ap.error("want the reference and at least one server to compare")
    ref, others = args.urls[0], args.urls[1:]
    for body in requests():
        want = post(ref, body)
        shape = body["inputs"][0]["shape"]
        names = [o["name"] for o in body.get("outputs", [])] or ["(default)"]
        for url in others:
            d = diff(want, post(url, body))
            ok = not isinstance(d, str) and d <= args.tolerance
            worst = d if isinstance(d, str) else f"max |diff| {d:.2e}"
            print(f"compare: {url} tokens {shape} {','.join(names)}: {worst} {'ok' if ok else 'MISMATCH'}", file=sys.stderr)
            if not ok:
                return 1
    bad = 0
    for name, body, want in case_bodies():
        for i, url in enumerate(args.urls):
            status, data = send(url, body)
            expect = want["reference" if i == 0 else "peer"]
            if status != expect:
                print(f"compare: {url} case {name!r}: status {status}, want {expect}: {data[:200]!r}", file=sys.stderr)
                bad += 1
    print(f"compare: {len(case_bodies())} request cases on {len(args.urls)} servers, {bad} with another status",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
