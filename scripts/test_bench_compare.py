#!/usr/bin/env python3
"""Tests for bench_compare.py's parsing and table, on captured output, and
its rounds (the agreement rule of bench_rounds.py) with fake runners.

Runs without Go benchmarks, torch or node:  python3 scripts/test_bench_compare.py
"""

import contextlib
import io
import re
import sys
import tempfile
import traceback
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_compare  # noqa: E402
import bench_rounds  # noqa: E402
import bench_torch  # noqa: E402

# go test output with GOMAXPROCS=2: every name carries the -2 suffix. The
# lstm/64/1/T=10 A+ benchmark ran twice (-count 2), and there is noise
# that the parser must skip.
GO_OUTPUT_2 = """\
goos: linux
goarch: amd64
pkg: rnnserve/schedule
cpu: Intel(R) Xeon(R) Processor @ 2.90GHz
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A-2         	   10000	    120000 ns/op	     12000 ns/step	     66560 B/step	       0 B/op	       0 allocs/op
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A+-2        	   20000	     60000 ns/op	      6000 ns/step	      6656 B/step	       0 B/op	       0 allocs/op
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A+-2        	   20000	     80000 ns/op	      8000 ns/step	      6656 B/step	       0 B/op	       0 allocs/op
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=10/sched=A+-2        	   20000	     70000 ns/op	      7000 ns/step	      6656 B/step	       0 B/op	       0 allocs/op
BenchmarkTableI/cell=gru/hidden=512/layers=8/T=100/sched=A-2        	       3	 412345678 ns/op	   4123456.78 ns/step	 25165824 B/step
BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=10/sched=P-2        	   20000	     40000 ns/op	      4000 ns/step	      5000 B/step	       0 B/op	       0 allocs/op
BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=10/sched=Pbf16-2    	   20000	     30000 ns/op	      3000 ns/step	      2500 B/step	       0 B/op	       0 allocs/op
--- BENCH: BenchmarkTableI/cell=gru/hidden=512/layers=8/T=100/sched=A-2
    bench_test.go:42: some log line
BenchmarkOther/hidden=64-2	1000	1000 ns/op
PASS
ok  	rnnserve/schedule	12.345s
"""

# The same benchmark with GOMAXPROCS=1: go test appends no suffix.
GO_OUTPUT_1 = """\
BenchmarkTableI/cell=gru/hidden=128/layers=3/T=1/sched=A 	 5000	 250000 ns/op	 250000 ns/step	 589824 B/step
BenchmarkTableI/cell=gru/hidden=128/layers=3/T=1/sched=A+	 5000	 200000 ns/op	 200000 ns/step	 589824 B/step
"""

TORCH_OUTPUT = """\
{"cell": "lstm", "hidden": 64, "layers": 1, "T": 10, "threads": 2, "ns_per_step": 24000.0, "ns_per_op": 240000.0}
{"cell": "gru", "hidden": 512, "layers": 8, "T": 100, "threads": 2, "ns_per_step": 2061728.39, "ns_per_op": 206172839.0}
"""

ORT_OUTPUT = """\
{"engine": "onnxruntime", "version": "1.30.0", "threads": 2, "floor_ns": 14000}
{"engine": "onnxruntime", "cell": "lstm", "hidden": 64, "layers": 1, "T": 10, "threads": 2, "ns_per_step": 5000.0, "ns_per_op": 50000}
{"engine": "onnxruntime", "cell": "gru", "hidden": 512, "layers": 8, "T": 100, "threads": 2, "ns_per_step": 3000000.0, "ns_per_op": 300000000}
{"engine": "onnxruntime", "version": "1.30.0", "threads": 2, "floor_ns": 18000}
{"engine": "onnxruntime", "version": "1.30.0", "threads": 2, "floor_ns": 16000}
"""


def test_go_regex_selects_requested_shapes():
    pattern = bench_compare.go_bench_regex(["lstm", "gru"], [64, 512], [1, 2], [1, 100], ["A", "A+"])
    assert pattern == ("^BenchmarkTableI$/^cell=(lstm|gru)$/^hidden=(64|512)$/^layers=(1|2)$"
                       "/^T=(1|100)$/^sched=(A|A\\+)$"), pattern
    # go test matches each slash-separated part against one level of the name.
    levels = pattern.split("/")
    name = "BenchmarkTableI/cell=lstm/hidden=512/layers=2/T=100/sched=A+".split("/")
    assert all(re.search(p, n) for p, n in zip(levels, name))
    for level, wrong in ((0, "BenchmarkTableIP"), (2, "hidden=640"), (3, "layers=12"), (4, "T=10"), (5, "sched=AB")):
        assert not re.search(levels[level], wrong), wrong
    # All schedules: both benchmarks, and sched=P does not match sched=Pbf16 by prefix.
    levels = bench_compare.go_bench_regex(["lstm"], [64], [1], [1]).split("/")
    assert levels[0] == "^(BenchmarkTableI|BenchmarkTableIP)$", levels[0]
    for top in ("BenchmarkTableI", "BenchmarkTableIP"):
        assert re.search(levels[0], top)
    for ok in ("sched=A", "sched=A+", "sched=P", "sched=Pbf16"):
        assert re.search(levels[5], ok), ok
    only_p = bench_compare.go_bench_regex(["lstm"], [64], [1], [1], ["P"]).split("/")
    assert only_p[0] == "^BenchmarkTableIP$" and not re.search(only_p[5], "sched=Pbf16")


def test_parse_go_with_procs_suffix_and_count():
    results, info = bench_compare.parse_go_output(GO_OUTPUT_2)
    assert info == {"goos": "linux", "goarch": "amd64", "cpu": "Intel(R) Xeon(R) Processor @ 2.90GHz"}
    assert set(results) == {
        ("lstm", 64, 1, 10, "A"), ("lstm", 64, 1, 10, "A+"), ("gru", 512, 8, 100, "A"),
        ("lstm", 64, 1, 10, "P"), ("lstm", 64, 1, 10, "Pbf16")}
    assert results[("lstm", 64, 1, 10, "Pbf16")]["B/step"] == 2500
    a = results[("lstm", 64, 1, 10, "A")]
    assert a["ns/step"] == 12000 and a["B/step"] == 66560 and a["ns/op"] == 120000
    assert a["allocs/op"] == 0
    # Three runs of A+: the median.
    assert results[("lstm", 64, 1, 10, "A+")]["ns/step"] == 7000
    assert results[("gru", 512, 8, 100, "A")]["ns/step"] == 4123456.78


