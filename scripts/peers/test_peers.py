#!/usr/bin/env python3
"""Tests for the serving peers' request handling and the load test's table.

Runs without torch, Node.js or a server:  python3 scripts/peers/test_peers.py
(kserve.js is tested on the same request cases by node --test scripts/peers/).
"""

import io
import json
import random
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402
import kserve  # noqa: E402
import serverstats  # noqa: E402
import summarize  # noqa: E402

CASES = json.loads((HERE / "testdata" / "requests.json").read_text())


def case_body(c):
    if "body_bytes" in c:
        return b" " * c["body_bytes"]
    if "raw" in c:
        return c["raw"].encode()
    return json.dumps(c["body"]).encode()


def test_request_cases():
    """Every shared case is accepted with the right shape and outputs, or refused with its status."""
    assert len(CASES["cases"]) > 30
    for c in CASES["cases"]:
        body = case_body(c)
        try:
            req = kserve.parse(body, "bytelm", CASES["vocab"])
        except kserve.BadRequest as err:
            assert err.status == c["status"], (c["name"], err.status, err)
            assert str(err), c["name"]
            continue
        assert c["status"] == 200, (c["name"], "accepted")
        assert (req.batch, req.steps) == (c["batch"], c["steps"]), c["name"]
        assert [list(o) for o in req.outputs] == c["outputs"], (c["name"], req.outputs)
        assert all(len(r) == req.steps for r in req.rows), c["name"]
        flat = [v for r in req.rows for v in r]
        data = c["body"]["inputs"][0]["data"]
        assert flat == kserve._flatten(data, []), c["name"]
        assert req.id == c["body"].get("id"), c["name"]


def test_mutated_requests_never_crash():
    """Random edits of valid requests are parsed or refused with BadRequest, nothing else."""
    rng = random.Random(16)
    seeds = [case_body(c) for c in CASES["cases"] if c["status"] == 200]
    values = [None, True, 0, -1, 1.5, 1e300, "", "x", [], {}, [[]], [1, [2]], {"a": 1}, 2 ** 64]
    refused = accepted = 0
    for i in range(3000):
        body = bytearray(rng.choice(seeds))
        if i % 2 == 0:
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        else:
            obj = json.loads(body)
            target = rng.choice([obj, obj["inputs"][0], obj.get("outputs") or obj])
            if isinstance(target, list):
                target = target[0] if target and isinstance(target[0], dict) else obj
            target[rng.choice(list(target) + ["extra"])] = rng.choice(values)
            body = json.dumps(obj).encode()
        try:
            req = kserve.parse(bytes(body), "bytelm", 256)
        except kserve.BadRequest:
            refused += 1
            continue
        accepted += 1
        assert 1 <= req.batch <= kserve.MAX_ROWS and 1 <= req.steps <= kserve.MAX_STEPS
        assert all(0 <= v < 256 for r in req.rows for v in r)
        assert all(n in kserve.OUTPUTS for n, _ in req.outputs)
    assert refused > 1000 and accepted > 20, (refused, accepted)


def test_response_and_shapes():
    dims = dict(hidden=4, layers=2, vocab=3)
    assert kserve.output_shape("logits", False, 2, 5, **dims) == [2, 5, 3]
    assert kserve.output_shape("probs", True, 2, 5, **dims) == [2, 1, 3]
    assert kserve.output_shape("output", True, 2, 5, **dims) == [2, 1, 4]
    assert kserve.output_shape("hidden", True, 2, 5, **dims) == [2, 2, 4]
    assert kserve.output_shape("cell", False, 1, 5, **dims) == [1, 2, 4]
    body = json.loads(kserve.response("bytelm", "r7", [("hidden", [1, 2, 1], [0.5, -0.25])]))
    assert body == {"model_name": "bytelm", "model_version": "1", "id": "r7",
                    "outputs": [{"name": "hidden", "datatype": "FP32", "shape": [1, 2, 1], "data": [0.5, -0.25]}]}, body
    assert "id" not in json.loads(kserve.response("bytelm", None, []))
    try:
        kserve.response("bytelm", None, [("hidden", [1, 2, 2], [0.5])])
    except AssertionError:
        pass
    else:
        raise AssertionError("a shape that disagrees with the data was written")


