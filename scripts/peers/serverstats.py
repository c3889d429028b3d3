#!/usr/bin/env python3
"""What rnnserve did during one load-test run, from its own statistics.

Before and after a run, `snapshot` saves the model's statistics
(/v2/models/MODEL/stats) and the batching counters of /metrics; `row`
prints one Markdown row of what happened in between, per successful
request: time queued, decoding the request, running it and building the
outputs (server-side, as the statistics extension counts them), how many
requests ran alone as whole plans (solo) and how many of those across
every core (wide), the batched steps and their mean rows.

Usage:
    python3 scripts/peers/serverstats.py snapshot URL MODEL FILE
    python3 scripts/peers/serverstats.py header
    python3 scripts/peers/serverstats.py row BEFORE AFTER --label L --clients C --steps T
"""

import argparse
import json
import sys
import urllib.request

COUNTERS = ("rnnserve_solo_plans_total", "rnnserve_wide_plans_total", "rnnserve_steps_total", "rnnserve_tokens_total")
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


def parse_metrics(text, model):
    """The COUNTERS of model in Prometheus text (0 when absent)."""
    out = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels, _, value = rest.rpartition("}")
        if name in out and f'model="{model}"' in labels.split(","):
            out[name] = float(value.split()[0])
    return out


def snapshot(url, model):
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"][0]
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        metrics = parse_metrics(r.read().decode(), model)
    return {"stats": stats["inference_stats"], "metrics": metrics}


HEADER = ("| run | clients | requests | queue µs | decode µs | infer µs | output µs | solo plans | wide plans "
          "| batched steps | rows per batched step |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def row(before, after, label, clients, steps):
    n = after["stats"]["success"]["count"] - before["stats"]["success"]["count"]
    m = {k: after["metrics"][k] - before["metrics"][k] for k in COUNTERS}
    if n <= 0:
        return f"| {label} | {clients} | 0 |" + " - |" * 8
    per = [(after["stats"][p]["ns"] - before["stats"][p]["ns"]) / n / 1000 for p in PHASES]
    solo, wide, batched = m["rnnserve_solo_plans_total"], m["rnnserve_wide_plans_total"], m["rnnserve_steps_total"]
    rows = (m["rnnserve_tokens_total"] - solo * steps) / batched if batched > 0 else None
    cells = [label, str(clients), str(n)] + [f"{v:,.0f}" for v in per]
    cells += [f"{solo:.0f} ({100 * solo / n:.0f}%)", f"{wide:.0f}", f"{batched:.0f}", "-" if rows is None else f"{rows:.1f}"]
    return "| " + " | ".join(cells) + " |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("url")
    s.add_argument("model")
    s.add_argument("file")
    sub.add_parser("header")
    r = sub.add_parser("row")
    r.add_argument("before")
    r.add_argument("after")
    r.add_argument("--label", required=True)
    r.add_argument("--clients", type=int, required=True)
    r.add_argument("--steps", type=int, required=True, help="tokens per request (solo plans' share of the tokens)")
    args = ap.parse_args(argv)
    if args.cmd == "snapshot":
        with open(args.file, "w", encoding="utf-8") as f:
            json.dump(snapshot(args.url, args.model), f)
    elif args.cmd == "header":
        print(HEADER)
    else:
        with open(args.before, encoding="utf-8") as f:
            before = json.load(f)
        with open(args.after, encoding="utf-8") as f:
            after = json.load(f)
        print(row(before, after, args.label, args.clients, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
