#!/usr/bin/env python3
"""Tests for tree_bench.py's parsing and table, on captured output, and its
rounds (the agreement rule of bench_rounds.py) with a fake runner.

Runs without Go benchmarks or torch:  python3 scripts/test_tree_bench.py
"""

import contextlib
import io
import json
import re
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_rounds  # noqa: E402
import tree_bench  # noqa: E402

# Two runs of BenchmarkTreeLSTM, at GOMAXPROCS 1 (no suffix) and 2 (-2),
# with the lines go test prints around them.
GO_OUTPUT = """\
goos: linux
goarch: amd64
pkg: rnnserve/schedule
cpu: AMD EPYC
BenchmarkTreeLSTM/executor=recursive/batch=1         	    3031	    390549 ns/op	      2000 trees/s	     321 B/op	       0 allocs/op
BenchmarkTreeLSTM/executor=recursive/batch=25        	     123	   9693413 ns/op	      2500 trees/s	   98847 B/op	       0 allocs/op
BenchmarkTreeLSTM/executor=depth_batched/batch=1     	    4410	    228555 ns/op	      4000 trees/s	      26 B/op	       0 allocs/op
BenchmarkTreeLSTM/executor=depth_batched/batch=25    	     265	   4475883 ns/op	      5000 trees/s	    4667 B/op	       0 allocs/op
BenchmarkTreeLSTM/executor=depth_batched/batch=25-2  	     265	   4475883 ns/op	      9000 trees/s	    4667 B/op	       0 allocs/op
BenchmarkTreeShapes/balanced/batch=1                 	    1000	   1000 ns/op	      1 trees/s
PASS
ok  	rnnserve/schedule	12.3s
BenchmarkTreeLSTM/executor=depth_batched/batch=25    	     265	   4475883 ns/op	      6000 trees/s	    4667 B/op	       0 allocs/op
BenchmarkTreeLSTM/executor=depth_batched/batch=25    	     265	   4475883 ns/op	      5500 trees/s	    4667 B/op	       0 allocs/op
"""

# torch_tree.py bench at one thread and at two in two configurations; an
# older line without blas_threads counts as torch threads = OpenBLAS threads.
TORCH_OUTPUT = """\
# 250 SST-like trees: mean 20.0 leaves, mean height 9.3; torch 1.13.0a0, 1 torch thread(s), 1 OpenBLAS thread(s)
{"impl": "per_node", "batch": 1, "threads": 1, "blas_threads": 1, "trees_per_s": 500.0}
{"impl": "depth_batched", "batch": 25, "threads": 1, "blas_threads": 1, "trees_per_s": 2000.0}
{"impl": "depth_batched", "batch": 25, "threads": 2, "blas_threads": 2, "trees_per_s": 3000.0}
{"impl": "depth_batched", "batch": 25, "threads": 1, "blas_threads": 2, "trees_per_s": 4000.0}
{"impl": "per_node", "batch": 1, "threads": 2, "trees_per_s": 300.0}
"""


def row(text, threads, batch):
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 2 and cells[0] == str(threads) and cells[1] == str(batch):
            return cells
    raise AssertionError(f"no row for {threads} threads, batch {batch} in\n{text}")