ROWS = """\
| setup | model | plan schedule | clients | requests/s | tokens/s | p50 µs | p90 µs | p99 µs | engine µs | floor µs | p50 - engine - floor µs | errors |
| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| rnnserve r1 | bytelm | P | 1 | 1000.0 | 32000 | 800 | 900 | 1000 | - | 100 | - | 0 |
| ONNX Runtime r1 | bytelm | - | 1 | 500.0 | 16000 | 700 | 900 | 4000 | - | 100 | - | 0 |
| PyTorch r1 | bytelm | - | 1 | 250.0 | 8000 | 2000 | 2100 | 3000 | - | 300 | - | 0 |
| rnnserve r1 | bytelm | P | 64 | 3000.0 | 96000 | 20000 | 25000 | 30000 | - | 100 | - | 0 |
| ONNX Runtime r1 | bytelm | - | 64 | 1000.0 | 32000 | 60000 | 61000 | 62000 | - | 100 | - | 2 |
| PyTorch r1 | bytelm | - | 64 | 500.0 | 16000 | 120000 | 130000 | 150000 | - | 300 | - | 0 |
| ONNX Runtime r2 | bytelm | - | 1 | 1000.0 | 32000 | 700 | 900 | 2000 | - | 100 | - | 0 |
| PyTorch r2 | bytelm | - | 1 | 250.0 | 8000 | 2000 | 2100 | 3000 | - | 300 | - | 0 |
| rnnserve r2 | bytelm | P | 1 | 1200.0 | 38400 | 800 | 900 | 1000 | - | 100 | - | 0 |
load average after: 1.00 1.00 1.00 1/100 1
"""


def test_summarize_rows_ratios_and_targets():
    runs = summarize.parse_rows(ROWS)
    assert len(runs) == 9
    assert {(r.server, r.round) for r in runs if r.clients == 64} == {("rnnserve", 1), ("ONNX Runtime", 1), ("PyTorch", 1)}
    # Paired: round 1 1000/500 = 2, round 2 1200/1000 = 1.2; median 1.6.
    assert abs(summarize.paired(runs, "rnnserve", "ONNX Runtime", 1, "rate") - 1.6) < 1e-12
    # p99 ORT over rnnserve: 4 and 2, median 3.
    assert summarize.paired(runs, "rnnserve", "ONNX Runtime", 1, "p99", invert=True) == 3
    assert summarize.paired(runs, "rnnserve", "PyTorch", 8, "rate") is None
    text = summarize.render(runs)
    lines = text.splitlines()
    assert lines[0].startswith("| clients | rnnserve req/s | ONNX Runtime req/s | PyTorch req/s | "
                               "rnnserve/ONNX Runtime req/s | rnnserve/PyTorch req/s |"), lines[0]
    assert lines[2] == ("| 1 | 1,100.0 | 750.0 | 250.0 | 1.60 | 4.40 | 800 | 700 | 2,000 | 1,000 | 3,000 | 3,000 | "
                        "3.00 | 3.00 | 2/2/2 | 0 |"), lines[2]
    assert lines[3] == ("| 64 | 3,000.0 | 1,000.0 | 500.0 | 3.00 | 6.00 | 20,000 | 60,000 | 120,000 | 30,000 | "
                        "62,000 | 150,000 | 2.07 | 5.00 | 1/1/1 | 2 |"), lines[3]
    assert "| rnnserve/ONNX Runtime req/s at 1 client >= 1 | 1.60 | yes |" in lines
    assert "| rnnserve/ONNX Runtime req/s at 64 clients >= 3 | 3.00 | yes |" in lines
    assert "| rnnserve/PyTorch req/s at 64 clients >= 10 | 6.00 | no |" in lines
    assert "| PyTorch/rnnserve p99 at 64 client(s) > 1 | 5.00 | yes |" in lines
    assert "| rnnserve 1-client max/min req/s over 2 runs <= 1.3 | 1.20 | yes |" in lines
    assert "| ONNX Runtime | 500.0, 1,000.0 | 2.00 |" in lines


