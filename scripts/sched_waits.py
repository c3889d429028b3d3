#!/usr/bin/env python3
"""How long goroutines waited for a P, from a Go execution trace.

Reads the text of `go tool trace -d=parsed TRACE` on stdin and prints a
table of the waits between a goroutine becoming runnable and running
(a new goroutine's first run included): how many, their quantiles and
the longest, and how many waited over 1 ms and over 5 ms. A server's
trace comes from /debug/pprof/trace on a build that serves
net/http/pprof:

    curl -so trace.out '127.0.0.1:6061/debug/pprof/trace?seconds=2'
    go tool trace -d=parsed trace.out | python3 scripts/sched_waits.py
"""

import re
import sys

TRANSITION = re.compile(
    r'^M=-?\d+ P=-?\d+ G=-?\d+ StateTransition Time=(\d+) GoID=(\d+) (\w+)->(\w+)')


def waits(lines):
    """The waits, in ns, from each Runnable to the Running that ends it."""
    since = {}
    out = []
    for line in lines:
        m = TRANSITION.match(line)
        if not m:
            continue
        t, g, to = int(m.group(1)), m.group(2), m.group(4)
        if to == 'Runnable':
            since[g] = t
        elif to == 'Running' and g in since:
            out.append(t - since.pop(g))
    return out


def quantile(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def table(ns):
    ns = sorted(ns)
    if not ns:
        return 'no goroutine waited for a P (no transitions in the input)\n'
    us = lambda v: f'{v / 1e3:,.1f}'
    head = ['waits', 'p50 µs', 'p90 µs', 'p99 µs', 'p99.9 µs', 'longest µs', 'over 1 ms', 'over 5 ms']
    row = [f'{len(ns):,}'] + [us(quantile(ns, q)) for q in (0.5, 0.9, 0.99, 0.999)] + [
        us(ns[-1]), str(sum(v > 1e6 for v in ns)), str(sum(v > 5e6 for v in ns))]
    return ('| ' + ' | '.join(head) + ' |\n|' + '---:|' * len(head) + '\n| ' +
            ' | '.join(row) + ' |\n')


if __name__ == '__main__':
    sys.stdout.write(table(waits(sys.stdin)))