class TreeBenchTest(unittest.TestCase):
    def test_parse_go(self):
        go = tree_bench.parse_go(GO_OUTPUT)
        assert go[(1, "recursive", 1)] == [2000.0], go
        assert go[(1, "depth_batched", 25)] == [5000.0, 6000.0, 5500.0], go
        assert go[(2, "depth_batched", 25)] == [9000.0], go
        assert not any(k[1] not in tree_bench.EXECUTORS for k in go), go

    def test_parse_torch(self):
        pt = tree_bench.parse_torch(TORCH_OUTPUT)
        assert pt[(1, (1, 1), "per_node", 1)] == [500.0], pt
        assert pt[(2, (1, 2), "depth_batched", 25)] == [4000.0], pt
        assert pt[(2, (2, 2), "per_node", 1)] == [300.0], pt

    def test_table(self):
        go, pt = tree_bench.parse_go(GO_OUTPUT), tree_bench.parse_torch(TORCH_OUTPUT)
        text = tree_bench.table(go, pt, [1, 2], loads=[0.1, 2.5])
        assert "from a loaded machine" in text, text
        # 1 thread, batch 25: Go depth-batched is the median 5500 of three
        # rounds, 2.75x PyTorch's 2000; the spread is 6000/5000.
        r = row(text, 1, 25)
        assert r[3] == "5500" and r[5] == "2000" and r[7] == "2.75x" and r[8] == "1.20", r
        # Batch 1: best Go is depth-batched 4000, 8x per-node.
        r = row(text, 1, 1)
        assert r[2] == "2000" and r[3] == "4000" and r[6] == "8.00x", r
        # 2 threads: PyTorch's fastest configuration, named.
        r = row(text, 2, 25)
        assert r[5] == "4000 (1x2)" and r[7] == "2.25x", r
        assert "1 thread(s), batch 25: best Go (depth_batched) 2.75x PyTorch depth-batched (target 2x): met" in text
        assert "1 thread(s), batch 1: best Go (depth_batched) 8.00x PyTorch per-node (target 5x): met; recursive alone 4.00x" in text
        # Missing figures show as dashes, not errors.
        r = row(text, 2, 10)
        assert r[2:8] == ["-"] * 6, r

    def test_quiet_load(self):
        text = tree_bench.table({}, {}, [1], loads=[0.05, 0.2])
        assert "loaded machine" not in text and "0.05 to 0.20" in text, text

    def test_rerender(self):
        with tempfile.TemporaryDirectory() as d:
            g, t = Path(d) / "go.txt", Path(d) / "torch.txt"
            g.write_text(GO_OUTPUT)
            t.write_text(TORCH_OUTPUT)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert tree_bench.main(["--go-output", str(g), "--torch-output", str(t)]) == 0
            text = out.getvalue()
            assert row(text, 1, 25)[7] == "2.75x", text
            # Captured runs are not rerun, but their rounds are judged: the
            # rows with figures of a single round have not settled; 1 thread,
            # batch 25 has three rounds of Go depth-batched.
            assert row(text, 1, 25)[9] == "3†" and row(text, 1, 10)[9] == "0", text
            assert ("Did not settle (†): 1 thread(s) batch 1, 1 thread(s) batch 25, 2 thread(s) batch 1, "
                    "2 thread(s) batch 25.") in text, text
            assert "Captured outputs, not rerun" in text and "Load average (1 min):" not in text, text

    def test_row_series(self):
        go = {(1, "recursive", 1): [100, 150, 104], (1, "depth_batched", 1): [200, 205]}
        torch = {(1, (1, 1), "per_node", 1): [50, 80]}
        series = tree_bench.row_series(go, torch, (1, 1))
        assert series == {"Go recursive": [100, 150, 104], "Go depth_batched": [200, 205],
                          "PyTorch per_node": [50, 80], "PyTorch depth_batched": []}, series
        assert bench_rounds.unsettled(series, 10) == ["PyTorch per_node"]
        assert tree_bench.row_rounds(go, torch, (1, 1)) == 3
        # At two threads, only the configuration the table shows (the
        # fastest median) counts: 2x2 here, whose rounds agree.
        torch = {(2, (2, 2), "per_node", 1): [300, 310], (2, (1, 2), "per_node", 1): [100, 500]}
        assert tree_bench.row_series({}, torch, (2, 1))["PyTorch per_node"] == [300, 310]

    def test_reruns_unsettled_rows(self):
        # 1 thread, batch 10: Go recursive settles at round 3. 2 threads,
        # batch 25: PyTorch depth-batched doubles every round in every
        # configuration. Every other figure is steady.
        varying = {("go", 1, "recursive", 10): [1000, 1500, 1050]}
        for t, b in tree_bench.TORCH_CONFIGS[2]:
            varying[("torch", t, b, "depth_batched", 25)] = [100 * 2 ** k for k in range(9)]
        calls, counter = [], {}

        def value(key):
            k = counter.get(key, 0)
            counter[key] = k + 1
            return varying[key][k] if key in varying else 1000

        def fake_run(cmd, cwd, env=None, log=None):
            log.extend([0.1, 0.2])
            if "-test.bench" in cmd:
                n = int(cmd[cmd.index("-test.cpu") + 1])
                pattern = cmd[cmd.index("-test.bench") + 1]
                batches = [int(b) for b in re.search(r"batch=\((.*)\)", pattern)[1].split("|")]
                calls.append(("go", n, batches))
                suffix = f"-{n}" if n > 1 else ""
                return "".join(f"BenchmarkTreeLSTM/executor={ex}/batch={B}{suffix} 10 1 ns/op "
                               f"{value(('go', n, ex, B))} trees/s\n" for ex in tree_bench.EXECUTORS for B in batches)
            t, b = int(cmd[cmd.index("--threads") + 1]), int(cmd[cmd.index("--blas-threads") + 1])
            batches = [int(x) for x in cmd[cmd.index("--batch") + 1:]]
            calls.append(("torch", max(t, b), batches))
            return "".join(json.dumps({"impl": impl, "batch": B, "threads": t, "blas_threads": b,
                                       "trees_per_s": value(("torch", t, b, impl, B))}) + "\n"
                           for impl in tree_bench.IMPLS for B in batches)

        loads, times = iter([0.05, 0.3]), iter(["2026-11-26 02:19:00 UTC", "2026-11-26 02:22:00 UTC"])
        out = io.StringIO()
        with mock.patch.multiple(tree_bench, run=fake_run), \
                mock.patch.multiple(bench_rounds, loadavg=lambda: next(loads), utc_now=lambda: next(times)), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert tree_bench.main(["--go", "true", "--rounds", "2", "--max-rounds", "5"]) == 0
        text = out.getvalue()
        go1 = [c for c in calls if c[:2] == ("go", 1)]
        go2 = [c for c in calls if c[:2] == ("go", 2)]
        assert [c[2] for c in go1] == [[1, 10, 25], [1, 10, 25], [10]], calls
        assert [c[2] for c in go2] == [[1, 10, 25], [1, 10, 25], [25], [25], [25]], calls
        # PyTorch runs with Go, the same batches, each configuration.
        torch2 = [c[2] for c in calls if c[:2] == ("torch", 2)]
        assert torch2 == [[1, 10, 25]] * 6 + [[25]] * 9, calls
        assert [c for c in calls if c[:2] == ("torch", 1)] == [("torch", 1, c[2]) for c in go1], calls
        # Go first in odd rounds, last in even ones: round 1 is six calls.
        assert [c[:2] for c in calls[:2] + calls[6:8]] == [("go", 1), ("torch", 1), ("torch", 1), ("go", 1)], calls
        assert [row(text, n, B)[9] for n in (1, 2) for B in tree_bench.BATCHES] == ["2", "3", "2", "2", "2", "5†"], text
        # Medians of all rounds: 1000, 1500, 1050; 100 to 1600 in the configuration shown.
        assert row(text, 1, 10)[2] == "1050" and row(text, 2, 25)[5] == "400 (2x2)", text
        assert ("Each row rerun until two rounds agree within 10% on every figure (trees/s of Go recursive and "
                "depth-batched, PyTorch per-node and depth-batched as shown), at most 5 rounds") in text, text
        assert "Did not settle within 5 rounds (†): 2 thread(s) batch 25." in text, text
        assert ("Load average (1 min): 0.05 before the first round (2026-11-26 02:19:00 UTC), 0.30 after the last "
                "(2026-11-26 02:22:00 UTC).") in text, text
        assert "2026-11-26 02:19:00 UTC" in text.splitlines()[0], text

    def test_no_reruns_with_agree_0(self):
        calls = []

        def fake_run(cmd, cwd, env=None, log=None):
            calls.append(cmd)
            # Go's figure doubles every round: it would be rerun.
            return f"BenchmarkTreeLSTM/executor=recursive/batch=1 10 1 ns/op {2 ** len(calls)} trees/s\n"

        with mock.patch.multiple(tree_bench, run=fake_run), contextlib.redirect_stdout(io.StringIO()) as out, \
                contextlib.redirect_stderr(io.StringIO()):
            assert tree_bench.main(["--go", "true", "--rounds", "2", "--agree", "0", "--threads", "1"]) == 0
        # Two rounds of Go and PyTorch at one thread, however unsettled.
        assert len(calls) == 4, calls
        text = out.getvalue()
        assert row(text, 1, 1)[9] == "2" and "Agreement of rounds not checked (--agree 0)." in text, text


if __name__ == "__main__":
    unittest.main()