def test_parse_go_without_procs_suffix():
    results, info = bench_compare.parse_go_output(GO_OUTPUT_1)
    assert info == {}
    assert results[("gru", 128, 3, 1, "A")]["ns/step"] == 250000
    assert results[("gru", 128, 3, 1, "A+")]["B/step"] == 589824


def test_parse_torch():
    torch = bench_compare.parse_torch_output("bench_torch: a log line\n" + TORCH_OUTPUT)
    assert torch == {("lstm", 64, 1, 10): 24000.0, ("gru", 512, 8, 100): 2061728.39}
    # Three rounds of one shape: the median.
    rounds = "".join(TORCH_OUTPUT.splitlines(keepends=True)[0].replace("24000.0", v) for v in ("9.0", "30000.0", "20000.0"))
    assert bench_compare.parse_torch_output(rounds) == {("lstm", 64, 1, 10): 20000.0}


def test_parse_ort():
    ort, floor = bench_compare.parse_ort_output("ort_bench: a log line\n" + ORT_OUTPUT)
    assert ort == {("lstm", 64, 1, 10): 5000.0, ("gru", 512, 8, 100): 3000000.0}, ort
    # Three floor lines (rounds): the median.
    assert floor == {"ns": 16000, "version": "1.30.0", "threads": 2}, floor
    assert bench_compare.parse_ort_output("") == ({}, None)


def test_table_and_summary_with_ort():
    go, _ = bench_compare.parse_go_output(GO_OUTPUT_2)
    torch = bench_compare.parse_torch_output(TORCH_OUTPUT)
    ort, _ = bench_compare.parse_ort_output(ORT_OUTPUT)
    shapes = [("lstm", 64, 1, 10), ("gru", 512, 8, 100)]
    lines = bench_compare.render_table(shapes, go, torch, [], ort).splitlines()
    assert lines[0] == ("| cell | hidden | layers | T | A ns/step | A+ ns/step | P ns/step | P bf16 ns/step | "
                        "PyTorch ns/step | ORT ns/step | PyTorch/A | PyTorch/A+ | PyTorch/P | PyTorch/P bf16 | "
                        "best f32 | PyTorch/best f32 | ORT/best f32 | A B/step | A+ B/step | P B/step | "
                        "P bf16 B/step |"), lines[0]
    assert lines[1] == "|---|" + "---:|" * 20, lines[1]
    # ORT 5000 against the best float32 schedule, P at 4000: 1.25.
    assert lines[2] == ("| lstm | 64 | 1 | 10 | 12,000 | 7,000 | 4,000 | 3,000 | 24,000 | 5,000 | 2.00 | 3.43 | "
                        "6.00 | 8.00 | P | 6.00 | 1.25 | 66,560 | 6,656 | 5,000 | 2,500 |"), lines[2]
    assert " | A | 0.50 | 0.73 | " in lines[3], lines[3]
    notes = bench_compare.summary(shapes + [("lstm", 64, 1, 1)], go, ort, target=1.25, peer="ONNX Runtime",
                                  min_steps=10)
    assert notes[0] == ("ONNX Runtime/best float32 schedule: median 0.99, smallest 0.73 (gru/512/8/100, A); "
                        "1 of 2 shape(s) with T >= 10 below 1.25x: gru/512/8/100 0.73."), notes


def test_go_duration():
    assert bench_compare.go_duration_seconds("200ms") == 0.2
    assert bench_compare.go_duration_seconds("1.5s") == 1.5
    assert bench_compare.go_duration_seconds("2m") == 120
    assert bench_compare.go_duration_seconds("100x") is None


def test_table_rows_and_ratios():
    go, _ = bench_compare.parse_go_output(GO_OUTPUT_2)
    torch = bench_compare.parse_torch_output(TORCH_OUTPUT)
    shapes = [("lstm", 64, 1, 10), ("gru", 512, 8, 100), ("gru", 64, 1, 1)]
    table = bench_compare.render_table(shapes, go, torch, ["a note"])
    lines = table.splitlines()
    assert lines[0] == ("| cell | hidden | layers | T | A ns/step | A+ ns/step | P ns/step | P bf16 ns/step | "
                        "PyTorch ns/step | PyTorch/A | PyTorch/A+ | PyTorch/P | PyTorch/P bf16 | best f32 | "
                        "PyTorch/best f32 | A B/step | A+ B/step | P B/step | P bf16 B/step |"), lines[0]
    assert lines[1] == "|---|" + "---:|" * 18, lines[1]
    # PyTorch 24000 vs A 12000, A+ 7000 (median), P 4000, P bf16 3000:
    # 2.00, 3.43, 6.00 and 8.00; the best float32 schedule is P.
    assert lines[2] == ("| lstm | 64 | 1 | 10 | 12,000 | 7,000 | 4,000 | 3,000 | 24,000 | 2.00 | 3.43 | 6.00 | "
                        "8.00 | P | 6.00 | 66,560 | 6,656 | 5,000 | 2,500 |"), lines[2]
    # Only A for this shape; PyTorch slower than A by half.
    assert lines[3] == ("| gru | 512 | 8 | 100 | 4,123,457 | n/a | n/a | n/a | 2,061,728 | 0.50 | n/a | n/a | "
                        "n/a | A | 0.50 | 25,165,824 | n/a | n/a | n/a |"), lines[3]
    assert lines[4] == "| gru | 64 | 1 | 1 |" + " n/a |" * 15, lines[4]
    assert lines[5:] == ["", "a note"]


def test_summary():
    go, _ = bench_compare.parse_go_output(GO_OUTPUT_2)
    torch = bench_compare.parse_torch_output(TORCH_OUTPUT)
    notes = bench_compare.summary([("lstm", 64, 1, 10), ("gru", 512, 8, 100), ("gru", 64, 1, 1)], go, torch)
    assert notes == [
        "PyTorch/best float32 schedule: median 3.25, smallest 0.50 (gru/512/8/100, A); "
        "1 of 2 shape(s) below 2x: gru/512/8/100 0.50.",
        "PyTorch/best schedule, bf16 allowed: median 4.25, smallest 0.50 (gru/512/8/100, A); "
        "1 of 2 shape(s) below 2x: gru/512/8/100 0.50.",
    ], notes


