#!/usr/bin/env python3
"""A PyTorch service of the bundled bytelm: rnnserve's peer in the load test.

FastAPI on uvicorn (Debian's python3-fastapi and python3-uvicorn), the
model an nn.Module (bytelm.py) with the safetensors weights loaded, run
eagerly under torch.inference_mode. It answers the same KServe v2 REST
calls as rnnserve for this model, with the same JSON (kserve.py):

    POST /v2/models/bytelm/infer   tokens [B, T] in; logits, probs, output, hidden, cell out
    GET  /v2/models/bytelm         metadata (no "rnn" section: loadgen shows no schedule)
    GET  /v2/health/live, /v2/health/ready

The handler is a coroutine that runs the model inline, so the service
runs one inference at a time, as a plain single-process service does; the
head is skipped when only state outputs are asked for. --cores N sets
torch's intra-op threads and OpenBLAS's and OpenMP's pools to N (before
torch is imported, as they are read then) and torch's inter-op threads to 1.

Usage:
    /usr/bin/python3 scripts/peers/torch_serve.py --port 18082 --cores 2 [--model-dir models/bundled/bytelm]
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kserve  # noqa: E402

MODEL = "bytelm"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18082)
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="torch, OpenBLAS and OpenMP threads")
    ap.add_argument("--model-dir", type=Path, default=None, help="bytelm's folder (default: the bundled one)")
    args = ap.parse_args(argv)
    if args.cores < 1:
        ap.error("--cores must be at least 1")
    return args


def pin_threads(cores):
    """Size every thread pool torch may use; must run before torch is imported."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(cores)


def build_app(model, torch):
    """The FastAPI app serving model (bytelm.BatchFirst) under MODEL."""
    from fastapi import FastAPI, Request
    from fastapi.responses import Response

    lm = model.lm
    hidden, layers, vocab = lm.rnn.hidden_size, lm.rnn.num_layers, lm.head.out_features
    ids = lm.embedding.num_embeddings
    app = FastAPI()
    meta = {
        "name": MODEL, "versions": ["1"], "platform": "pytorch",
        "inputs": [{"name": "tokens", "datatype": "INT64", "shape": [-1, -1]}],
        "outputs": [{"name": n, "datatype": "FP32", "shape": kserve.output_shape(n, False, -1, -1, hidden, layers, vocab)}
                    for n in kserve.OUTPUTS],
    }

    def json_response(body, status=200):
        return Response(content=body, status_code=status, media_type="application/json")

    @app.get("/v2/health/live")
    async def live():
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready():
        return {"ready": True}

    @app.get("/v2/models/{name}")
    async def metadata(name: str):
        if name != MODEL:
            return json_response(kserve.error(f"unknown model {name!r}"), 404)
        return meta

    @app.post("/v2/models/{name}/infer")
    async def infer(name: str, request: Request):
        if name != MODEL:
            return json_response(kserve.error(f"unknown model {name!r}"), 404)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > kserve.MAX_BODY_BYTES:
                return json_response(kserve.error(f"body exceeds {kserve.MAX_BODY_BYTES} bytes"), 413)
            chunks.append(chunk)
        try:
            req = kserve.parse(b"".join(chunks), MODEL, ids)
        except kserve.BadRequest as err:
            return json_response(kserve.error(f"bad request: {err}"), err.status)
        return json_response(run(model, torch, req, hidden, layers, vocab))

    return app


def run(model, torch, req, hidden, layers, vocab):
    """The response body for a parsed request."""
    names = {n for n, _ in req.outputs}
    with torch.inference_mode():
        x = torch.tensor(req.rows, dtype=torch.int64)
        if names & {"logits", "probs"}:
            logits, out, h, c = model(x)
            got = {"logits": logits, "output": out, "hidden": h, "cell": c}
            if "probs" in names:
                got["probs"] = logits.exp()
        else:
            out, h, c = model.state(x)
            got = {"output": out, "hidden": h, "cell": c}
        outputs = []
        for name, last in req.outputs:
            t = got[name]
            if last and name in kserve.PER_STEP:
                t = t[:, -1:, :]
            shape = kserve.output_shape(name, last, req.batch, req.steps, hidden, layers, vocab)
            outputs.append((name, shape, t.reshape(-1).tolist()))
    return kserve.response(MODEL, req.id, outputs)


def main(argv=None):
    args = parse_args(argv)
    pin_threads(args.cores)
    import torch
    import uvicorn

    import bytelm

    torch.set_num_threads(args.cores)
    torch.set_num_interop_threads(1)
    model = bytelm.load(args.model_dir or bytelm.DEFAULT_DIR)
    app = build_app(model, torch)
    print(f"torch_serve: torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s), "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; listening on {args.host}:{args.port}",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
