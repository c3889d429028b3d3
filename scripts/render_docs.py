#!/usr/bin/env python3
"""Render the docs' tables of figures from docs/data, and check the data.

Every measured figure the docs quote lives in docs/data (docs/data/README.md
has the schema): runs.csv says when, where, on which commit, under what
load and with which command each run was taken, and the dataset files hold
the figures, one row per measured thing, keyed by run. A docs page asks for
a table with a marker,

    <!-- table {"data": "tablei.csv", "run": "2026-11-26-h-1t",
                "columns": ["cell", "hidden", "layers", "T", "P ns/step"]} -->
    ...the rendered table, never edited by hand...
    <!-- /table -->

and this script writes the table between the two lines, with a caption
naming the command, the date and time, the commit, the machine and the
load of every run it shows. The spec is JSON:

  data     the dataset file, relative to docs/data.
  run      one run's rows; or
  runs     a list of runs, their rows one after the other; or
  join     {"label": run, ...}: the runs side by side, one row per key
           (key: the columns that name a row; the first shown columns by
           default), each run's columns headed "label column".
  key      with join, the columns that identify a row in each run.
  columns  what to show, in order: a column name, or an object
           {"col": name, "as": header, "scale": factor, "digits": n}
           (scale multiplies, digits rounds, with thousands separators).
           In a join, "label column" names a run's column.
           "run.FIELD" shows a field of the row's run (runs.csv: date, utc,
           commit, load_before, load_after).
  where    {column: value or [values]}: only rows whose cell is one of them.
  pivot    for a long dataset (run, subject, metric, value): the header of the
           first column; one row per subject, one column per metric
           (columns then names metrics).
  group    a list of columns: one row per distinct value of them over the
           rows of run or runs (after where), in the order first seen
           ("run" groups by run, and "run.FIELD" columns then show its
           fields; "run.FIELD" groups by a field of the runs, such as
           run.machine or run.date). Columns name grouped columns or aggregates of each
           group's rows: {"agg": "count"} counts them, {"agg": "min", "max",
           "median" or "range", "col": name} takes a numeric column's value
           (range: "lo-hi"); an aggregate may keep only rows that match
           "where" (as above) and whose col is "below" or "at_least" a
           number, and takes "as", "scale" and "digits" as a column does.
  caption  false to leave the caption out (another table beside it has it).

A plot is the same kind of block, `<!-- plot {...} -->` ... `<!-- /plot -->`,
whose spec names data and run or runs (and where), x (a column or run.FIELD,
one tick per distinct value, in the runs' order), y (a numeric column), and
optionally series (a column: one line per value) and target (a dashed
line); file is the SVG written under docs/data (plots/NAME.svg) and title
its title. The block holds the caption and the image link; the SVG is
written, and checked, with the docs.

Usage:
    python3 scripts/render_docs.py            # rewrite the docs' tables
    python3 scripts/render_docs.py --check    # fail if a table is stale or the data is inconsistent
    python3 scripts/render_docs.py import DATASET RUN [--set COLUMN=VALUE] < table.md
        # append a Markdown table's rows (e.g. bench_compare.py's output)
        # to docs/data/DATASET under RUN, which runs.csv must already have;
        # --set fills a column the table does not print (threads=1)

Only the standard library: CI runs it on a bare machine.
"""

import argparse
import csv
import io
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_FIELDS = ["run", "date", "utc", "commit", "machine", "load_before", "load_after", "command", "note"]
MACHINE_FIELDS = ["machine", "cpu", "cores", "l1d_kib", "l2_kib", "l3_mib", "memory_gib", "note"]
BEGIN = re.compile(r"^<!-- (table|plot) (\{.*\}) -->\s*$")
END = {"table": "<!-- /table -->", "plot": "<!-- /plot -->"}
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
RANGE = re.compile(r"^-?\d+(\.\d+)?(-\d+(\.\d+)?)?x?$")


class DataError(Exception):
    pass