CPU_ROWS = """\
| setup | model | plan schedule | clients | requests/s | tokens/s | p50 µs | p90 µs | p99 µs | engine µs | floor µs | p50 - engine - floor µs | errors | server CPU µs/request |
| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| rnnserve r1 | bytelm | P | 64 | 3000.0 | 96000 | 20000 | 25000 | 30000 | - | 100 | - | 0 | 300 |
| ONNX Runtime r1 | bytelm | - | 64 | 1000.0 | 32000 | 60000 | 61000 | 62000 | - | 100 | - | 0 | 1200 |
| rnnserve r2 | bytelm | P | 64 | 3000.0 | 96000 | 20000 | 25000 | 30000 | - | 100 | - | 0 | 500 |
| ONNX Runtime r2 | bytelm | - | 64 | 1000.0 | 32000 | 60000 | 61000 | 62000 | - | 100 | - | 0 | 1000 |
| rnnserve r3 | bytelm | P | 64 | 3000.0 | 96000 | 20000 | 25000 | 30000 | - | 100 | - | 0 | - |
| ONNX Runtime r3 | bytelm | - | 64 | 1000.0 | 32000 | 60000 | 61000 | 62000 | - | 100 | - | 0 | 900 |
"""


def test_summarize_cpu_per_request():
    """loadgen's 14th cell (-server-pid) gives each server's median CPU per
    request and the paired ratio; a run without it ("-") pairs with nothing;
    rows without it add no CPU columns."""
    runs = summarize.parse_rows(CPU_ROWS)
    assert [r.cpu for r in runs] == [300, 1200, 500, 1000, None, 900]
    # Rounds 1 and 2 pair: 1200/300 = 4 and 1000/500 = 2; round 3 has no rnnserve figure.
    assert summarize.paired(runs, "rnnserve", "ONNX Runtime", 64, "cpu", invert=True) == 3
    lines = summarize.render(runs).splitlines()
    assert lines[0].endswith("| runs | errors | rnnserve CPU µs/req | ONNX Runtime CPU µs/req | "
                             "ONNX Runtime/rnnserve CPU/req |"), lines[0]
    assert lines[2].endswith("| 3/3 | 0 | 400 | 1,000 | 3.00 |"), lines[2]
    assert "| ONNX Runtime/rnnserve CPU per request at 64 clients >= 3 | 3.00 | yes |" in lines
    assert any("over each run's measured window" in l for l in lines)
    plain = summarize.render(summarize.parse_rows(ROWS))
    assert "CPU" not in plain, plain


def test_summarize_loadgen_cpu():
    """loadgen's 15th cell is its own CPU per request: each server's median
    of it is a column of its own, and the ratios do not change."""
    rows = "\n".join(line + (" 80 |" if " r1 " in line else " 120 |" if " r2 " in line else "")
                      for line in CPU_ROWS.splitlines() if line.startswith("| rnnserve") or line.startswith("| ONNX"))
    runs = summarize.parse_rows(rows)
    assert [r.loadgen_cpu for r in runs] == [80, 80, 120, 120, None, None]
    assert [r.cpu for r in runs] == [300, 1200, 500, 1000, None, 900]
    lines = summarize.render(runs).splitlines()
    assert lines[0].endswith("| ONNX Runtime/rnnserve CPU/req | loadgen CPU µs/req, rnnserve | "
                             "loadgen CPU µs/req, ONNX Runtime |"), lines[0]
    assert lines[2].endswith("| 3/3 | 0 | 400 | 1,000 | 3.00 | 100 | 100 |"), lines[2]
    assert any("the load generator's own, in the same window" in l for l in lines)


def test_summarize_main():
    with tempfile.TemporaryDirectory() as d:
        rows = Path(d, "rows.md")
        rows.write_text(ROWS)
        out = io.StringIO()
        assert summarize.main([str(rows)], out=out) == 0
        assert "| target | this run | met |" in out.getvalue()
        rows.write_text(ROWS.replace("rnnserve", "other"))
        assert summarize.main([str(rows)], out=io.StringIO()) == 1
        rows.write_text(ROWS.replace("rnnserve r1", "rnnserve"))
        try:
            summarize.main([str(rows)], out=io.StringIO())
        except ValueError:
            pass
        else:
            raise AssertionError("a label without its round was accepted")