def test_table_without_torch():
    go, _ = bench_compare.parse_go_output(GO_OUTPUT_1)
    table = bench_compare.render_table([("gru", 128, 3, 1)], go, None, [])
    assert table.splitlines()[2] == ("| gru | 128 | 3 | 1 | 250,000 | 200,000 | n/a | n/a | n/a | n/a | n/a | "
                                     "n/a | n/a | A+ | n/a | 589,824 | 589,824 | n/a | n/a |"), table


def _main_output(argv):
    out = io.StringIO()
    assert bench_compare.main(argv, out=out) == 0
    return out.getvalue()


def test_main_with_captured_outputs():
    with tempfile.TemporaryDirectory() as d:
        go_file, torch_file = Path(d, "go.txt"), Path(d, "torch.jsonl")
        go_file.write_text(GO_OUTPUT_2)
        torch_file.write_text(TORCH_OUTPUT)
        text = _main_output(["--cells", "lstm", "--hidden", "64", "--layers", "1", "--lengths", "10",
                             "--threads", "2", "--go-output", str(go_file), "--torch-output", str(torch_file)])
        lines = text.splitlines()
        assert lines[2].startswith("| lstm | 64 | 1 | 10 | 12,000 | 7,000 | 4,000 | 3,000 | 24,000 |"), text
        assert "unavailable" not in text
        assert "PyTorch/best float32 schedule: median 6.00, smallest 6.00 (lstm/64/1/10, P); 0 of 1" in text, text
        assert lines[-1].startswith("Threads: 2; Go -benchtime 200ms; goos linux"), text

        go_file.write_text(GO_OUTPUT_1)
        text = _main_output(["--cells", "gru", "--hidden", "128,256", "--layers", "3", "--lengths", "1",
                             "--go-output", str(go_file), "--no-torch"])
        assert "PyTorch was unavailable: skipped with --no-torch;" in text, text
        assert "1 requested shape(s) had no Go result." in text, text
        assert "| gru | 256 | 3 | 1 | n/a |" in text, text


def test_main_with_ort_output():
    with tempfile.TemporaryDirectory() as d:
        go_file, ort_file = Path(d, "go.txt"), Path(d, "ort.jsonl")
        go_file.write_text(GO_OUTPUT_2)
        ort_file.write_text(ORT_OUTPUT)
        text = _main_output(["--cells", "lstm", "--hidden", "64", "--layers", "1", "--lengths", "10",
                             "--threads", "2", "--go-output", str(go_file), "--no-torch",
                             "--ort-output", str(ort_file)])
        assert "| ORT ns/step |" in text.splitlines()[0], text
        assert ("ONNX Runtime/best float32 schedule: median 1.25, smallest 1.25 (lstm/64/1/10, P); "
                "0 of 1 shape(s) with T >= 10 below 1.25x.") in text, text
        assert "ONNX Runtime 1.30.0 per-call floor (a session adding 1 to 64 floats, 2 intra-op thread(s)): 16.0 µs." in text, text
        ort_file.write_text("")
        text = _main_output(["--cells", "lstm", "--hidden", "64", "--layers", "1", "--lengths", "10",
                             "--go-output", str(go_file), "--no-torch", "--ort-output", str(ort_file)])
        assert "ONNX Runtime was unavailable" in text and "| ORT ns/step |" in text, text


def test_main_rejects_output_without_results():
    with tempfile.TemporaryDirectory() as d:
        empty = Path(d, "go.txt")
        empty.write_text("PASS\nok  \trnnserve/schedule\t0.01s\n")
        try:
            bench_compare.main(["--go-output", str(empty), "--no-torch"], out=io.StringIO())
        except SystemExit as e:
            assert "no BenchmarkTableI results" in str(e)
        else:
            raise AssertionError("main accepted output without results")


def test_settle_rule():
    agree, settled = bench_rounds.agree, bench_rounds.settled
    # |a-b| / min(a,b): 10% of the smaller one, the bound included.
    assert agree(100, 110, 10) and agree(110, 100, 10) and not agree(100, 110.5, 10)
    assert settled([100, 109], 10) and not settled([100, 111], 10)
    # Any two rounds: the first and the third here.
    assert settled([100, 150, 105], 10) and not settled([100, 150, 300], 10)
    # A single round never settles; nor does none.
    assert not settled([100], 10) and not settled([], 10)
    assert bench_rounds.unsettled({"a": [100, 105], "b": [100, 200], "c": [], "d": [7]}, 10) == ["b", "d"]


def test_rerun_runs_only_unsettled_items():
    values = {"x": [100, 200, 105, 300], "y": [100, 200, 400, 800, 1600, 3200], "z": [100, 101, 500]}
    calls = []
    counts = bench_rounds.rerun(["x", "y", "z"], 2, 5, 10, lambda subset, r: calls.append((r, list(subset))),
                                lambda i: {"ns": values[i][:len([c for c in calls if i in c[1]])]})
    assert calls == [(1, ["x", "y", "z"]), (2, ["x", "y", "z"]), (3, ["x", "y"]), (4, ["y"]), (5, ["y"])], calls
    assert counts == {"x": 3, "y": 5, "z": 2}, counts
    # --agree 0: the first rounds only.
    calls.clear()
    assert bench_rounds.rerun(["x", "y"], 2, 5, 0, lambda subset, r: calls.append(r),
                              lambda i: {"ns": [1, 2]}) == {"x": 2, "y": 2} and calls == [1, 2]


def test_round_figures():
    go, _ = bench_compare.parse_go_output(GO_OUTPUT_2)
    torch = bench_compare.parse_torch_output(TORCH_OUTPUT)
    ort, _ = bench_compare.parse_ort_output(ORT_OUTPUT)
    shape = ("lstm", 64, 1, 10)
    figures = bench_compare.round_figures((go, torch, ort), shape, {"A", "A+", "P", "Pbf16"})
    assert figures == {"our best float32": 4000, "our best with bf16 allowed": 3000, "PyTorch's": 24000,
                       "ONNX Runtime's": 5000}, figures
    # A round without one of the shape's schedules says nothing of our best.
    del go[shape + ("P",)]
    assert bench_compare.round_figures((go, {}, {}), shape, {"A", "A+", "P", "Pbf16"}) == {}
    # Without Pbf16 there is no bf16 figure.
    assert bench_compare.round_figures((go, {}, {}), shape, {"A", "A+"}) == {"our best float32": 7000}


