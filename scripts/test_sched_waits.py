#!/usr/bin/env python3
"""Tests of scripts/sched_waits.py on a few lines of go tool trace's parsed output."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_waits  # noqa: E402

TRACE = """M=1 P=0 G=-1 StateTransition Time=1000 GoID=7 NotExist->Runnable Reason=""
Stack=
	net/http.(*conn).serve @ 0x1
M=1 P=0 G=-1 StateTransition Time=1500 GoID=7 Runnable->Running Reason=""
M=1 P=0 G=7 StateTransition Time=2000 GoID=8 Waiting->Runnable Reason=""
M=1 P=0 G=7 StateTransition Time=2100 GoID=7 Running->Runnable Reason="preempted"
M=2 P=1 G=-1 StateTransition Time=3000 GoID=8 Runnable->Running Reason=""
M=1 P=0 G=-1 StateTransition Time=7002100 GoID=7 Runnable->Running Reason=""
M=1 P=-1 G=-1 StateTransition Time=7002200 ProcID=0 Running->Idle Reason=""
M=2 P=1 G=8 StateTransition Time=7003000 GoID=8 Running->Waiting Reason="chan receive"
"""


class Test(unittest.TestCase):
    def test_waits(self):
        self.assertEqual(sorted(sched_waits.waits(TRACE.splitlines())), [500, 1000, 7000000])

    def test_table(self):
        t = sched_waits.table(sched_waits.waits(TRACE.splitlines()))
        row = t.splitlines()[2]
        self.assertEqual(row, '| 3 | 1.0 | 7,000.0 | 7,000.0 | 7,000.0 | 7,000.0 | 1 | 1 |')

    def test_empty(self):
        self.assertIn('no goroutine waited', sched_waits.table([]))


if __name__ == '__main__':
    unittest.main()
