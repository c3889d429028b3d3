#!/usr/bin/env python3
"""Tests of scripts/render_docs.py on a small repository of its own, and the
check that this repository's docs are current with docs/data."""

import contextlib
import io
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_docs  # noqa: E402

RUNS = """run,date,utc,commit,machine,load_before,load_after,command,note
2026-01-02-t-1t,2026-01-02,10:00-10:05,abc1234,m1,0.5,1.0,python3 bench.py --threads 1,
2026-01-02-t-2t,2026-01-02,10:05-10:10,abc1234,m1,1.0,1.9,python3 bench.py --threads 2,
2026-01-03-ab,2026-01-03,,,m1,0.8-1.2,,python3 ab.py old new,a note
"""
MACHINES = """machine,cpu,cores,l1d_kib,l2_kib,l3_mib,memory_gib,note
m1,Test CPU,2,32,1024,32,24,
"""
SHAPES = """run,shape,P ns/step,ORT/best
2026-01-02-t-1t,lstm/64,1500,1.20
2026-01-02-t-1t,lstm/256,16400,1.09
2026-01-02-t-2t,lstm/64,900,1.77
2026-01-02-t-2t,lstm/256,8000,1.18
"""
FIGURES = """run,subject,metric,value
2026-01-03-ab,lstm/64,one core,1.05
2026-01-03-ab,lstm/64,two cores,1.06
2026-01-03-ab,gru/64,one core,0.98-1.01
"""
PAGE = """# Page

Text before.

<!-- table {"data": "shapes.csv", "run": "2026-01-02-t-1t"} -->
stale content
<!-- /table -->

Text after.
"""


class Repo:
    """A temporary repository with docs/data and one page."""

    def __init__(self, page=PAGE, runs=RUNS, shapes=SHAPES):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        data = self.root / "docs" / "data"
        data.mkdir(parents=True)
        (data / "runs.csv").write_text(runs)
        (data / "machines.csv").write_text(MACHINES)
        (data / "shapes.csv").write_text(shapes)
        (data / "figures.csv").write_text(FIGURES)
        (self.root / "docs" / "page.md").write_text(page)
        (self.root / "README.md").write_text("# readme\n")

    def page(self):
        return (self.root / "docs" / "page.md").read_text()

    def render(self, check=False):
        return render_docs.render_all(self.root, check)

    def close(self):
        self.tmp.cleanup()


def render(spec, **kw):
    repo = Repo(page=f"<!-- table {spec} -->\n<!-- /table -->\n", **kw)
    try:
        problems, _ = repo.render()
        if problems:
            raise AssertionError(problems)
        return repo.page()
    finally:
        repo.close()