def test_split_rounds_of_captured_output():
    # The k-th result of a benchmark is round k: the three A+ lines are
    # rounds 1, 2 and 3 of lstm/64/1/10; the other schedules ran once.
    parts = bench_compare.split_rounds(GO_OUTPUT_2)
    assert len(parts) == 3, parts
    rounds = [bench_compare.parse_round(p, "", "") for p in parts]
    assert [r[0][("lstm", 64, 1, 10, "A+")]["ns/step"] for r in rounds] == [6000, 8000, 7000]
    assert "goos: linux" in parts[0] and "BenchmarkTableIP" not in parts[1] + parts[2]
    count, series = bench_compare.shape_rounds(rounds, ("lstm", 64, 1, 10))
    # Rounds 2 and 3 lack A and P: only round 1 gives our best.
    assert count == 3 and series == {"our best float32": [4000], "our best with bf16 allowed": [3000]}, series
    assert bench_compare.shape_rounds(rounds, ("gru", 64, 1, 1)) == (0, {})
    torch_rounds = bench_compare.split_rounds(TORCH_OUTPUT * 2 + "bench_torch: done\n")
    assert len(torch_rounds) == 2 and torch_rounds[0] == TORCH_OUTPUT + "bench_torch: done\n", torch_rounds
    # ONNX Runtime's floor lines are rounds too, apart from the shapes.
    assert len(bench_compare.split_rounds(ORT_OUTPUT)) == 3


def test_subset_selection():
    full = [(c, h, 1, t) for c in ("lstm", "gru") for h in (64, 512) for t in (1, 100)]
    # The full product: the same pattern and lists as before.
    assert bench_compare.go_shapes_regex(full, ["A+", "P"]) == bench_compare.go_bench_regex(
        ["lstm", "gru"], [64, 512], [1], [1, 100], ["A+", "P"])
    assert bench_compare.shape_flags(full) == ["--cells", "lstm,gru", "--hidden", "64,512", "--layers", "1",
                                               "--lengths", "1,100"]
    # A subset: one alternative per model, with its lengths.
    subset = [("lstm", 64, 1, 1), ("lstm", 64, 1, 100), ("gru", 512, 1, 100)]
    pattern = bench_compare.go_shapes_regex(subset, ["P"])
    assert pattern == ("^BenchmarkTableIP$/^cell=(lstm)$/^hidden=(64)$/^layers=(1)$/^T=(1|100)$/^sched=(P)$|"
                       "^BenchmarkTableIP$/^cell=(gru)$/^hidden=(512)$/^layers=(1)$/^T=(100)$/^sched=(P)$"), pattern
    assert bench_compare.shape_flags(subset) == ["--shapes", "lstm/64/1/1,lstm/64/1/100,gru/512/1/100"]
    # bench_torch.py reads those flags back.
    args = bench_torch.parse_args(["--shapes", "lstm/64/1/1,gru/512/1/100"])
    assert bench_torch.shapes(args) == [("lstm", 64, 1, 1), ("gru", 512, 1, 100)]
    args = bench_torch.parse_args(bench_compare.shape_flags(full))
    assert bench_torch.shapes(args) == full


SETTLES_AT_3 = ("lstm", 64, 1, 10)   # PyTorch 4000, 6000, 4200: rounds 1 and 3 agree
NEVER = ("gru", 64, 1, 10)           # our P halves every round


def fake_runners():
    """Fake run_go, run_torch and run_ort whose figures change by round, and the shapes each was given."""
    calls = {"go": [], "torch": [], "ort": []}

    def run_go(args, shapes):
        r = len(calls["go"])
        calls["go"].append(list(shapes))
        lines = ["goos: linux\n"]
        for c, h, l, t in shapes:
            p = 1000 / 2 ** r if (c, h, l, t) == NEVER else 1000
            for sched, ns in (("A+", 2000), ("P", p), ("Pbf16", 800)):
                top = "BenchmarkTableI" if sched == "A+" else "BenchmarkTableIP"
                lines.append(f"{top}/cell={c}/hidden={h}/layers={l}/T={t}/sched={sched}-2 \t 100\t 1 ns/op\t "
                             f"{ns} ns/step\t 5000 B/step\n")
        return "".join(lines)

    def json_runner(engine, values):
        def run(args, shapes):
            r = len(calls[engine])
            calls[engine].append(list(shapes))
            return "".join(
                '{"cell": "%s", "hidden": %d, "layers": %d, "T": %d, "ns_per_step": %s}\n'
                % (s + (values.get(s, [4000] * 9)[r],)) for s in shapes), None
        return run

    return calls, dict(run_go=run_go, run_torch=json_runner("torch", {SETTLES_AT_3: [4000, 6000, 4200]}),
                       run_ort=json_runner("ort", {}), export_onnx=lambda args: None)


def fake_clock():
    loads, times = iter([0.25, 0.75]), iter(["2026-11-26 02:40:00 UTC", "2026-11-26 02:59:00 UTC"])
    return dict(loadavg=lambda: next(loads), utc_now=lambda: next(times))


FOUR = ["--cells", "lstm,gru", "--hidden", "64", "--layers", "1", "--lengths", "1,10", "--threads", "2",
        "--schedules", "A+,P,Pbf16", "--onnx"]


