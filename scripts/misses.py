#!/usr/bin/env python3
"""Every Table I shape that misses the ONNX Runtime target, beside the
hardware's limit for it.

Reads the side-by-side tables of scripts/bench_compare.py (one per thread
count) and the per-shape model of cmd/roofline from the same session, and
prints, for every shape with T >= 10 where ONNX Runtime / our best float32
time is below the target (1.25x by default):

- the model's time per step (on more than one core, the faster of P on
  all of them and on fewer, as the best schedule may be either): the
  W_hh bytes that miss a simulated L2 (the
  plan's own reads through an LRU the size of one core's L2) at the read
  bandwidth of their level and the rest at L2's (the first pass of an
  inference at the whole model's), plus the
  longer of the other weights' bytes and the input projections' arithmetic
  at the measured GEMM roof (cmd/roofline explains it);
- model/best: how close our best float32 time is to it;
- ORT/model: how close ONNX Runtime is to it;
- needed: the fraction of the model our time would have to reach for the
  target, target / (ORT/model). Above 1 no engine streaming these weights
  can lead ONNX Runtime by the target: the miss is the hardware's.

The host's rates move between minutes (other tenants share its L3 and
DRAM), so a model measured beside the tables may not be the one the
tables ran under. Given several models (--roofline again, say one measured
just before the tables and one just after), each row is figured against
the fastest of them for its shape, the most it asks of us, and "needed
at slowest" is needed against the slowest: a miss is the hardware's
only if it is under the fastest model, ours only if it is under the
slowest too, and "either" where the models disagree.

With --model host, each shape is held against cmd/roofline's host model
instead: the same terms, but the W_ih bytes and the projections'
arithmetic overlapped only as far as the host was measured to overlap a
stream from DRAM with arithmetic (at none, the two in turn), and on more
than one core the W_hh time stretched by what the workers were measured
to lose waiting for each other at every step (stepped/free). "Hardware"
then means: beyond what this host gives with its measured overlap and
steps.

A last line per core count says what the table would show if our time
were the model's at every shape with T >= 10: the median of ORT/model
against the median target (1.5x by default), and how many shapes would
still be below the target. Where that median is below its target, no
engine reaching the model could meet the median target either.

Usage:
    python3 scripts/bench_compare.py ... --threads 1 > t1.md
    python3 scripts/bench_compare.py ... --threads 2 > t2.md
    go run ./cmd/roofline -no-kernels -hidden 64,256,1024 -layers 1,4 -lengths 10,100 -reps 3 > roof.md
    python3 scripts/misses.py --table t1.md --table t2.md --roofline roof.md
    python3 scripts/misses.py --table t1.md --table t2.md --roofline before.md --roofline after.md
    python3 scripts/misses.py --model host --table t1.md --table t2.md --roofline before.md --roofline after.md
"""

import argparse
import re
import sys


def md_tables(text):
    """Every Markdown table in text, as a list of {header: cell} rows."""
    tables, header, rows = [], None, []
    for line in text.splitlines() + [""]:
        if not line.startswith("|"):
            if header is not None:
                tables.append(rows)
            header, rows = None, []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(cells[0]) <= set("-: "):
            rows.append(dict(zip(header, cells)))
    return tables


def number(s):
    return float(s.replace(",", ""))


def table_i(text):
    """{(cell, hidden, layers, T, threads): (ORT/best, best ns/step, ORT ns/step)}."""
    m = re.search(r"^Threads: (\d+);", text, re.M)
    if not m:
        raise ValueError("not a bench_compare table: no 'Threads:' line")
    threads = int(m.group(1))
    out = {}
    for rows in md_tables(text):
        for r in rows:
            if "ORT/best f32" not in r or not r.get("T", "").isdigit():
                continue
            best = r["best f32"]
            key = (r["cell"], int(r["hidden"]), int(r["layers"]), int(r["T"]), threads)
            out[key] = (number(r["ORT/best f32"]), number(r[best + " ns/step"]), number(r["ORT ns/step"]))
    return out


MODELS = {"roofline": "model µs", "host": "host model µs"}


def roofline(text, model="roofline"):
    """{(cell, hidden, layers, T, cores): (model ns/step, W_hh level)} for
    float32 rows, from the column of the model named (MODELS)."""
    col = MODELS[model]
    out = {}
    for rows in md_tables(text):
        for r in rows:
            if "model µs" not in r or r.get("weights") != "f32":
                continue
            if col not in r:
                raise ValueError("the roofline output has no %r column (cmd/roofline before the host model)" % col)
            T = int(r["T"])
            key = (r["cell"], int(r["hidden"]), int(r["layers"]), T, int(r["cores"]))
            out[key] = (number(r[col]) * 1000 / T, r["level"])
    return out


def model_at(model, key):
    """The model of key's shape on key's cores, (ns/step, W_hh level): the
    faster of P on that many cores and on fewer, where the roofline has
    those rows (bench_compare.py's best above one thread includes P on
    one core). KeyError without the row of key's own core count."""
    own = model[key]
    fewer = [model[key[:4] + (k,)] for k in range(1, key[4]) if key[:4] + (k,) in model]
    return min([own] + fewer, key=lambda m: m[0])


def model_span(models, key):
    """The fastest and the slowest of several models (model_at) for key."""
    ms = [model_at(m, key) for m in models]
    return min(ms, key=lambda m: m[0]), max(ms, key=lambda m: m[0])