class TestRender(unittest.TestCase):
    def test_one_run_with_caption(self):
        repo = Repo()
        self.addCleanup(repo.close)
        problems, stale = repo.render()
        self.assertEqual(problems, [])
        self.assertEqual(stale, ["docs/page.md"])
        text = repo.page()
        self.assertNotIn("stale content", text)
        self.assertIn("Text before.", text)
        self.assertIn("Text after.", text)
        self.assertIn("`python3 bench.py --threads 1`: `2026-01-02-t-1t` "
                      "(10:00-10:05 UTC, commit abc1234, load 0.5 → 1.0).", text)
        self.assertIn("On Test CPU, 32 KiB L1d, 1 MiB L2 per core, 32 MiB L3. Figures: `docs/data/shapes.csv`.", text)
        self.assertIn("| shape | P ns/step | ORT/best |\n|---|---:|---:|\n"
                      "| lstm/64 | 1500 | 1.20 |\n| lstm/256 | 16400 | 1.09 |\n<!-- /table -->", text)
        self.assertNotIn("2026-01-02-t-2t", text)
        # Rendering again changes nothing, and the check then passes.
        self.assertEqual(repo.render(), ([], []))
        self.assertEqual(repo.render(check=True), ([], []))

    def test_check_writes_nothing(self):
        repo = Repo()
        self.addCleanup(repo.close)
        problems, stale = repo.render(check=True)
        self.assertEqual((problems, stale), ([], ["docs/page.md"]))
        self.assertIn("stale content", repo.page())
        with contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(render_docs.main(["--check", "--root", str(repo.root)]), 1)
        self.assertIn("docs/page.md has tables that differ", err.getvalue())

    def test_a_hand_edit_is_stale(self):
        repo = Repo()
        self.addCleanup(repo.close)
        repo.render()
        page = repo.root / "docs" / "page.md"
        page.write_text(page.read_text().replace("| 16400 |", "| 15000 |"))
        self.assertEqual(repo.render(check=True), ([], ["docs/page.md"]))

    def test_join_scale_where(self):
        text = render('{"data": "shapes.csv", "join": {"1t": "2026-01-02-t-1t", "2t": "2026-01-02-t-2t"}, '
                      '"key": ["shape"], "columns": ["shape", {"col": "1t P ns/step", "as": "P µs, 1 thread", '
                      '"scale": 0.001, "digits": 2}, {"col": "2t P ns/step", "as": "P µs, 2 threads", "scale": 0.001, '
                      '"digits": 1}, "2t ORT/best"], "where": {"shape": "lstm/256"}}')
        self.assertIn("| shape | P µs, 1 thread | P µs, 2 threads | 2t ORT/best |\n|---|---:|---:|---:|\n"
                      "| lstm/256 | 16.40 | 8.0 | 1.18 |\n", text)
        self.assertIn("`2026-01-02-t-1t`", text)
        self.assertIn("`2026-01-02-t-2t`", text)

    def test_runs_stacked_with_run_fields(self):
        text = render('{"data": "shapes.csv", "runs": ["2026-01-02-t-1t", "2026-01-02-t-2t"], '
                      '"columns": ["run.utc", "shape", {"col": "P ns/step", "digits": 0}], "where": {"shape": "lstm/64"}, '
                      '"caption": false}')
        self.assertEqual(text, "<!-- table " + text.split("<!-- table ")[1].split("\n")[0].split(" -->")[0] + " -->\n"
                         "| run.utc | shape | P ns/step |\n|---|---|---:|\n"
                         "| 10:00-10:05 | lstm/64 | 1,500 |\n| 10:05-10:10 | lstm/64 | 900 |\n<!-- /table -->\n")

    def test_many_runs_in_one_line(self):
        runs = RUNS + "".join(f"2026-01-0{d}-m,2026-01-0{d},,,m1,,,python3 many.py,\n" for d in range(3, 10))
        shapes = SHAPES + "".join(f"2026-01-0{d}-m,gru/64,{d},1.0\n" for d in range(3, 10))
        ids = ", ".join(f'"2026-01-0{d}-m"' for d in range(3, 10))
        text = render('{"data": "shapes.csv", "runs": [' + ids + ']}', runs=runs, shapes=shapes)
        self.assertIn("`python3 many.py`: 7 runs, 2026-01-03 to 2026-01-09, `2026-01-03-m` to `2026-01-09-m` "
                      "(each one's time, commit and load in `docs/data/runs.csv`).", text)

    def test_pivot(self):
        text = render('{"data": "figures.csv", "run": "2026-01-03-ab", "pivot": "shape"}')
        self.assertIn("`python3 ab.py old new`: `2026-01-03-ab` (commit not recorded, load 0.8-1.2).", text)
        self.assertIn("| shape | one core | two cores |\n|---|---:|---:|\n"
                      "| lstm/64 | 1.05 | 1.06 |\n| gru/64 | 0.98-1.01 |  |\n", text)

    def test_group(self):
        shapes = SHAPES + "2026-01-02-t-2t,gru/64,700,1.31\n2026-01-02-t-2t,gru/256,n/a,\n"
        text = render('{"data": "shapes.csv", "runs": ["2026-01-02-t-1t", "2026-01-02-t-2t"], "group": ["run"], '
                      '"columns": ["run", "run.utc", {"agg": "count", "as": "shapes"}, '
                      '{"agg": "count", "col": "ORT/best", "below": 1.25, "as": "below 1.25x"}, '
                      '{"agg": "count", "col": "ORT/best", "at_least": 1.25, "where": {"shape": ["gru/64", "lstm/64"]}, '
                      '"as": "64, at least 1.25x"}, {"agg": "range", "col": "ORT/best", "digits": 2}, '
                      '{"agg": "median", "col": "P ns/step", "digits": 0}, {"agg": "min", "col": "P ns/step", "scale": 0.001}, '
                      '{"agg": "max", "col": "ORT/best", "below": 1.1}]}', shapes=shapes)
        self.assertIn("| run | run.utc | shapes | below 1.25x | 64, at least 1.25x | range ORT/best | "
                      "median P ns/step | min P ns/step | max ORT/best |\n"
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|\n"
                      "| 2026-01-02-t-1t | 10:00-10:05 | 2 | 2 | 0 | 1.09-1.20 | 8950 | 1.5 | 1.09 |\n"
                      "| 2026-01-02-t-2t | 10:05-10:10 | 4 | 1 | 2 | 1.18-1.77 | 900 | 0.7 |  |\n", text)
        # Grouped by a column across runs, the default columns: the group and its row count.
        text = render('{"data": "shapes.csv", "runs": ["2026-01-02-t-1t", "2026-01-02-t-2t"], "group": ["shape"], '
                      '"caption": false}')
        self.assertIn("| shape | rows |\n|---|---:|\n| lstm/64 | 2 |\n| lstm/256 | 2 |\n", text)
        # Grouped by a field of the runs: both runs are of 2026-01-02 on m1.
        text = render('{"data": "shapes.csv", "runs": ["2026-01-02-t-1t", "2026-01-02-t-2t"], '
                      '"group": ["run.machine", "run.date"], "columns": ["run.machine", "run.date", '
                      '{"agg": "count", "as": "rows"}, {"agg": "range", "col": "ORT/best", "digits": 2}], '
                      '"caption": false}', shapes=shapes)
        self.assertIn("| run.machine | run.date | rows | range ORT/best |\n|---|---|---:|---:|\n"
                      "| m1 | 2026-01-02 | 6 | 1.09-1.77 |\n", text)

    def test_spec_errors(self):
        for spec, want in (
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": "run"}', "group is a list"),
                ('{"data": "shapes.csv", "join": {"a": "2026-01-02-t-1t"}, "group": ["run"]}', "no pivot"),
                ('{"data": "figures.csv", "run": "2026-01-03-ab", "pivot": "shape", "group": ["run"]}', "no pivot"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["x"]}', "group names no column"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run.x"]}', "no run field 'x'"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], "columns": ["shape"]}',
                 "neither grouped nor an agg"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], "columns": [{"agg": "sum"}]}',
                 "unknown agg"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], "columns": [{"agg": "max"}]}',
                 "needs col"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], '
                 '"columns": [{"agg": "count", "below": 1}]}', "need col"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], '
                 '"columns": [{"agg": "count", "col": "ORT/best", "below": "1"}]}', "are numbers"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], '
                 '"columns": [{"agg": "min", "col": "ORT/best", "scale": "x"}]}', "are numbers"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "group": ["run"], '
                 '"columns": [{"agg": "max", "col": "y"}]}', "no column 'y'"),
                ('{"data": "shapes.csv"}', "exactly one of run, runs, join"),
                ('{"data": "shapes.csv", "run": "2026-01-09-x"}', "not in runs.csv"),
                ('{"data": "shapes.csv", "run": "2026-01-03-ab"}', "no rows of run"),
                ('{"data": "nope.csv", "run": "2026-01-02-t-1t"}', "no dataset nope.csv"),
                ('{"data": "../runs.csv", "run": "2026-01-02-t-1t"}', "no dataset"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "columns": ["x"]}', "no column 'x'"),
                ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "colums": []}', "unknown spec key"),
                ('{"data": "shapes.csv", run}', "not JSON")):
            repo = Repo(page=f"<!-- table {spec} -->\n<!-- /table -->\n")
            try:
                problems, stale = repo.render()
                self.assertEqual(stale, [], spec)
                self.assertTrue(any(want in p for p in problems), (spec, problems))
            finally:
                repo.close()
        repo = Repo(page='<!-- table {"data": "shapes.csv", "run": "2026-01-02-t-1t"} -->\nno end\n')
        self.addCleanup(repo.close)
        problems, _ = repo.render()
        self.assertTrue(any("has no <!-- /table -->" in p for p in problems), problems)


