#!/usr/bin/env python3
"""Side-by-side table of rnnserve and its serving peers from loadgen's rows.

Reads the Markdown rows cmd/loadgen printed for every run of
scripts/loadtest_peers.sh (label "<server> r<round>", e.g. "rnnserve r2")
and prints, per client count, each server's median requests/s, p50 and p99
over its runs, rnnserve's ratios to each peer (paired: the ratio within
each round, then the median over rounds), the issue's targets with whether
this run met them, and the 1-client run-to-run spread (max/min of
requests/s over the runs). Rows that carry loadgen's "server CPU
µs/request" (-server-pid: the server process's CPU time over the run's
measured window, per successful request) add each server's median CPU
per request and each peer's over rnnserve's (paired likewise; above 1
rnnserve uses less); the 15th cell, where there is one, is the load
generator's own CPU per request in the same window (it shares the
cores, so what it takes no server has).

Usage:
    python3 scripts/peers/summarize.py ROWS_FILE [--reference rnnserve]
"""

import argparse
import statistics
import sys

REFERENCE = "rnnserve"
ORT = "ONNX Runtime"
TORCH = "PyTorch"
SPREAD_TARGET = 1.3


class Run:
    def __init__(self, server, round_, clients, rate, p50, p99, errors, cpu=None, loadgen_cpu=None):
        self.server, self.round, self.clients = server, round_, clients
        self.rate, self.p50, self.p99, self.errors = rate, p50, p99, errors
        self.cpu = cpu  # server CPU µs per request, None where not measured
        self.loadgen_cpu = loadgen_cpu  # the load generator's own, likewise


def parse_rows(text):
    """The runs in loadgen's Markdown rows (other lines are skipped); the
    14th cell, where there is one, is the server's CPU µs per request, the
    15th the load generator's."""
    runs = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) not in (13, 14, 15) or not cells[3].isdigit():
            continue
        label = cells[0]
        server, sep, rnd = label.rpartition(" r")
        if not sep or not rnd.isdigit():
            raise ValueError(f"label {label!r}: want '<server> r<round>'")
        cpu, own = (float(c) if c not in ("", "-") else None for c in (cells[13:] + ["-", "-"])[:2])
        runs.append(Run(server, int(rnd), int(cells[3]), float(cells[4]), int(cells[6]), int(cells[8]), int(cells[12]),
                        cpu, own))
    return runs


def by(runs, server, clients):
    return [r for r in runs if r.server == server and r.clients == clients]


def paired(runs, server, peer, clients, key, invert=False):
    """Median over rounds of server's key over peer's (peer over server if invert)."""
    mine = {r.round: getattr(r, key) for r in by(runs, server, clients)}
    theirs = {r.round: getattr(r, key) for r in by(runs, peer, clients)}
    ratios = []
    for rnd in sorted(mine.keys() & theirs.keys()):
        a, b = (theirs[rnd], mine[rnd]) if invert else (mine[rnd], theirs[rnd])
        if a is not None and b is not None and b > 0:
            ratios.append(a / b)
    return statistics.median(ratios) if ratios else None


def fmt(v, digits=0):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}"