def as_models(model):
    """A roofline() result, or a list of them, as a list."""
    return [model] if isinstance(model, dict) else list(model)


def misses(tables, model, target):
    """Rows of the misses table, sorted by cores, cell, hidden, layers, T;
    model is one roofline() result or a list of them."""
    models = as_models(model)
    rows = []
    for key in sorted(tables, key=lambda k: (k[4], k[0], k[1], k[2], k[3])):
        ratio, best, ort = tables[key]
        if best > 0 and ort > 0:
            # From the times, as bench_compare.py judges the target: the
            # table's ratio is rounded (1.245 shows as 1.25).
            ratio = ort / best
        if key[3] < 10 or ratio >= target:
            continue
        if any(key not in m for m in models):
            raise ValueError("no roofline row for %s/%d/%d/%d on %d cores" % key)
        (m, level), (slow, _) = model_span(models, key)
        needed, needed_slow = target * m / ort, target * slow / ort
        whose = "hardware" if needed > 1 else "ours" if needed_slow <= 1 else "either"
        rows.append({"key": key, "ratio": ratio, "level": level, "model": m, "best": best,
                     "model/best": m / best, "ort/model": ort / m, "needed": needed,
                     "needed slow": needed_slow, "whose": whose})
    return rows


def ceiling(tables, model, target, median_target):
    """Per core count, what ORT/best would be with our time at the model at
    every shape with T >= 10: {cores: (shapes, median ORT/model, shapes below
    target)}."""
    models = as_models(model)
    per = {}
    for key, (_, _, ort) in tables.items():
        if key[3] < 10 or any(key not in m for m in models):
            continue
        per.setdefault(key[4], []).append(ort / model_span(models, key)[0][0])
    out = {}
    for cores, rs in per.items():
        rs.sort()
        n = len(rs)
        med = rs[n // 2] if n % 2 else (rs[n // 2 - 1] + rs[n // 2]) / 2
        out[cores] = (n, med, sum(r < target for r in rs))
    return out


def render_ceiling(ceil, target, median_target):
    out = []
    for cores in sorted(ceil):
        n, med, below = ceil[cores]
        verdict = ("out of reach for any engine at the model" if med < median_target
                   else "within reach at the model")
        out.append(f"{cores} core(s), at the model everywhere ({n} shapes with T >= 10): ORT/model median "
                   f"{med:.2f} against the median target {median_target}x ({verdict}); "
                   f"{below} shape(s) still below {target}x.")
    return "\n\n".join(out)


def render(rows, target, models=1):
    """The misses table; with more than one model, a column of needed
    against the slowest."""
    slow = models > 1
    out = ["| shape | cores | ORT/best | W_hh level | model µs/step | best µs/step | model/best | ORT/model | needed | "
           + ("needed at slowest | " if slow else "") + "whose |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|" + ("---:|" if slow else "") + "---|"]
    for r in rows:
        c, h, l, T, cores = r["key"]
        extra = f" {r['needed slow']:.2f} |" if slow else ""
        out.append(f"| {c}/{h}/{l}/{T} | {cores} | {r['ratio']:.2f} | {r['level']} | {r['model'] / 1000:.1f} | "
                   f"{r['best'] / 1000:.1f} | {r['model/best']:.2f} | {r['ort/model']:.2f} | {r['needed']:.2f} |{extra} {r['whose']} |")
    for cores in sorted({r["key"][4] for r in rows}):
        rs = [r for r in rows if r["key"][4] == cores]
        ours = [r for r in rs if r["whose"] != "hardware"]
        either = sum(r["whose"] == "either" for r in rs)
        line = (f"{cores} core(s): {len(rs)} shape(s) below {target}x, {len(rs) - len(ours)} of them "
                f"the hardware's (needed above 1)")
        if either:
            line += f", {either} the hardware's or ours as the models disagree"
        if ours:
            span = lambda f: f"{min(f(r) for r in ours):.2f}-{max(f(r) for r in ours):.2f}"
            line += (f"; at the other {len(ours)} a lead of {target}x needs {span(lambda r: r['needed'])} "
                     f"of the model, and our best is at {span(lambda r: r['model/best'])} of it")
        out += ["", line + "."]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", action="append", required=True, help="bench_compare.py output (repeat per thread count)")
    ap.add_argument("--roofline", action="append", required=True,
                    help="cmd/roofline output with the same shapes (repeat for models measured at other times)")
    ap.add_argument("--target", type=float, default=1.25, help="ONNX Runtime / our best to reach (default 1.25)")
    ap.add_argument("--median-target", type=float, default=1.5,
                    help="the median of ONNX Runtime / our best to reach (default 1.5)")
    ap.add_argument("--model", choices=sorted(MODELS), default="roofline",
                    help="the model to hold each miss against: roofline (the projections' bytes and arithmetic "
                         "at once) or host (overlapped only as far as measured on the host)")
    a = ap.parse_args(argv)
    tables = {}
    for path in a.table:
        with open(path, encoding="utf-8") as f:
            tables.update(table_i(f.read()))
    model = []
    for path in a.roofline:
        with open(path, encoding="utf-8") as f:
            model.append(roofline(f.read(), a.model))
    print(render(misses(tables, model, a.target), a.target, len(model)))
    ceil = ceiling(tables, model, a.target, a.median_target)
    if ceil:
        print()
        print(render_ceiling(ceil, a.target, a.median_target))


if __name__ == "__main__":
    sys.exit(main())