def table_rows(text):
    return {tuple(c.strip() for c in line.strip("|").split("|"))[:4]: [c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| lstm") or line.startswith("| gru")}


def test_main_reruns_unsettled_shapes():
    calls, runners = fake_runners()
    with mock.patch.multiple(bench_compare, **runners), mock.patch.multiple(bench_rounds, **fake_clock()), \
            contextlib.redirect_stderr(io.StringIO()):
        text = _main_output(FOUR + ["--rounds", "2", "--max-rounds", "5"])
    everything = [("lstm", 64, 1, 1), SETTLES_AT_3, ("gru", 64, 1, 1), NEVER]
    # Two rounds of every shape; the one that settles at round 3 and the one
    # that never does are rerun, then the latter alone up to 5 rounds; each
    # engine is given the same shapes.
    want = [everything, everything, [SETTLES_AT_3, NEVER], [NEVER], [NEVER]]
    assert calls == {"go": want, "torch": want, "ort": want}, calls
    rows = table_rows(text)
    assert text.splitlines()[0].endswith("| P bf16 B/step | rounds |"), text
    assert [rows[tuple(map(str, s))][-1] for s in everything] == ["2", "3", "2", "5†"], rows
    # Medians of all of a shape's rounds: PyTorch 4000, 6000, 4200; our P
    # 1000, 500, 250, 125, 62.5.
    assert rows[tuple(map(str, SETTLES_AT_3))][8] == "4,200", rows
    assert rows[tuple(map(str, NEVER))][6] == "250", rows
    assert ("Each shape rerun until two rounds agree within 10% on every figure (our best float32, our best "
            "with bf16 allowed, PyTorch's, ONNX Runtime's ns/step), at most 5 rounds; figures are medians of all "
            "of its rounds.") in text, text
    assert "Did not settle within 5 rounds (†): gru/64/1/10.\n" in text, text
    assert ("Load average (1 min): 0.25 before the first round (2026-11-26 02:40:00 UTC), 0.75 after the last "
            "(2026-11-26 02:59:00 UTC).") in text, text
    assert "Threads: 2; Go -benchtime 200ms; 2 alternating round(s) of every shape first; goos linux." in text, text


def test_main_interleaves_shapes():
    # --interleave shape: in each round every engine runs on one shape, then
    # the next shape; the Go binary is built once; the table is the same as
    # with whole-round runs of the same figures.
    calls, runners = fake_runners()
    for engine in ("run_torch", "run_ort"):  # one figure whatever the call
        runners[engine] = lambda args, shapes: ("".join(
            '{"cell": "%s", "hidden": %d, "layers": %d, "T": %d, "ns_per_step": 4000}\n' % s for s in shapes), None)
    order = []
    for engine in ("run_go", "run_torch", "run_ort"):
        def logged(args, shapes, f=runners[engine], engine=engine):
            order.append((engine, tuple(shapes)))
            return f(args, shapes)
        runners[engine] = logged
    built = []
    runners["build_go"] = lambda args: built.append(args.interleave)
    with mock.patch.multiple(bench_compare, **runners), mock.patch.multiple(bench_rounds, **fake_clock()), \
            contextlib.redirect_stderr(io.StringIO()):
        text = _main_output(FOUR + ["--rounds", "2", "--agree", "0", "--interleave", "shape"])
    everything = [("lstm", 64, 1, 1), SETTLES_AT_3, ("gru", 64, 1, 1), NEVER]
    want = [(e, (s,)) for _ in range(2) for s in everything for e in ("run_go", "run_torch", "run_ort")]
    assert order == want, order
    assert built == ["shape"], built
    assert [row[-1] for row in table_rows(text).values()] == ["2"] * 4, text
    assert "each round shape by shape, every engine on a shape before the next" in text, text


def test_go_binary_flags():
    # A built test binary is run with go test's flags as -test.* flags, in
    # the package's directory.
    args = bench_compare.parse_args(["--threads", "2", "--schedules", "P", "--benchtime", "100ms"])
    args.go_binary = Path("/tmp/x/schedule.test")
    seen = {}

    class Proc:
        stdout = iter(["BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=10/sched=P-2 1 1 ns/op\n"])
        returncode = 0

        def wait(self):
            return 0

    def popen(cmd, cwd, **kw):
        seen.update(cmd=cmd, cwd=cwd)
        return Proc()

    with mock.patch.object(bench_compare.subprocess, "Popen", popen), contextlib.redirect_stderr(io.StringIO()):
        bench_compare.run_go(args, [("lstm", 64, 1, 10)])
    assert seen["cmd"][0] == "/tmp/x/schedule.test" and seen["cwd"] == bench_compare.REPO / "schedule", seen
    assert seen["cmd"][1:3] == ["-test.run", "^$"] and "-test.cpu" in seen["cmd"] and "-test.benchtime" in seen["cmd"], seen


def test_main_without_agreement():
    calls, runners = fake_runners()
    with mock.patch.multiple(bench_compare, **runners), mock.patch.multiple(bench_rounds, **fake_clock()), \
            contextlib.redirect_stderr(io.StringIO()):
        text = _main_output(FOUR + ["--rounds", "2", "--agree", "0"])
    assert len(calls["go"]) == 2 and len(calls["torch"]) == 2, calls
    assert [row[-1] for row in table_rows(text).values()] == ["2"] * 4, text
    assert "†" not in text and "Agreement of rounds not checked (--agree 0)." in text, text
    # --max-rounds defaults to --rounds + 4; it cannot be less than --rounds.
    assert bench_compare.parse_args(["--rounds", "3"]).max_rounds == 7
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            bench_compare.parse_args(["--rounds", "3", "--max-rounds", "2"])
        except SystemExit:
            pass
        else:
            raise AssertionError("--max-rounds below --rounds accepted")


def test_main_captured_rounds_are_not_rerun():
    # Two rounds in each captured output: Go agrees, PyTorch does not on
    # lstm/64/1/10 (24000 then 30000).
    torch2 = TORCH_OUTPUT + TORCH_OUTPUT.replace("24000.0", "30000.0")
    calls, runners = fake_runners()
    with tempfile.TemporaryDirectory() as d, mock.patch.multiple(bench_compare, **runners):
        go_file, torch_file = Path(d, "go.txt"), Path(d, "torch.jsonl")
        go_file.write_text(GO_OUTPUT_1 + GO_OUTPUT_1.replace("250000 ns/step", "260000 ns/step"))
        torch_file.write_text(torch2)
        args = ["--go-output", str(go_file), "--torch-output", str(torch_file), "--rounds", "3"]
        text = _main_output(["--cells", "gru", "--hidden", "128", "--layers", "3", "--lengths", "1"] + args)
        assert table_rows(text)[("gru", "128", "3", "1")][-1] == "2", text
        assert ("Captured outputs, not rerun: a shape settles when two of its rounds (its k-th result in each "
                "output is its round k) agree within 10% on every figure") in text, text
        assert "Did not settle" not in text and "Load average" not in text, text
        text = _main_output(["--cells", "lstm", "--hidden", "64", "--layers", "1", "--lengths", "10"] + args)
        # No Go result for this shape: PyTorch's rounds alone decide.
        assert table_rows(text)[("lstm", "64", "1", "10")][-1] == "2†", text
        go_file.write_text(GO_OUTPUT_2)
        text = _main_output(["--cells", "lstm", "--hidden", "64", "--layers", "1", "--lengths", "10"] + args)
        # Three rounds (A+ ran three times), PyTorch two that disagree.
        assert table_rows(text)[("lstm", "64", "1", "10")][-1] == "3†", text
        assert "Did not settle (†): lstm/64/1/10.\n" in text, text
    assert calls == {"go": [], "torch": [], "ort": []}, calls


# --int8: our P with float32, bf16 and int8 weights at two shapes, the
# peers' int8 (ONNX Runtime's at the LSTM shape only).
GO_OUTPUT_INT8 = """\
cpu: AMD EPYC 9R14
BenchmarkTableIP/cell=lstm/hidden=512/layers=1/T=100/sched=P      \t 100\t 1 ns/op\t 36000 ns/step\t 4202496 B/step
BenchmarkTableIP/cell=lstm/hidden=512/layers=1/T=100/sched=Pbf16  \t 100\t 1 ns/op\t 26000 ns/step\t 2105344 B/step
BenchmarkTableIP/cell=lstm/hidden=512/layers=1/T=100/sched=Pint8  \t 100\t 1 ns/op\t 12000 ns/step\t 1073152 B/step
BenchmarkTableIP/cell=gru/hidden=512/layers=1/T=100/sched=P       \t 100\t 1 ns/op\t 20000 ns/step\t 3151872 B/step
BenchmarkTableIP/cell=gru/hidden=512/layers=1/T=100/sched=Pbf16   \t 100\t 1 ns/op\t 15000 ns/step\t 1578496 B/step
BenchmarkTableIP/cell=gru/hidden=512/layers=1/T=100/sched=Pint8   \t 100\t 1 ns/op\t 12500 ns/step\t 804864 B/step
"""

TORCH_OUTPUT_INT8 = """\
{"cell": "lstm", "hidden": 512, "layers": 1, "T": 100, "threads": 1, "ns_per_step": 60000.0, "ns_per_op": 6000000.0, "precision": "int8", "engine": "onednn"}
{"cell": "gru", "hidden": 512, "layers": 1, "T": 100, "threads": 1, "ns_per_step": 10000.0, "ns_per_op": 1000000.0, "precision": "int8", "engine": "onednn"}
"""

ORT_OUTPUT_INT8 = """\
{"engine": "onnxruntime", "version": "1.30.0", "threads": 1, "floor_ns": 14000}
{"engine": "onnxruntime", "cell": "lstm", "hidden": 512, "layers": 1, "T": 100, "threads": 1, "ns_per_step": 24000.0, "ns_per_op": 2400000, "precision": "int8"}
"""


def test_int8_go_regex_and_parse():
    levels = bench_compare.go_bench_regex(["lstm"], [512], [1], [100], list(bench_compare.INT8_SCHEDULES)).split("/")
    assert levels[0] == "^BenchmarkTableIP$", levels[0]
    assert re.search(levels[5], "sched=Pint8") and not re.search(levels[5], "sched=A+")
    go, info = bench_compare.parse_go_output(GO_OUTPUT_INT8)
    assert go[("lstm", 512, 1, 100, "Pint8")]["ns/step"] == 12000, go
    assert info["cpu"] == "AMD EPYC 9R14", info
    assert bench_compare.parse_args(["--int8", "--schedules", "A"]).schedules == ["P", "Pbf16", "Pint8"]
    assert bench_compare.parse_args(["--schedules", "P,Pint8"]).schedules == ["P", "Pint8"]


def test_main_int8_table():
    with tempfile.TemporaryDirectory() as d:
        files = {name: Path(d, name) for name in ("go.txt", "torch.jsonl", "ort.jsonl")}
        for (name, path), text in zip(files.items(), (GO_OUTPUT_INT8, TORCH_OUTPUT_INT8, ORT_OUTPUT_INT8)):
            path.write_text(text)
        text = _main_output(["--int8", "--cells", "lstm,gru", "--hidden", "512", "--layers", "1", "--lengths", "100",
                             "--go-output", str(files["go.txt"]), "--torch-output", str(files["torch.jsonl"]),
                             "--ort-output", str(files["ort.jsonl"])])
        lines = text.splitlines()
        assert lines[0].startswith("| cell | hidden | layers | T | P f32 ns/step | P bf16 ns/step | P int8 ns/step | "
                                   "PyTorch int8 ns/step | ORT int8 ns/step | f32/int8 | bf16/int8 |"), lines[0]
        rows = table_rows(text)
        assert rows[("lstm", "512", "1", "100")][4:14] == ["36,000", "26,000", "12,000", "60,000", "24,000",
                                                          "3.00", "2.17", "5.00", "2.00", "1,073,152"], rows
        assert rows[("gru", "512", "1", "100")][8:13] == ["n/a", "1.60", "1.20", "0.80", "n/a"], rows
        for note in (
            "our float32 P / our int8: median 2.30, smallest 1.60 (gru/512/1/100); 1 of 2 shape(s) with hidden "
            ">= 512 and T = 100 below 1.8x: gru/512/1/100 1.60.",
            "our bf16 P / our int8: median 1.68, smallest 1.20 (gru/512/1/100); 1 of 2 shape(s) with hidden "
            ">= 512 and T = 100 below 1.3x: gru/512/1/100 1.20.",
            "PyTorch int8 / our int8: median 2.90, smallest 0.80 (gru/512/1/100); 1 of 2 shape(s) below 1x: "
            "gru/512/1/100 0.80.",
            "ONNX Runtime int8 / our int8: median 2.00, smallest 2.00 (lstm/512/1/100); 0 of 1 shape(s) below 1x.",
            "ONNX Runtime has no dynamically quantized GRU operator",
            "quantized engine onednn.",
            "ONNX Runtime 1.30.0 per-call floor",
            "(our float32 (P), our bf16 (P), our int8, PyTorch's int8, ONNX Runtime's int8 ns/step)",
        ):
            assert note in text, (note, text)


def test_clock_cpu():
    """--clock cpu reads cpu-ns/step and cpu_ns_per_step; wall ignores them."""
    go_text = GO_OUTPUT_INT8.replace(" 12000 ns/step", " 12000 ns/step\t 9000 cpu-ns/step")
    torch_text = TORCH_OUTPUT_INT8.replace('"ns_per_step": 60000.0,', '"ns_per_step": 60000.0, "cpu_ns_per_step": 45000.0,')
    ort_text = ORT_OUTPUT_INT8.replace('"ns_per_step": 24000.0,', '"ns_per_step": 24000.0, "cpu_ns_per_step": 18000.0,')
    go, _ = bench_compare.parse_go_output(go_text)
    assert go[("lstm", 512, 1, 100, "Pint8")]["ns/step"] == 12000, go
    go, _ = bench_compare.parse_go_output(go_text, "cpu")
    assert go[("lstm", 512, 1, 100, "Pint8")]["ns/step"] == 9000, go
    assert "ns/step" not in go[("lstm", 512, 1, 100, "P")], go  # no CPU figure: none, not the wall one
    assert bench_compare.parse_torch_output(torch_text, "cpu") == {("lstm", 512, 1, 100): 45000.0}
    assert bench_compare.parse_ort_output(ort_text, "cpu")[0] == {("lstm", 512, 1, 100): 18000.0}
    assert bench_compare.parse_ort_output(ort_text)[0] == {("lstm", 512, 1, 100): 24000.0}
    with tempfile.TemporaryDirectory() as d:
        files = {name: Path(d, name) for name in ("go.txt", "torch.jsonl", "ort.jsonl")}
        for (name, path), text in zip(files.items(), (go_text, torch_text, ort_text)):
            path.write_text(text)
        text = _main_output(["--int8", "--clock", "cpu", "--cells", "lstm", "--hidden", "512", "--layers", "1",
                             "--lengths", "100", "--go-output", str(files["go.txt"]), "--torch-output",
                             str(files["torch.jsonl"]), "--ort-output", str(files["ort.jsonl"])])
        row = table_rows(text)[("lstm", "512", "1", "100")]
        assert row[4:13] == ["n/a", "n/a", "9,000", "45,000", "18,000", "n/a", "n/a", "5.00", "2.00"], row
        assert "the process's CPU time (user and system) per step, not wall time" in text, text
        files["go.txt"].write_text(GO_OUTPUT_INT8)
        try:
            _main_output(["--int8", "--clock", "cpu", "--cells", "lstm", "--hidden", "512", "--layers", "1",
                          "--lengths", "100", "--go-output", str(files["go.txt"]), "--no-torch"])
        except SystemExit as err:
            assert "no cpu-ns/step figures" in str(err), err
        else:
            raise AssertionError("a Go output without CPU figures was accepted under --clock cpu")


@contextlib.contextmanager
def fake_commands(run):
    """bench_compare's subprocesses go to run, and every command is found."""
    with mock.patch.object(bench_compare.subprocess, "run", run), \
            mock.patch.object(bench_compare.shutil, "which", lambda name: "/usr/bin/" + name):
        yield


def test_int8_runs_pass_the_flags():
    seen = {}

    def fake_run(cmd, **kw):
        seen[Path(cmd[1]).name] = cmd
        return mock.Mock(returncode=0, stdout="", stderr="")

    args = bench_compare.parse_args(["--int8", "--onnx", "--cells", "lstm", "--hidden", "512", "--layers", "1",
                                     "--lengths", "100"])
    shapes = [("lstm", 512, 1, 100)]
    with fake_commands(fake_run):
        bench_compare.run_torch(args, shapes)
        bench_compare.export_onnx(args)
        bench_compare.run_ort(args, shapes)
    assert seen["bench_torch.py"][-1] == "--int8", seen
    assert seen["bench_onnx.py"][-1] == "--int8", seen
    assert seen["ort_bench.js"][-2:] == ["--precision", "int8"], seen
    args = bench_torch.parse_args(["--int8", "--shapes", "gru/512/1/100"])
    assert args.int8 and args.int8_check == 0.05


def test_int8_ort_falls_back_to_7_bit_weights():
    # ONNX Runtime's 8-bit graphs fail their check (its products saturate
    # without VNNI): the 7-bit ones are timed instead, and the note says so;
    # any other failure is ONNX Runtime's unavailability, as before.
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd[-1])
        if cmd[-1] == "int8":
            return mock.Mock(returncode=bench_compare.ORT_EXIT_MISMATCH, stdout="",
                             stderr="ort_bench: lstm_h512_l1_int8.onnx: ONNX Runtime's output differs\n")
        return mock.Mock(returncode=0, stdout='{"engine": "onnxruntime", "cell": "lstm"}\n', stderr="")

    args = bench_compare.parse_args(["--int8", "--onnx", "--cells", "lstm", "--hidden", "512", "--layers", "1",
                                     "--lengths", "100"])
    shapes = [("lstm", 512, 1, 100)]
    with fake_commands(fake_run):
        text, reason = bench_compare.run_ort(args, shapes)
        assert reason is None and "onnxruntime" in text, (text, reason)
        assert calls == ["int8", "int8w7"], calls
        assert args.ort_int8 == "int8w7" and "differs" in args.ort_int8_failed, vars(args)
        calls.clear()
        bench_compare.run_ort(args, shapes)  # later rounds go straight to the 7-bit graphs
        assert calls == ["int8w7"], calls

    def fail_other(cmd, **kw):
        return mock.Mock(returncode=1, stdout="", stderr="ort_bench: cannot load onnxruntime-node\n")

    args = bench_compare.parse_args(["--int8", "--onnx"])
    with fake_commands(fail_other):
        text, reason = bench_compare.run_ort(args, shapes)
    assert text is None and reason == "cannot load onnxruntime-node" and args.ort_int8 == "int8", (text, reason)


# Two threads: P on both cores, P1 on one; ONNX Runtime with 2 intra-op
# threads and with 1.
GO_OUTPUT_P1 = """\
BenchmarkTableI/cell=lstm/hidden=64/layers=1/T=100/sched=A+-2      	   20000	     80000 ns/op	       800 ns/step	      6656 B/step
BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=100/sched=P-2      	   20000	     90000 ns/op	       900 ns/step	      6656 B/step
BenchmarkTableIP/cell=lstm/hidden=64/layers=1/T=100/sched=P1-2     	   20000	     56000 ns/op	       560 ns/step	      6656 B/step
BenchmarkTableI/cell=lstm/hidden=1024/layers=1/T=100/sched=A+-2    	      10	 300000000 ns/op	    300000 ns/step	  33554432 B/step
BenchmarkTableIP/cell=lstm/hidden=1024/layers=1/T=100/sched=P-2    	      10	  95000000 ns/op	     95000 ns/step	  33554432 B/step
BenchmarkTableIP/cell=lstm/hidden=1024/layers=1/T=100/sched=P1-2   	      10	 190000000 ns/op	    190000 ns/step	  33554432 B/step
"""

ORT_OUTPUT_1_AND_2 = """\
{"engine": "onnxruntime", "version": "1.30.0", "threads": 2, "floor_ns": 6400}
{"engine": "onnxruntime", "cell": "lstm", "hidden": 64, "layers": 1, "T": 100, "threads": 2, "ns_per_step": 1000.0}
{"engine": "onnxruntime", "cell": "lstm", "hidden": 1024, "layers": 1, "T": 100, "threads": 2, "ns_per_step": 117000.0}
{"engine": "onnxruntime", "version": "1.30.0", "threads": 1, "floor_ns": 5800}
{"engine": "onnxruntime", "cell": "lstm", "hidden": 64, "layers": 1, "T": 100, "threads": 1, "ns_per_step": 960.0}
{"engine": "onnxruntime", "cell": "lstm", "hidden": 1024, "layers": 1, "T": 100, "threads": 1, "ns_per_step": 226000.0}
"""


def test_fewer_cores():
    # Above one thread P also runs on one worker, unless asked for already.
    args = bench_compare.parse_args(["--threads", "2", "--schedules", "A+,P"])
    assert args.schedules == ["A+", "P", "P1"], args.schedules
    assert "P1" in bench_compare.go_bench_regex(["lstm"], [64], [1], [100], args.schedules)
    assert bench_compare.parse_args(["--threads", "1", "--schedules", "A+,P"]).schedules == ["A+", "P"]
    assert bench_compare.parse_args(["--threads", "2", "--schedules", "A+"]).schedules == ["A+"]
    assert bench_compare.ort_thread_counts(args) == [2, 1]
    assert bench_compare.ort_thread_counts(bench_compare.parse_args(["--threads", "1"])) == [1]
    assert bench_compare.ort_thread_counts(bench_compare.parse_args(["--threads", "2", "--int8"])) == [2]
    go, _ = bench_compare.parse_go_output(GO_OUTPUT_P1)
    small, big = ("lstm", 64, 1, 100), ("lstm", 1024, 1, 100)
    assert bench_compare.best(go, small, bench_compare.F32_SCHEDULES) == ("P1", 560)
    assert bench_compare.best(go, big, bench_compare.F32_SCHEDULES) == ("P", 95000)
    # ONNX Runtime: the better of its thread counts per shape; the floor of the most threads.
    ort, floor = bench_compare.parse_ort_output(ORT_OUTPUT_1_AND_2)
    assert ort == {small: 960.0, big: 117000.0}, ort
    assert floor == {"version": "1.30.0", "threads": 2, "ns": 6400}, floor
    # Both thread counts of a shape are one round's results, not two rounds.
    assert len(bench_compare.split_rounds(ORT_OUTPUT_1_AND_2)) == 1
    table = bench_compare.render_table([small, big], go, None, [], ort)
    head = table.splitlines()[0]
    assert "| P1 ns/step |" in head and "| P1 B/step |" in head, head
    cols = [c.strip() for c in head.strip("|").split("|")]
    rows = {tuple(c.strip() for c in l.strip("|").split("|"))[:4]: [c.strip() for c in l.strip("|").split("|")]
            for l in table.splitlines()[2:] if l.startswith("| lstm")}
    row = dict(zip(cols, rows[("lstm", "64", "1", "100")]))
    assert row["best f32"] == "P1" and row["ORT/best f32"] == "1.71", row
    notes = bench_compare.fewer_cores_notes([small, big], go, [ORT_OUTPUT_1_AND_2], args)
    assert notes == ["Our best float32 includes P on one worker (P1): the best at 1 of 2 shape(s): lstm/64/1/100.",
                     "ONNX Runtime's figure is the better of 1 and 2 intra-op threads: 1 was better at 1 of 2 "
                     "shape(s)."], notes
    # A one-thread table has no P1 columns.
    go1, _ = bench_compare.parse_go_output(GO_OUTPUT_1)
    assert "P1" not in bench_compare.render_table([("gru", 128, 3, 1)], go1, None, []).splitlines()[0]


def test_fewer_cores_runs_both_thread_counts():
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return mock.Mock(returncode=0, stdout="", stderr="")

    args = bench_compare.parse_args(["--onnx", "--threads", "2", "--cells", "lstm", "--hidden", "64",
                                     "--layers", "1", "--lengths", "100"])
    with fake_commands(fake_run):
        bench_compare.run_ort(args, [("lstm", 64, 1, 100)])
    threads = [c[c.index("--threads") + 1] for c in seen]
    assert threads == ["2", "1"], seen


def test_load_average_fallback():
    assert bench_rounds.loadavg("/nonexistent/loadavg") is None
    with tempfile.TemporaryDirectory() as d:
        Path(d, "loadavg").write_text("0.42 0.30 0.20 1/234 5678\n")
        assert bench_rounds.loadavg(str(Path(d, "loadavg"))) == 0.42
    note = bench_rounds.load_note(("2026-11-26 02:40:00 UTC", None), ("2026-11-26 02:41:00 UTC", 1.5))
    assert note == ("Load average (1 min): n/a before the first round (2026-11-26 02:40:00 UTC), 1.50 after the "
                    "last (2026-11-26 02:41:00 UTC); /proc/loadavg could not be read."), note
    assert bench_rounds.utc_now().endswith(" UTC")


def main():
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_") and callable(fn)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
        else:
            print(f"ok   {name}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
