"""The KServe v2 infer request and response of rnnserve's bytelm, for the peers.

The PyTorch peer (torch_serve.py) reads requests and writes responses with
this module, so it speaks what scripts/loadtest_peers.sh sends and what
rnnserve answers: a request carries one input, `tokens` (INT64 or INT32,
shape [B, T], data flat or nested in row-major order), and optionally the
outputs it wants, each with the parameters `last_step` (return the last
time step only) and `binary_data` (only false: the peers speak JSON). The
response is `{"model_name", "model_version", "id"?, "outputs": [{"name",
"datatype", "shape", "data"}]}` with data flat, as rnnserve writes it.

The limits are rnnserve's defaults (docs/api.md): at most 64 rows, 4096
steps, an 8 MiB body. Anything else is a BadRequest whose message says
what is wrong and whose status the service answers with (400; 413 for a
body over the limit, 404 for another model version, as rnnserve).

Pure Python (no torch), so its tests run anywhere:
    python3 scripts/peers/test_peers.py
"""

import json
import math

MAX_BODY_BYTES = 8 << 20
MAX_ROWS = 64
MAX_STEPS = 4096

# The outputs a peer serves, with the shape each takes for B rows and T
# steps (hidden size H, layers L, vocabulary V): as rnnserve's metadata
# lists them.
OUTPUTS = ("logits", "probs", "output", "hidden", "cell")
PER_STEP = ("logits", "probs", "output")  # the ones last_step shortens
DEFAULT_OUTPUT = "logits"


class BadRequest(ValueError):
    """A request the service refuses; status is the HTTP status."""

    status = 400


class TooLarge(BadRequest):
    """A body over MAX_BODY_BYTES."""

    status = 413


class UnknownVersion(BadRequest):
    """A model_version other than "1"."""

    status = 404


class Request:
    """A parsed infer request: tokens as B rows of T ids, and the outputs asked for."""

    def __init__(self, rows, outputs, request_id):
        self.rows = rows  # list of B lists of T ints
        self.outputs = outputs  # list of (name, last_step)
        self.id = request_id  # None when the request carried none

    @property
    def batch(self):
        return len(self.rows)

    @property
    def steps(self):
        return len(self.rows[0])


def _flatten(data, out):
    for v in data:
        if isinstance(v, list):
            _flatten(v, out)
        else:
            out.append(v)
    return out


def _nesting_ok(data, shape):
    """Nested data must follow the shape exactly (or be flat)."""
    if all(not isinstance(v, list) for v in data):
        return True

    def walk(v, dims):
        if not dims:
            return not isinstance(v, list)
        return isinstance(v, list) and len(v) == dims[0] and all(walk(x, dims[1:]) for x in v)

    return walk(data, shape)


def _check_keys(obj, allowed, what):
    if not isinstance(obj, dict):
        raise BadRequest(f"{what}: want a JSON object")
    for k in obj:
        if k not in allowed:
            raise BadRequest(f"{what}: unknown field {k!r}")


