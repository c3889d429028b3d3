#!/usr/bin/env python3
"""Tests for ab_bench.py, on captured go test output and a fake runner.

Runs without Go:  python3 scripts/test_ab_bench.py
"""

import io
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_bench  # noqa: E402

OUT = """\
goos: linux
BenchmarkTableIP/cell=lstm/hidden=256/layers=4/T=10/sched=P-2   	   100	  2000000 ns/op	   1052672 B/step	  200000 ns/step	  0 B/op
BenchmarkGemm/H=256/m=4/f32          	    5000	     20000 ns/op	        52.4 GFLOP/s
BenchmarkBroken/x	notanumber
--- BENCH: BenchmarkTableIP
PASS
"""


class Parse(unittest.TestCase):
    def test_ns_step_before_ns_op(self):
        got = ab_bench.parse(OUT)
        self.assertEqual(got["BenchmarkTableIP/cell=lstm/hidden=256/layers=4/T=10/sched=P-2"], 200000.0)
        self.assertEqual(got["BenchmarkGemm/H=256/m=4/f32"], 20000.0)
        self.assertNotIn("BenchmarkBroken/x", got)

    def test_metric(self):
        got = ab_bench.parse(OUT, "GFLOP/s")
        self.assertEqual(got, {"BenchmarkGemm/H=256/m=4/f32": 52.4})


class Main(unittest.TestCase):
    def run_main(self, values, extra=()):
        calls = []

        def runner(path, args):
            calls.append(path)
            v = values[path][len([c for c in calls if c == path]) - 1]
            return f"BenchmarkX-1\t10\t{v} ns/op\n"
        out = io.StringIO()
        ab_bench.main(["old.test", "new.test", "--bench", "X", "--rounds", "3", *extra], out=out, runner=runner)
        return calls, out.getvalue()

    def test_alternates_and_ratio(self):
        calls, text = self.run_main({"old.test": [300, 100, 200], "new.test": [100, 150, 50]})
        self.assertEqual(calls, ["old.test", "new.test"] * 3)
        # medians 200 and 100: the new build is 2x faster
        self.assertIn("| BenchmarkX-1 | 200 | 100-300 | 100 | 50-150 | 2.00 |", text)
        self.assertIn("3 alternating rounds", text)
        self.assertIn("Load average (1 min):", text)

    def test_higher_is_faster_metric(self):
        table = ab_bench.table({"B": {"old": [50.0], "new": [100.0]}}, ("old", "new"), "GFLOP/s")
        self.assertIn("| 2.00 |", table)

    def test_cpu_time_is_lower_is_faster(self):
        line = "BenchmarkTableIP/x\t10\t5 ns/op\t 400 ns/step\t 300 cpu-ns/step\n"
        self.assertEqual(ab_bench.parse(line, "cpu-ns/step"), {"BenchmarkTableIP/x": 300.0})
        table = ab_bench.table({"B": {"old": [200.0], "new": [100.0]}}, ("old", "new"), "cpu-ns/step")
        self.assertIn("| 2.00 |", table)

    def test_cpu_time_per_op_is_lower_is_faster(self):
        line = "BenchmarkTreeShapes/x-2\t10\t500 ns/op\t 700 cpu-ns/op\t 2000 trees/s\n"
        self.assertEqual(ab_bench.parse(line, "cpu-ns/op"), {"BenchmarkTreeShapes/x-2": 700.0})
        table = ab_bench.table({"B": {"old": [200.0], "new": [100.0]}}, ("old", "new"), "cpu-ns/op")
        self.assertIn("| 2.00 |", table)

    def test_large_values_with_separators(self):
        table = ab_bench.table({"B": {"old": [17790.0], "new": [17430.0]}}, ("old", "new"))
        self.assertIn("| B | 17,790 | 17,790-17,790 | 17,430 | 17,430-17,430 | 1.02 |", table)

    def test_no_results(self):
        with self.assertRaises(SystemExit):
            ab_bench.main(["a", "b", "--bench", "X"], out=io.StringIO(), runner=lambda p, a: "PASS\n")


if __name__ == "__main__":
    unittest.main()