class TestPlot(unittest.TestCase):
    SPEC = ('{"data": "shapes.csv", "runs": ["2026-01-02-t-1t", "2026-01-02-t-2t"], "x": "shape", '
            '"y": "ORT/best", "series": "run.utc", "file": "plots/ort.svg", "title": "ORT over us", "target": 1.25}')

    def repo(self):
        repo = Repo(page=f"# p\n\n<!-- plot {self.SPEC} -->\n<!-- /plot -->\n")
        self.addCleanup(repo.close)
        return repo

    def test_writes_svg_and_link(self):
        repo = self.repo()
        problems, stale = repo.render()
        self.assertEqual(problems, [])
        self.assertEqual(stale, ["docs/page.md", "docs/data/plots/ort.svg"])
        self.assertIn("![ORT over us](data/plots/ort.svg)\n<!-- /plot -->", repo.page())
        self.assertIn("`2026-01-02-t-2t`", repo.page())
        svg = (repo.root / "docs" / "data" / "plots" / "ort.svg").read_text()
        self.assertTrue(svg.startswith("<svg ") and svg.endswith("</svg>\n"))
        self.assertEqual(svg.count("<polyline"), 2)  # one per series
        self.assertEqual(svg.count("<circle"), 4)  # one per point
        self.assertIn(">lstm/64</text>", svg)
        self.assertIn("target 1.25", svg)
        self.assertIn("run.utc 10:05-10:10", svg)
        self.assertEqual(repo.render(check=True), ([], []))

    def test_svg_checked(self):
        repo = self.repo()
        repo.render()
        svg = repo.root / "docs" / "data" / "plots" / "ort.svg"
        svg.write_text(svg.read_text().replace("target 1.25", "target 2"))
        self.assertEqual(repo.render(check=True), ([], ["docs/data/plots/ort.svg"]))
        svg.unlink()
        self.assertEqual(repo.render(check=True), ([], ["docs/data/plots/ort.svg"]))

    def test_y_moves_the_points(self):
        repo = self.repo()
        repo.render()
        before = (repo.root / "docs" / "data" / "plots" / "ort.svg").read_text()
        shapes = repo.root / "docs" / "data" / "shapes.csv"
        shapes.write_text(shapes.read_text().replace("lstm/256,8000,1.18", "lstm/256,8000,1.50"))
        self.assertEqual(repo.render(check=True), ([], ["docs/data/plots/ort.svg"]))
        repo.render()
        self.assertNotEqual(before, (repo.root / "docs" / "data" / "plots" / "ort.svg").read_text())

    def test_bad_specs(self):
        for spec, want in (('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "x": "shape", "y": "ORT/best", '
                            '"file": "../x.svg", "title": "t"}', "a .svg path inside docs/data"),
                           ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "x": "shape", "y": "ORT/best"}',
                            "the plot spec needs file"),
                           ('{"data": "shapes.csv", "run": "2026-01-02-t-1t", "x": "shape", "y": "shape", '
                            '"file": "p.svg", "title": "t"}', "no numeric")):
            repo = Repo(page=f"<!-- plot {spec} -->\n<!-- /plot -->\n")
            try:
                problems, _ = repo.render()
                self.assertTrue(any(want in p for p in problems), (spec, problems))
            finally:
                repo.close()