def test_compare_diff():
    want = {"id": "a", "outputs": [{"name": "hidden", "datatype": "FP32", "shape": [1, 2], "data": [0.5, -1.0]}]}
    same = json.loads(json.dumps(want))
    assert compare.diff(want, same) == 0
    near = json.loads(json.dumps(want))
    near["outputs"][0]["data"][1] = -1.00005
    assert abs(compare.diff(want, near) - 5e-5) < 1e-12
    for edit in (lambda g: g.update(id="b"), lambda g: g["outputs"][0].update(name="cell"),
                 lambda g: g["outputs"][0].update(shape=[2, 1]), lambda g: g["outputs"][0].update(datatype="FP64"),
                 lambda g: g["outputs"][0]["data"].pop(), lambda g: g["outputs"][0]["data"].__setitem__(0, "x"),
                 lambda g: g["outputs"].append(g["outputs"][0])):
        got = json.loads(json.dumps(want))
        edit(got)
        assert isinstance(compare.diff(want, got), str), got


def test_compare_requests_and_cases():
    reqs = compare.requests()
    assert reqs[0]["inputs"][0]["shape"] == [1, 32]
    assert reqs[0]["outputs"] == [{"name": "hidden", "parameters": {"binary_data": False}}]
    for r in reqs:
        kserve.parse(json.dumps(r).encode(), "bytelm", 256)  # every compared request is one the peers take
    cases = compare.case_bodies()
    assert len(cases) == len(CASES["cases"]) - 1
    differs = [name for name, _, want in cases if want["reference"] != want["peer"]]
    assert "unknown output" in differs and "loadgen's request" not in differs


def test_serverstats_row():
    text = """# HELP rnnserve_solo_plans_total x
# TYPE rnnserve_solo_plans_total counter
rnnserve_solo_plans_total{model="bytelm"} 10
rnnserve_solo_plans_total{model="bytelm2"} 99
rnnserve_wide_plans_total{model="bytelm"} 4
rnnserve_steps_total{model="bytelm"} 100
rnnserve_tokens_total{model="bytelm"} 1000
go_goroutines 12
"""
    m = serverstats.parse_metrics(text, "bytelm")
    assert m == {"rnnserve_solo_plans_total": 10, "rnnserve_wide_plans_total": 4, "rnnserve_steps_total": 100,
                 "rnnserve_tokens_total": 1000}, m
    assert serverstats.parse_metrics("", "bytelm")["rnnserve_steps_total"] == 0

    def snap(count, ns, metrics):
        stats = {p: {"count": count, "ns": ns} for p in serverstats.PHASES}
        stats["success"] = {"count": count, "ns": ns}
        return {"stats": stats, "metrics": metrics}

    before = snap(5, 1_000_000, dict.fromkeys(serverstats.COUNTERS, 0.0))
    # 40 requests of 8 tokens: 10 solo (80 tokens), the other 240 tokens in 60 batched steps.
    after = snap(45, 5_000_000, {"rnnserve_solo_plans_total": 10, "rnnserve_wide_plans_total": 4,
                                 "rnnserve_steps_total": 60, "rnnserve_tokens_total": 320})
    assert serverstats.row(before, after, "r1", 8, 8) == "| r1 | 8 | 40 | 100 | 100 | 100 | 100 | 10 (25%) | 4 | 60 | 4.0 |"
    assert serverstats.row(before, before, "r1", 8, 8).startswith("| r1 | 8 | 0 |")
    assert serverstats.HEADER.splitlines()[0].count("|") == serverstats.row(before, after, "r", 1, 8).count("|")


def main():
    tests = [unittest.FunctionTestCase(fn) for name, fn in globals().items() if name.startswith("test_") and callable(fn)]
    result = unittest.TextTestRunner(verbosity=2).run(unittest.TestSuite(tests))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