def read_csv(path):
    """The rows of a CSV file as dicts, and its header."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return rows, reader.fieldnames or []


class Data:
    """docs/data: the runs, the machines and the datasets (read on demand)."""

    def __init__(self, root):
        self.dir = Path(root)
        self.runs = {}
        rows, header = read_csv(self.dir / "runs.csv")
        if header != RUN_FIELDS:
            raise DataError(f"runs.csv: header must be {','.join(RUN_FIELDS)}")
        for n, r in enumerate(rows, start=2):
            rid = r["run"]
            if rid in self.runs:
                raise DataError(f"runs.csv:{n}: run {rid} twice")
            self.runs[rid] = r
        rows, header = read_csv(self.dir / "machines.csv")
        if header != MACHINE_FIELDS:
            raise DataError(f"machines.csv: header must be {','.join(MACHINE_FIELDS)}")
        self.machines = {r["machine"]: r for r in rows}
        self._sets = {}

    def dataset(self, name):
        if name not in self._sets:
            path = self.dir / name
            if not path.is_file() or path.suffix != ".csv" or path.parent != self.dir:
                raise DataError(f"no dataset {name} in {self.dir}")
            rows, header = read_csv(path)
            if not header or header[0] != "run":
                raise DataError(f"{name}: the first column must be run")
            self._sets[name] = (rows, header)
        return self._sets[name]

    def datasets(self):
        return sorted(p.name for p in self.dir.glob("*.csv") if p.name not in ("runs.csv", "machines.csv"))

    def check(self):
        """Every problem with the data: a list of messages (empty when sound)."""
        problems = []
        date = re.compile(r"^\d{4}-\d{2}-\d{2}$")
        for rid, r in self.runs.items():
            where = f"runs.csv: run {rid}"
            if not re.match(r"^\d{4}-\d{2}-\d{2}-[a-z0-9][a-z0-9-]*$", rid):
                problems.append(f"{where}: an id is the date, a dash and a slug of [a-z0-9-]")
            if not date.match(r["date"]) or not rid.startswith(r["date"]):
                problems.append(f"{where}: date {r['date']!r} is not YYYY-MM-DD or not the id's")
            if not r["command"].strip():
                problems.append(f"{where}: no command")
            if r["machine"] not in self.machines:
                problems.append(f"{where}: unknown machine {r['machine']!r}")
            if r["commit"] and not re.match(r"^[0-9a-f]{7,40}$", r["commit"]):
                problems.append(f"{where}: commit {r['commit']!r} is not a hash")
            for k in ("load_before", "load_after"):
                if r[k] and not RANGE.match(r[k]):
                    problems.append(f"{where}: {k} {r[k]!r} is not a number or a range")
        used = set()
        for name in self.datasets():
            try:
                rows, header = self.dataset(name)
            except DataError as e:
                problems.append(str(e))
                continue
            if len(set(header)) != len(header):
                problems.append(f"{name}: a column name twice")
            for n, row in enumerate(rows, start=2):
                if None in row or any(v is None for v in row.values()):
                    problems.append(f"{name}:{n}: the row has not as many cells as the header")
                if row["run"] not in self.runs:
                    problems.append(f"{name}:{n}: run {row['run']!r} is not in runs.csv")
                used.add(row["run"])
        for rid in sorted(set(self.runs) - used):
            problems.append(f"runs.csv: run {rid} has no rows in any dataset")
        return problems


def parse_spec(text, where, kind="table"):
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: the {kind} spec is not JSON: {e}")
    if not isinstance(spec, dict) or "data" not in spec:
        raise DataError(f"{where}: the {kind} spec needs data")
    if sum(k in spec for k in ("run", "runs", "join")) != 1:
        raise DataError(f"{where}: the {kind} spec needs exactly one of run, runs, join")
    known = {"data", "run", "runs", "join", "key", "columns", "where", "caption", "pivot", "group"}
    if kind == "plot":
        known = {"data", "run", "runs", "where", "caption", "x", "y", "series", "file", "title", "target"}
        for need in ("x", "y", "file", "title"):
            if need not in spec:
                raise DataError(f"{where}: the plot spec needs {need}")
    unknown = set(spec) - known
    if "group" in spec and ("join" in spec or "pivot" in spec):
        raise DataError(f"{where}: group takes run or runs, and no pivot")
    if unknown:
        raise DataError(f"{where}: unknown spec key(s) {', '.join(sorted(unknown))}")
    return spec


def column_spec(c):
    if isinstance(c, str):
        return {"col": c, "as": c}
    if not isinstance(c, dict) or "col" not in c:
        raise DataError(f"bad column {c!r}")
    out = dict(c)
    out.setdefault("as", c["col"])
    return out


def fmt(value, col):
    if value is None or value == "":
        return ""
    if "scale" in col or "digits" in col:
        if not NUMBER.match(value):
            return value
        x = float(value) * col.get("scale", 1)
        return f"{x:,.{col.get('digits', 0)}f}"
    return value


def select(rows, where, name):
    for col, want in (where or {}).items():
        if rows and col not in rows[0]:
            raise DataError(f"{name}: where names no column {col!r}")
        want = {str(w) for w in (want if isinstance(want, list) else [want])}
        rows = [r for r in rows if r[col] in want]
    return rows


def table_rows(data, spec):
    """The header and the cells of the table spec asks for, and its runs."""
    name = spec["data"]
    rows, header = data.dataset(name)
    cols = [] if "group" in spec else [column_spec(c) for c in spec.get("columns", [h for h in header if h != "run"])]

    def cell(row, col, key):
        if key.startswith("run."):
            field = key[4:]
            if field not in RUN_FIELDS:
                raise DataError(f"{name}: no run field {field!r}")
            return data.runs[row["run"]][field]
        if key not in row:
            raise DataError(f"{name}: no column {key!r}")
        return fmt(row[key], col)

    def run_rows(rid):
        if rid not in data.runs:
            raise DataError(f"{name}: run {rid!r} is not in runs.csv")
        got = select([r for r in rows if r["run"] == rid], spec.get("where"), name)
        if not got:
            raise DataError(f"{name}: no rows of run {rid!r}")
        return got

    if "pivot" in spec:
        # A long dataset (run, subject, metric, value): one row per subject, one column per metric.
        for need in ("subject", "metric", "value"):
            if need not in header:
                raise DataError(f"{name}: pivot needs the columns subject, metric and value")
        rids = [spec["run"]] if "run" in spec else spec.get("runs") or []
        got = [r for rid in rids for r in run_rows(rid)]
        metrics = [column_spec(c) for c in spec["columns"]] if "columns" in spec else \
            [column_spec(m) for m in dict.fromkeys(r["metric"] for r in got)]
        cells = {}
        for r in got:
            cells.setdefault(r["subject"], {})[r["metric"]] = r["value"]
        out = [[subject] + [fmt(v.get(c["col"], ""), c) for c in metrics] for subject, v in cells.items()]
        return [spec["pivot"]] + [c["as"] for c in metrics], out, rids
    if "group" in spec:
        rids = [spec["run"]] if "run" in spec else spec["runs"]
        return grouped(name, [r for rid in rids for r in run_rows(rid)], spec, cell, data.runs) + (rids,)
    if "join" in spec:
        runs = spec["join"]
        if not isinstance(runs, dict) or not runs:
            raise DataError(f"{name}: join is an object of label: run")
        plain = [c["col"] for c in cols if not any(c["col"].startswith(l + " ") for l in runs)]
        key = spec.get("key", plain)
        per = {label: {tuple(r[k] for k in key): r for r in run_rows(rid)} for label, rid in runs.items()}
        first = next(iter(runs))
        order = list(per[first])
        for label in runs:
            order += [k for k in per[label] if k not in order]
        out = []
        for k in order:
            line = []
            for c in cols:
                label = next((l for l in runs if c["col"].startswith(l + " ")), None)
                if label is None:
                    line.append(dict(zip(key, k)).get(c["col"], ""))
                    continue
                row = per[label].get(k)
                line.append(cell(row, c, c["col"][len(label) + 1:]) if row else "")
            out.append(line)
        return [c["as"] for c in cols], out, list(runs.values())
    rids = [spec["run"]] if "run" in spec else spec["runs"]
    out = [[cell(r, c, c["col"]) for c in cols] for rid in rids for r in run_rows(rid)]
    return [c["as"] for c in cols], out, rids


AGGS = {"count", "min", "max", "median", "range"}


def grouped(name, rows, spec, cell, runs):
    """The header and cells of a group spec over rows (see the module doc)."""
    by = spec["group"]
    if not isinstance(by, list) or not by or not all(isinstance(b, str) for b in by):
        raise DataError(f"{name}: group is a list of columns")
    for b in by:
        if b.startswith("run.") and b[4:] not in RUN_FIELDS:
            raise DataError(f"{name}: no run field {b[4:]!r}")
        if rows and not b.startswith("run.") and b not in rows[0]:
            raise DataError(f"{name}: group names no column {b!r}")
    key = lambda r, b: runs[r["run"]][b[4:]] if b.startswith("run.") else r[b]  # noqa: E731
    groups = {}
    for r in rows:
        groups.setdefault(tuple(key(r, b) for b in by), []).append(r)
    cols = []
    for c in spec.get("columns", by + [{"agg": "count", "as": "rows"}]):
        if isinstance(c, dict) and "agg" in c:
            if c["agg"] not in AGGS:
                raise DataError(f"{name}: unknown agg {c['agg']!r}")
            if c["agg"] != "count" and "col" not in c:
                raise DataError(f"{name}: agg {c['agg']} needs col")
            if ("below" in c or "at_least" in c) and "col" not in c:
                raise DataError(f"{name}: below and at_least need col")
            if any(not isinstance(c.get(k, 0), (int, float)) for k in ("below", "at_least", "scale")):
                raise DataError(f"{name}: below, at_least and scale are numbers")
            c = dict(c)
            c.setdefault("as", c["agg"] if "col" not in c else f"{c['agg']} {c['col']}")
            cols.append(c)
            continue
        c = column_spec(c)
        if c["col"] not in by and not (c["col"].startswith("run.") and "run" in by):
            raise DataError(f"{name}: column {c['col']!r} is neither grouped nor an agg")
        cols.append(c)

    def number(r, col):
        v = r.get(col)
        if v is None:
            raise DataError(f"{name}: no column {col!r}")
        return float(v) if NUMBER.match(v) else None

    def agg(c, got):
        got = select(got, c.get("where"), name)
        if "col" in c:
            got = [r for r in got if number(r, c["col"]) is not None]
            if "below" in c:
                got = [r for r in got if number(r, c["col"]) < c["below"]]
            if "at_least" in c:
                got = [r for r in got if number(r, c["col"]) >= c["at_least"]]
        if c["agg"] == "count":
            return str(len(got))
        vals = sorted(number(r, c["col"]) * c.get("scale", 1) for r in got)
        if not vals:
            return ""
        show = lambda x: f"{x:.{c['digits']}f}" if "digits" in c else f"{x:g}"  # noqa: E731
        if c["agg"] == "range":
            return show(vals[0]) if vals[0] == vals[-1] else f"{show(vals[0])}-{show(vals[-1])}"
        n = len(vals)
        return show({"min": vals[0], "max": vals[-1],
                     "median": vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2}[c["agg"]])

    out = [[agg(c, got) if "agg" in c else cell(got[0], c, c["col"]) for c in cols] for got in groups.values()]
    return [c["as"] for c in cols], out


def markdown(header, rows):
    def numeric(i):
        vals = [r[i].replace(",", "").replace("**", "") for r in rows if r[i] not in ("", "-", "n/a")]
        return bool(vals) and all(RANGE.match(v) for v in vals)

    align = ["---:" if numeric(i) else "---" for i in range(len(header))]
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return lines


def load_text(r):
    a, b = r["load_before"], r["load_after"]
    if a and b:
        return f"load {a} → {b}"
    if a or b:
        return f"load {a or b}"
    return "load not recorded"


def machine_text(m):
    parts = [m["cpu"]]
    if m["l1d_kib"]:
        parts.append(f"{m['l1d_kib']} KiB L1d")
    if m["l2_kib"]:
        l2 = int(m["l2_kib"])
        parts.append(f"{l2 // 1024} MiB L2 per core" if l2 % 1024 == 0 else f"{l2} KiB L2 per core")
    if m["l3_mib"]:
        parts.append(f"{m['l3_mib']} MiB L3")
    return ", ".join(parts)


MANY = 6  # a caption lists at most this many runs of one command one by one


def caption(data, rids, dataset):
    """Who made the table: each command with its runs (date, UTC, commit, load), then the machine."""
    by_cmd = {}
    for rid in dict.fromkeys(rids):
        by_cmd.setdefault(data.runs[rid]["command"], []).append(data.runs[rid])
    lines = []
    for cmd, runs in by_cmd.items():
        if len(runs) > MANY:
            # Each run's time, commit and load are a line of runs.csv away.
            dates = sorted({r["date"] for r in runs})
            span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
            lines.append(f"`{cmd}`: {len(runs)} runs, {span}, `{runs[0]['run']}` to `{runs[-1]['run']}` "
                         "(each one's time, commit and load in `docs/data/runs.csv`).")
            continue
        parts = []
        for r in runs:
            when = f"{r['utc']} UTC, " if r["utc"] else ""  # the date is the id's
            commit = f"commit {r['commit']}" if r["commit"] else "commit not recorded"
            parts.append(f"`{r['run']}` ({when}{commit}, {load_text(r)})")
        lines.append(f"`{cmd}`: " + "; ".join(parts) + ".")
    machines = dict.fromkeys(machine_text(data.machines[data.runs[r]["machine"]]) for r in rids)
    lines.append(f"On {'; '.join(machines)}. Figures: `docs/data/{dataset}`.")
    return lines


def render_block(data, spec):
    header, rows, rids = table_rows(data, spec)
    out = markdown(header, rows)
    if spec.get("caption", True):
        out = caption(data, rids, spec["data"]) + [""] + out
    return out


def plot_points(data, spec):
    """[(series, x label, y)] of a plot spec, in the runs' order, and its runs."""
    name = spec["data"]
    rows, header = data.dataset(name)
    rids = [spec["run"]] if "run" in spec else spec["runs"]
    got = []
    for rid in rids:
        if rid not in data.runs:
            raise DataError(f"{name}: run {rid!r} is not in runs.csv")
        got += select([r for r in rows if r["run"] == rid], spec.get("where"), name)
    if not got:
        raise DataError(f"{name}: the plot has no rows")

    def field(row, key):
        if key.startswith("run."):
            return data.runs[row["run"]].get(key[4:], "")
        if key not in row:
            raise DataError(f"{name}: no column {key!r}")
        return row[key]

    points = []
    for r in got:
        y = field(r, spec["y"])
        if not NUMBER.match(y):
            continue  # not measured in this run
        # Each run has ticks of its own, so two runs with the same x label stay apart.
        points.append((field(r, spec["series"]) if "series" in spec else "", (r["run"], field(r, spec["x"])), float(y)))
    if not points:
        raise DataError(f"{name}: no numeric {spec['y']!r} to plot")
    return points, rids


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def svg_plot(points, title, ylabel, target=None):
    """A small SVG of points over categorical x, one polyline per series."""
    xs = list(dict.fromkeys(x for _, x, _ in points))
    series = list(dict.fromkeys(s for s, _, _ in points))
    ys = [y for _, _, y in points] + ([target] if target is not None else [])
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.1 or 0.5
    lo, hi = lo - pad, hi + pad
    w, h, left, right, top, bottom = 760, 320, 90, 20, 30, 90
    pw, ph = w - left - right, h - top - bottom

    def px(i):
        return left + (pw * (i + 0.5) / len(xs))

    def py(y):
        return top + ph * (hi - y) / (hi - lo)

    esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2:.1f}" y="18" text-anchor="middle" font-size="13">{esc(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>',
           f'<text x="24" y="{top + ph / 2:.1f}" text-anchor="middle" transform="rotate(-90 24 {top + ph / 2:.1f})">'
           f'{esc(ylabel)}</text>']
    for k in range(5):
        y = lo + (hi - lo) * k / 4
        out.append(f'<line x1="{left - 4}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    for i, (_, x) in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{top + ph + 12}" text-anchor="end" '
                   f'transform="rotate(-45 {px(i):.1f} {top + ph + 12})">{esc(x)}</text>')
    if target is not None:
        out.append(f'<line x1="{left}" y1="{py(target):.1f}" x2="{left + pw}" y2="{py(target):.1f}" '
                   'stroke="#888" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{left + pw - 2}" y="{py(target) - 4:.1f}" text-anchor="end" fill="#555">'
                   f'target {target:g}</text>')
    for n, sname in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        pts = [(xs.index(x), y) for s, x, y in points if s == sname]
        path = " ".join(f"{px(i):.1f},{py(y):.1f}" for i, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}"/>')
        out += [f'<circle cx="{px(i):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for i, y in pts]
        if sname:
            out.append(f'<text x="{left + 8 + 110 * n}" y="{h - 8}" fill="{colour}">● {esc(sname)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_plot(data, spec, files, doc_dir):
    points, rids = plot_points(data, spec)
    if "series" in spec:
        points = [(f"{spec['series']} {s}", x, y) for s, x, y in points]
    rel = Path(spec["file"])
    if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".svg":
        raise DataError(f"plot file {spec['file']!r}: a .svg path inside docs/data")
    files[data.dir / rel] = svg_plot(points, spec["title"], spec["y"], spec.get("target"))
    link = os.path.relpath(data.dir / rel, doc_dir or data.dir.parent)
    out = [f"![{spec['title']}]({Path(link).as_posix()})"]
    if spec.get("caption", True):
        out = caption(data, rids, spec["data"]) + [""] + out
    return out


def render_text(data, text, where="text", files=None, doc_dir=None):
    """text with every table and plot block rendered afresh; plots' SVG files go into files."""
    files = {} if files is None else files
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if not m:
            if lines[i].strip() in END.values():
                raise DataError(f"{where}:{i + 1}: {lines[i].strip()} without its opening line")
            out.append(lines[i])
            i += 1
            continue
        start, kind = i, m.group(1)
        spec = parse_spec(m.group(2), f"{where}:{i + 1}", kind)
        j = i + 1
        while j < len(lines) and lines[j].strip() != END[kind] and not BEGIN.match(lines[j]):
            j += 1
        if j == len(lines) or lines[j].strip() != END[kind]:
            raise DataError(f"{where}:{start + 1}: the {kind} has no {END[kind]}")
        try:
            block = render_block(data, spec) if kind == "table" else render_plot(data, spec, files, doc_dir)
        except DataError as e:
            raise DataError(f"{where}:{start + 1}: {e}")
        out += [lines[start]] + block + [END[kind]]
        i = j + 1
    return "\n".join(out)


def doc_files(root):
    root = Path(root)
    return sorted((root / "docs").glob("*.md")) + [root / "README.md"]


def render_all(root, check):
    """Render every doc; with check, write nothing and return the stale ones."""
    data = Data(Path(root) / "docs" / "data")
    problems = data.check()
    stale = []
    files = {}
    for path in doc_files(root):
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        try:
            new = render_text(data, text, str(path.relative_to(root)), files, path.parent)
        except DataError as e:
            problems.append(str(e))
            continue
        if new != text:
            stale.append(str(path.relative_to(root)))
            if not check:
                path.write_text(new, encoding="utf-8")
    for path, content in sorted(files.items()):
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            stale.append(str(path.relative_to(root)))
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content, encoding="utf-8")
    return problems, stale


def parse_markdown_table(text):
    """The header and rows of the first Markdown table in text."""
    lines = [l.strip() for l in text.splitlines()]
    start = next((i for i, l in enumerate(lines) if l.startswith("|")), None)
    if start is None or start + 1 >= len(lines) or not re.match(r"^\|[\s:|-]+\|$", lines[start + 1]):
        raise DataError("no Markdown table in the input")

    def cells(l):
        return [c.strip() for c in re.split(r"(?<!\\)\|", l.strip().strip("|"))]

    header = cells(lines[start])
    rows = []
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        rows.append(cells(l))
    return header, rows


def clean(value):
    """A printed cell as data: no emphasis, no thousands separators in numbers, nothing for n/a."""
    v = value.replace("**", "").strip()
    if v in ("n/a", "-"):
        return ""
    plain = v.replace(",", "")
    return plain if NUMBER.match(plain) else v


PAIRED = re.compile(r"^(.*) \((.+?)( /|,) (.+)\)$")


def split_cells(header, theirs, row):
    """{column: cell} of a printed row; a column "X (a / b)" (or "X (a, b)")
    whose parts the dataset holds as "X a" and "X b" is split in two (a
    lone "-" or "n/a", nothing measured, into two of it)."""
    got = {}
    for h, cell in zip(theirs, row):
        m = PAIRED.match(h)
        if h not in header and m and f"{m[1]} {m[2]}" in header and f"{m[1]} {m[4]}" in header:
            parts = cell.split(" / " if m[3] == " /" else ", ")
            if cell.strip() in ("-", "n/a"):  # neither was measured
                parts = [cell, cell]
            if len(parts) != 2:
                raise DataError(f"column {h!r}: cell {cell!r} is not two values")
            got[f"{m[1]} {m[2]}"], got[f"{m[1]} {m[4]}"] = clean(parts[0]), clean(parts[1])
        else:
            got[h] = clean(cell)
    return got


def import_table(root, dataset, rid, text, fixed=None):
    """Append the first Markdown table of text to dataset under run rid;
    fixed ({column: value}) fills columns the table does not print."""
    data = Data(Path(root) / "docs" / "data")
    if rid not in data.runs:
        raise DataError(f"run {rid} is not in runs.csv: add its line first")
    rows, header = data.dataset(dataset)
    if any(r["run"] == rid for r in rows):
        raise DataError(f"{dataset} already has rows of run {rid}")
    theirs, new = parse_markdown_table(text)
    fixed = fixed or {}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in new:
        got = split_cells(header, theirs, r)
        got.update(fixed)
        unknown = [h for h in got if h not in header]
        if unknown:
            raise DataError(f"{dataset} has no column(s) {', '.join(unknown)}")
        got["run"] = rid
        w.writerow([got.get(h, "") for h in header])
    path = data.dir / dataset
    existing = path.read_text(encoding="utf-8")
    if existing and not existing.endswith("\n"):
        existing += "\n"
    path.write_text(existing + buf.getvalue(), encoding="utf-8")
    return len(new)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "import":
        ap = argparse.ArgumentParser(prog="render_docs.py import")
        ap.add_argument("dataset")
        ap.add_argument("run")
        ap.add_argument("--set", action="append", default=[], metavar="COLUMN=VALUE",
                        help="a column the table does not print, the same on every row (e.g. threads=1)")
        ap.add_argument("--root", default=str(ROOT))
        a = ap.parse_args(argv[1:])
        try:
            fixed = {}
            for kv in a.set:
                if "=" not in kv:
                    raise DataError(f"--set {kv!r} is not COLUMN=VALUE")
                k, v = kv.split("=", 1)
                fixed[k] = v
            n = import_table(a.root, a.dataset, a.run, sys.stdin.read(), fixed)
        except DataError as e:
            print(f"render_docs: {e}", file=sys.stderr)
            return 1
        print(f"render_docs: {n} row(s) of {a.run} appended to docs/data/{a.dataset}")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; fail on stale tables or bad data")
    ap.add_argument("--root", default=str(ROOT))
    a = ap.parse_args(argv)
    try:
        problems, stale = render_all(a.root, a.check)
    except DataError as e:
        print(f"render_docs: {e}", file=sys.stderr)
        return 1
    for p in problems:
        print(f"render_docs: {p}", file=sys.stderr)
    if a.check:
        for s in stale:
            print(f"render_docs: {s} has tables that differ from docs/data: run python3 scripts/render_docs.py",
                  file=sys.stderr)
        return 1 if problems or stale else 0
    for s in stale:
        print(f"render_docs: rendered {s}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