class TestData(unittest.TestCase):
    def problems(self, runs=RUNS, shapes=SHAPES):
        repo = Repo(page="# nothing\n", runs=runs, shapes=shapes)
        try:
            return repo.render()[0]
        finally:
            repo.close()

    def test_sound(self):
        self.assertEqual(self.problems(), [])

    def test_row_without_run(self):
        got = self.problems(shapes=SHAPES + "2026-01-09-x,lstm/64,1,1\n")
        self.assertIn("shapes.csv:6: run '2026-01-09-x' is not in runs.csv", got)

    def test_run_without_rows(self):
        got = self.problems(runs=RUNS + "2026-01-04-idle,2026-01-04,,,m1,,,cmd,\n")
        self.assertIn("runs.csv: run 2026-01-04-idle has no rows in any dataset", got)

    def test_bad_runs(self):
        bad = RUNS + ("2026-01-05-a,2026-01-06,,,m1,,,cmd,\n"
                      "2026-01-05-b,2026-01-05,,,m9,,,cmd,\n"
                      "2026-01-05-c,2026-01-05,,zzz,m1,high,,,\n"
                      "2026-01-05-D,2026-01-05,,,m1,,,cmd,\n")
        shapes = SHAPES + "".join(f"2026-01-05-{x},s,1,1\n" for x in "abcD")
        got = "\n".join(self.problems(runs=bad, shapes=shapes))
        self.assertIn("2026-01-05-a: date '2026-01-06' is not YYYY-MM-DD or not the id's", got)
        self.assertIn("2026-01-05-b: unknown machine 'm9'", got)
        self.assertIn("2026-01-05-c: no command", got)
        self.assertIn("2026-01-05-c: commit 'zzz' is not a hash", got)
        self.assertIn("2026-01-05-c: load_before 'high' is not a number or a range", got)
        self.assertIn("2026-01-05-D: an id is the date", got)

    def test_duplicate_run(self):
        lines = RUNS.splitlines()
        with self.assertRaises(render_docs.DataError):
            repo = Repo(runs="\n".join(lines + lines[1:2]) + "\n")
            try:
                repo.render()
            finally:
                repo.close()

    def test_short_row(self):
        got = self.problems(shapes=SHAPES + "2026-01-02-t-1t,gru/64\n")
        self.assertIn("shapes.csv:6: the row has not as many cells as the header", got)


