"""Rounds until two agree: the project's rule for published benchmark tables.

"Re-measured on a quiet machine (load average before and after; rerun until
two runs agree within 10%)". bench_compare.py (a table row is a shape) and
tree_bench.py (a row is a thread count and batch) share this module:

- rerun() runs the first rounds over every row, then only the rows whose
  figures have no two rounds within PCT percent (|a-b| / min(a,b) <=
  PCT/100), one round at a time, until each has settled or had the most
  rounds allowed;
- settle_report() gives the rounds column (a † after the count of a row
  that never settled) and the notes that state the rule and the rows that
  did not settle;
- stamp() and load_note() record the 1-minute load average and the UTC
  date and time at the start and at the end.

Standard library only, like the scripts that import it.
"""

from datetime import datetime, timezone
from pathlib import Path


def agree(a, b, pct):
    """Whether a and b are within pct percent of the smaller one."""
    return abs(a - b) <= min(a, b) * pct / 100


def settled(values, pct):
    """Whether two of values (one a round) agree within pct percent."""
    return any(agree(a, b, pct) for i, a in enumerate(values) for b in values[i + 1:])


def unsettled(series, pct):
    """The figures of series ({figure: [value per round]}) that have values but no two within pct percent."""
    return [name for name, values in series.items() if values and not settled(values, pct)]


def add_arguments(ap, what):
    """--agree and --max-rounds, for a table whose rows are called what."""
    ap.add_argument("--agree", type=float, default=10, metavar="PCT",
                    help=f"after --rounds, rerun the {what}s until two rounds agree within PCT%% on every figure; "
                         "0: no reruns (default: %(default)g)")
    ap.add_argument("--max-rounds", type=int, metavar="M",
                    help=f"the most rounds a {what} gets (default: --rounds + 4)")


def check_arguments(ap, args):
    """--max-rounds defaults to --rounds + 4 and may not be less; --agree may not be negative."""
    if args.max_rounds is None:
        args.max_rounds = args.rounds + 4
    if args.max_rounds < args.rounds or args.agree < 0:
        ap.error("--max-rounds must be >= --rounds and --agree >= 0")


def rerun(items, rounds, max_rounds, pct, run_round, series_of):
    """Run rounds until the items' figures agree; return {item: rounds run}.

    run_round(subset, r) runs round r (from 1) over subset, a list of items
    in their order: every item for the first `rounds` rounds, afterwards
    only the items with unsettled figures (series_of(item), as
    unsettled() takes) that have had fewer than max_rounds rounds. pct 0
    stops after `rounds` rounds.
    """
    counts = {i: 0 for i in items}
    pending, r = list(items), 0
    while pending:
        r += 1
        run_round(pending, r)
        for i in pending:
            counts[i] += 1
        if r >= rounds:
            pending = [i for i in pending if pct and counts[i] < max_rounds and unsettled(series_of(i), pct)]
    return counts


def settle_report(items, counts, series_of, pct, max_rounds=None, what="shape", name=str, figures=""):
    """({item: rounds column}, notes) for the items after their rounds.

    max_rounds None means captured outputs, not rerun. name(item) is how a
    note names an item; figures, if given, names the figures compared.
    """
    if not pct:
        return {i: str(counts[i]) for i in items}, ["Agreement of rounds not checked (--agree 0)."]
    never = [i for i in items if unsettled(series_of(i), pct)]
    figures = f" ({figures})" if figures else ""
    labels = {i: f"{counts[i]}" + ("†" if i in never else "") for i in items}
    if max_rounds is None:
        notes = [f"Captured outputs, not rerun: a {what} settles when two of its rounds (its k-th result "
                 f"in each output is its round k) agree within {pct:g}% on every figure{figures}."]
        where = ""
    else:
        notes = [f"Each {what} rerun until two rounds agree within {pct:g}% on every figure{figures}, "
                 f"at most {max_rounds} rounds; figures are medians of all of its rounds."]
        where = f" within {max_rounds} rounds"
    if never:
        notes.append(f"Did not settle{where} (†): " + ", ".join(name(i) for i in never) + ".")
    return labels, notes


def loadavg(path="/proc/loadavg"):
    """The 1-minute load average, or None where it cannot be read (no /proc)."""
    try:
        return float(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def fmt_load(load):
    return "n/a" if load is None else f"{load:.2f}"


def utc_now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def stamp():
    """(UTC date and time, 1-minute load average or None), now."""
    return utc_now(), loadavg()


def load_note(start, end):
    """The note on the load average and the time before the first round and after the last (stamps)."""
    return (f"Load average (1 min): {fmt_load(start[1])} before the first round ({start[0]}), "
            f"{fmt_load(end[1])} after the last ({end[0]})"
            + ("; /proc/loadavg could not be read" if None in (start[1], end[1]) else "") + ".")
