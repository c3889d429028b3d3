#!/usr/bin/env python3
"""Tests for bench_compare.py's parsing and table, on captured output.

Runs without Go benchmarks or torch:  python3 scripts/test_bench_compare.py
"""

import io
import re
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_compare  # noqa: E402

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
