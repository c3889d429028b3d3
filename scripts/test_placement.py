#!/usr/bin/env python3
"""Tests of scripts/placement.py on made-up BenchmarkPPlacement lines."""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement  # noqa: E402


def line(shape, times, drams, ns=250000.0, cores=1):
    """A BenchmarkPPlacement line with the copies' figures given."""
    f = [f"{t} c{c}-time\t{d} c{c}-whh-dram" for c, (t, d) in enumerate(zip(times, drams))]
    suffix = f"-{cores}" if cores > 1 else ""
    spread = max(times) / min(times)
    return (f"BenchmarkPPlacement/cell={shape}{suffix} \t 60\t 100000 ns/op\t" + "\t".join(f)
            + f"\t{spread} copy-spread\t{ns} ns/step\t30.5 ref-dram-GB/s")


class TestPlacement(unittest.TestCase):
    def test_parse(self):
        text = "goos: linux\ncpu: x\n" + line("lstm/hidden=1024/layers=1/T=100", [1.1, 0.9, 1.0, 1.0], [1.2, 0.8, 1.0, 1.0], cores=2) + "\nPASS\n"
        (p,) = placement.parse(text)
        self.assertEqual(p["shape"], "lstm/1024/1/100")
        self.assertEqual(p["cores"], 2)
        self.assertEqual(p["m"]["c1-whh-dram"], 0.8)

    def test_missing_metric(self):
        text = line("lstm/hidden=64/layers=1/T=10", [1, 1, 1, 1], [1, 1, 1, 1]).replace("copy-spread", "other")
        with self.assertRaisesRegex(ValueError, "copy-spread"):
            placement.parse(text)

    def test_summary_follows_pages(self):
        # Copies whose pages read slower take longer: half the page
        # difference reaches the step, so the slope is 0.5 and r is 1.
        text = "\n".join([
            line("gru/hidden=1024/layers=4/T=100", [1.05, 0.95, 1.0, 1.0], [1.1, 0.9, 1.0, 1.0], ns=300000),
            line("gru/hidden=1024/layers=4/T=100", [1.0, 1.0, 1.025, 0.975], [1.0, 1.0, 1.05, 0.95], ns=450000),
        ])
        (s,) = placement.summary(placement.parse(text)).values()
        self.assertEqual(s["processes"], "2")
        self.assertEqual(s["µs/step"], "300.0-450.0")
        self.assertEqual(s["slowest/fastest process"], "1.50")
        self.assertEqual(s["r(time, W_hh DRAM)"], "1.00")
        self.assertEqual(s["slope"], "0.50")
        self.assertEqual(s["copy spread (max)"], "1.105")
        # The copy with the fastest pages is the fastest copy: 1/0.95 and
        # 1/0.975 the mean time over it.
        self.assertEqual(s["fastest pages' gain"], f"{(1 / 0.95 + 1 / 0.975) / 2:.3f}")

    def test_no_link(self):
        # Times that do not follow the pages: r near 0.
        text = "\n".join([
            line("lstm/hidden=256/layers=4/T=100", [1.0, 1.0, 1.05, 0.95], [1.1, 0.9, 1.0, 1.0]),
            line("lstm/hidden=256/layers=4/T=100", [1.05, 0.95, 1.0, 1.0], [1.0, 1.0, 1.1, 0.9]),
        ])
        (s,) = placement.summary(placement.parse(text)).values()
        self.assertEqual(s["r(time, W_hh DRAM)"], "0.00")

    def test_rows_and_main(self):
        text = line("lstm/hidden=1024/layers=1/T=100", [1.1, 0.9, 1.0, 1.0], [1.2, 0.8, 1.0, 1.0])
        rows = placement.rows("run-x", placement.parse(text))
        self.assertIn(["run-x", "lstm/1024/1/100, 1 core, process 1", "copy 1 W_hh DRAM", "0.800"], rows)
        self.assertIn(["run-x", "lstm/1024/1/100, 1 core", "processes", "1"], rows)
        # One process has no correlation to give.
        self.assertNotIn("slope", [r[2] for r in rows])
        out = io.StringIO()
        sys.stdin = io.StringIO(text)
        try:
            with contextlib.redirect_stdout(out):
                placement.main(["--table"])
        finally:
            sys.stdin = sys.__stdin__
        self.assertIn("| lstm/1024/1/100, 1 core | 1 |", out.getvalue())


if __name__ == "__main__":
    unittest.main()