def _parse_tokens(inp, vocab):
    _check_keys(inp, ("name", "datatype", "shape", "data", "parameters"), "input")
    name = inp.get("name")
    if name != "tokens":
        raise BadRequest(f"unknown input {name!r}: send \"tokens\"")
    if inp.get("datatype") not in ("INT64", "INT32"):
        raise BadRequest(f"input \"tokens\": datatype {inp.get('datatype')!r}, want INT64 or INT32")
    if inp.get("parameters") not in (None, {}):
        raise BadRequest("input \"tokens\": parameters are not supported (binary tensor data is not served by this peer)")
    shape = inp.get("shape")
    if (not isinstance(shape, list) or len(shape) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
        raise BadRequest(f"input \"tokens\": shape {shape!r}, want [B, T]")
    b, t = shape
    if not 1 <= b <= MAX_ROWS:
        raise BadRequest(f"input \"tokens\": {b} rows, want 1..{MAX_ROWS}")
    if not 1 <= t <= MAX_STEPS:
        raise BadRequest(f"input \"tokens\": {t} steps, want 1..{MAX_STEPS}")
    data = inp.get("data")
    if not isinstance(data, list):
        raise BadRequest("input \"tokens\": want data as a JSON array")
    if not _nesting_ok(data, shape):
        raise BadRequest(f"input \"tokens\": nested data does not follow the shape {shape}")
    flat = _flatten(data, [])
    if len(flat) != b * t:
        raise BadRequest(f"input \"tokens\": {len(flat)} values for shape {shape}")
    limit = 1 << 63 if inp["datatype"] == "INT64" else 1 << 31
    for i, v in enumerate(flat):
        if not isinstance(v, int) or isinstance(v, bool) or not -limit <= v < limit:
            raise BadRequest(f"input \"tokens\": value {v!r} at index {i} is not an {inp['datatype']} integer")
        if not 0 <= v < vocab:
            raise BadRequest(f"input \"tokens\": id {v} at [{i // t}, {i % t}] is outside the vocabulary [0, {vocab})")
    return [flat[r * t:(r + 1) * t] for r in range(b)]


def _parse_output(out):
    _check_keys(out, ("name", "parameters"), "output")
    name = out.get("name")
    if name not in OUTPUTS:
        raise BadRequest(f"unknown output {name!r} (this peer serves {', '.join(OUTPUTS)})")
    params = out.get("parameters")
    params = {} if params is None else params
    _check_keys(params, ("last_step", "binary_data"), f"output {name!r} parameters")
    last = params.get("last_step", False)
    if not isinstance(last, bool):
        raise BadRequest(f"output {name!r}: last_step must be true or false")
    if params.get("binary_data", False) is not False:
        raise BadRequest(f"output {name!r}: binary_data must be false (this peer speaks JSON only)")
    return name, last


def parse(body, model_name, vocab):
    """Parse and check one infer request body (bytes) for model_name."""
    if len(body) > MAX_BODY_BYTES:
        raise TooLarge(f"body of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequest(f"malformed JSON: {err}") from None
    _check_keys(req, ("id", "model_name", "model_version", "inputs", "outputs", "parameters"), "request")
    if req.get("model_name", model_name) != model_name:
        raise BadRequest(f"model_name {req['model_name']!r} disagrees with the URL's {model_name!r}")
    if req.get("model_version", "1") != "1":
        raise UnknownVersion(f"model_version {req['model_version']!r}: only version \"1\" is served")
    params = req.get("parameters")
    params = {} if params is None else params
    _check_keys(params, ("binary_data_output",), "request parameters")
    if params.get("binary_data_output", False) is not False:
        raise BadRequest("binary_data_output must be false (this peer speaks JSON only)")
    rid = req.get("id")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("id must be a string")
    inputs = req.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("no input: send \"tokens\"")
    if len(inputs) != 1:
        raise BadRequest(f"{len(inputs)} inputs: send \"tokens\" only")
    rows = _parse_tokens(inputs[0], vocab)
    outs = req.get("outputs")
    if outs is None or outs == []:
        outputs = [(DEFAULT_OUTPUT, False)]
    elif not isinstance(outs, list):
        raise BadRequest("outputs: want a JSON array")
    else:
        outputs = [_parse_output(o) for o in outs]
        names = [n for n, _ in outputs]
        for n in names:
            if names.count(n) > 1:
                raise BadRequest(f"output {n!r} asked for twice")
    return Request(rows, outputs, rid)


def output_shape(name, last_step, batch, steps, hidden, layers, vocab):
    """The shape rnnserve gives output name for batch rows of steps."""
    t = 1 if last_step else steps
    return {
        "logits": [batch, t, vocab],
        "probs": [batch, t, vocab],
        "output": [batch, t, hidden],
        "hidden": [batch, layers, hidden],
        "cell": [batch, layers, hidden],
    }[name]


def response(model_name, request_id, outputs):
    """The response body (bytes): outputs is a list of (name, shape, flat list of floats)."""
    body = {"model_name": model_name, "model_version": "1"}
    if request_id is not None:
        body["id"] = request_id
    res = []
    for name, shape, data in outputs:
        if len(data) != math.prod(shape):
            raise AssertionError(f"{name}: {len(data)} values for shape {shape}")
        res.append({"name": name, "datatype": "FP32", "shape": shape, "data": data})
    body["outputs"] = res
    return json.dumps(body, separators=(",", ":")).encode()


def error(message):
    """An error body as rnnserve writes one."""
    return json.dumps({"error": message}).encode()