class TestImport(unittest.TestCase):
    TABLE = """| shape | P ns/step | ORT/best |
|---|---:|---:|
| lstm/64 | **1,400** | 1.25 |
| lstm/1024 | 338,200 | n/a |

Notes after the table.
"""

    def test_append(self):
        repo = Repo(runs=RUNS + "2026-01-04-t-1t,2026-01-04,,,m1,,,python3 bench.py,\n")
        self.addCleanup(repo.close)
        self.assertEqual(render_docs.import_table(repo.root, "shapes.csv", "2026-01-04-t-1t", self.TABLE), 2)
        text = (repo.root / "docs" / "data" / "shapes.csv").read_text()
        self.assertTrue(text.endswith("2026-01-04-t-1t,lstm/64,1400,1.25\n2026-01-04-t-1t,lstm/1024,338200,\n"), text)
        self.assertEqual(repo.render()[0], [])
        with self.assertRaisesRegex(render_docs.DataError, "already has rows"):
            render_docs.import_table(repo.root, "shapes.csv", "2026-01-04-t-1t", self.TABLE)

    def test_split_and_set(self):
        repo = Repo(runs=RUNS + "2026-01-04-r,2026-01-04,,,m1,,,go run ./cmd/roofline,\n",
                    shapes="run,shape,threads,GB/s best,GB/s median,fraction best,fraction paired median\n")
        self.addCleanup(repo.close)
        table = ("| shape | GB/s (best / median) | fraction (best, paired median) |\n|---|---:|---:|\n"
                 "| lstm/512 | 84.1 / 82.5 | 0.87, 0.86 |\n| lstm/16 | 9.5 / 9.1 | - |\n")
        self.assertEqual(render_docs.import_table(repo.root, "shapes.csv", "2026-01-04-r", table, {"threads": "2"}), 2)
        text = (repo.root / "docs" / "data" / "shapes.csv").read_text()
        self.assertTrue(text.endswith("2026-01-04-r,lstm/512,2,84.1,82.5,0.87,0.86\n2026-01-04-r,lstm/16,2,9.5,9.1,,\n"), text)
        with self.assertRaisesRegex(render_docs.DataError, "no column"):
            render_docs.import_table(repo.root, "shapes.csv", "2026-01-02-t-1t", table, {"cores": "2"})
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(render_docs.main(["import", "shapes.csv", "2026-01-03-ab", "--set", "threads=1",
                                               "--root", str(repo.root)]), 1)  # no table on stdin

    def test_refusals(self):
        repo = Repo()
        self.addCleanup(repo.close)
        with self.assertRaisesRegex(render_docs.DataError, "not in runs.csv"):
            render_docs.import_table(repo.root, "shapes.csv", "2026-01-09-x", self.TABLE)
        with self.assertRaisesRegex(render_docs.DataError, "no column"):
            render_docs.import_table(repo.root, "shapes.csv", "2026-01-03-ab", "| shape | speed |\n|---|---|\n| a | 1 |\n")
        with self.assertRaisesRegex(render_docs.DataError, "no Markdown table"):
            render_docs.import_table(repo.root, "shapes.csv", "2026-01-03-ab", "nothing here\n")


class TestThisRepository(unittest.TestCase):
    def test_docs_are_current(self):
        problems, stale = render_docs.render_all(render_docs.ROOT, check=True)
        self.assertEqual(problems, [])
        self.assertEqual(stale, [], "run python3 scripts/render_docs.py and commit the docs")


if __name__ == "__main__":
    unittest.main()