def render(runs, reference=REFERENCE):
    servers = [reference] + sorted({r.server for r in runs} - {reference}, key=lambda s: (s != ORT, s))
    peers = servers[1:]
    counts = sorted({r.clients for r in runs})
    has_cpu = any(r.cpu is not None for r in runs)
    has_own = any(r.loadgen_cpu is not None for r in runs)
    lines = []
    head = ["clients"] + [f"{s} req/s" for s in servers] + [f"{reference}/{p} req/s" for p in peers]
    head += [f"{s} p50 µs" for s in servers] + [f"{s} p99 µs" for s in servers]
    head += [f"{p}/{reference} p99" for p in peers] + ["runs", "errors"]
    if has_cpu:
        head += [f"{s} CPU µs/req" for s in servers] + [f"{p}/{reference} CPU/req" for p in peers]
    if has_own:
        head += [f"loadgen CPU µs/req, {s}" for s in servers]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---:|" * len(head))
    med = {}
    for c in counts:
        row = [str(c)]
        for s in servers:
            rs = by(runs, s, c)
            med[s, c] = {k: statistics.median(getattr(r, k) for r in rs) if rs else None for k in ("rate", "p50", "p99")}
            for key in ("cpu", "loadgen_cpu"):
                vs = [getattr(r, key) for r in rs if getattr(r, key) is not None]
                med[s, c][key] = statistics.median(vs) if vs else None
        row += [fmt(med[s, c]["rate"], 1) for s in servers]
        row += [fmt(paired(runs, reference, p, c, "rate"), 2) for p in peers]
        row += [fmt(med[s, c]["p50"]) for s in servers]
        row += [fmt(med[s, c]["p99"]) for s in servers]
        row += [fmt(paired(runs, reference, p, c, "p99", invert=True), 2) for p in peers]
        row.append("/".join(str(len(by(runs, s, c))) for s in servers))
        row.append(str(sum(r.errors for r in runs if r.clients == c)))
        if has_cpu:
            row += [fmt(med[s, c]["cpu"]) for s in servers]
            row += [fmt(paired(runs, reference, p, c, "cpu", invert=True), 2) for p in peers]
        if has_own:
            row += [fmt(med[s, c]["loadgen_cpu"]) for s in servers]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("Medians over each server's runs; ratios are paired (the ratio within each round, then the median "
                 f"over rounds); {'/'.join(servers)} runs in the runs column."
                 + (" CPU µs/req: the server process's user and system time (/proc/PID/stat) over each run's measured "
                    "window, per successful request; the load generator's own is not counted." if has_cpu else "")
                 + (" loadgen CPU µs/req: the load generator's own, in the same window, while it drove that server "
                    "(it shares the cores)." if has_own else ""))
    lines.append("")
    lines += targets(runs, reference, counts)
    lines.append("")
    lines += spread(runs, servers)
    return "\n".join(lines) + "\n"


def targets(runs, reference, counts):
    """The serving targets, each with this run's figure."""
    out = ["| target | this run | met |", "|---|---:|---|"]

    def add(what, value, ok):
        out.append(f"| {what} | {fmt(value, 2)} | {'n/a' if value is None else ('yes' if ok(value) else 'no')} |")

    servers = {r.server for r in runs}
    if ORT in servers and 1 in counts:
        add(f"{reference}/{ORT} req/s at 1 client >= 1", paired(runs, reference, ORT, 1, "rate"), lambda v: v >= 1)
    if ORT in servers and 64 in counts:
        add(f"{reference}/{ORT} req/s at 64 clients >= 3", paired(runs, reference, ORT, 64, "rate"), lambda v: v >= 3)
    if TORCH in servers and 64 in counts:
        add(f"{reference}/{TORCH} req/s at 64 clients >= 10", paired(runs, reference, TORCH, 64, "rate"), lambda v: v >= 10)
    if ORT in servers and 64 in counts and any(r.cpu is not None for r in runs):
        add(f"{ORT}/{reference} CPU per request at 64 clients >= 3", paired(runs, reference, ORT, 64, "cpu", invert=True),
            lambda v: v >= 3)
    for peer in (ORT, TORCH):
        if peer not in servers:
            continue
        for c in counts:
            add(f"{peer}/{reference} p99 at {c} client(s) > 1", paired(runs, reference, peer, c, "p99", invert=True),
                lambda v: v > 1)
    ones = [r.rate for r in by(runs, reference, 1)]
    if len(ones) >= 2:
        add(f"{reference} 1-client max/min req/s over {len(ones)} runs <= {SPREAD_TARGET}", max(ones) / min(ones),
            lambda v: v <= SPREAD_TARGET)
    return out


def spread(runs, servers):
    """Each server's 1-client requests/s, run by run, and max/min."""
    out = ["| server | 1-client req/s by round | max/min |", "|---|---|---:|"]
    for s in servers:
        rs = sorted(by(runs, s, 1), key=lambda r: r.round)
        if not rs:
            continue
        rates = [r.rate for r in rs]
        ratio = max(rates) / min(rates) if min(rates) > 0 else None
        out.append(f"| {s} | {', '.join(fmt(v, 1) for v in rates)} | {fmt(ratio, 2)} |")
    return out


def main(argv=None, out=sys.stdout):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", help="a file of loadgen's Markdown rows")
    ap.add_argument("--reference", default=REFERENCE)
    args = ap.parse_args(argv)
    with open(args.rows, encoding="utf-8") as f:
        runs = parse_rows(f.read())
    if not any(r.server == args.reference for r in runs):
        print(f"summarize: no {args.reference} rows in {args.rows}", file=sys.stderr)
        return 1
    out.write(render(runs, args.reference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
