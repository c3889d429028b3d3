#!/usr/bin/env python3
"""Tests for tree_bench.py's parsing and table, on captured output.

Runs without Go benchmarks or torch:  python3 scripts/test_tree_bench.py
"""

import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
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
            assert row(out.getvalue(), 1, 25)[7] == "2.75x", out.getvalue()


if __name__ == "__main__":
    unittest.main()
