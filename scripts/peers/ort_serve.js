#!/usr/bin/env node
// An ONNX Runtime service of the bundled bytelm: rnnserve's peer in the
// load test. Node.js `http` and onnxruntime-node (ONNX Runtime's CPU build,
// the engine behind Triton's and KServe's ONNX backends), serving the model
// scripts/peers/export_onnx.py exported, with the same KServe v2 REST calls
// and JSON as rnnserve for this model (kserve.js):
//
//	POST /v2/models/bytelm/infer   tokens [B, T] in; logits, probs, output, hidden, cell out
//	GET  /v2/models/bytelm         metadata (no "rnn" section: loadgen shows no schedule)
//	GET  /v2/health/live, /v2/health/ready
//
// Sessions are created once, intraOpNumThreads = --threads, one inter-op
// thread, sequential execution, every graph optimisation; requests run one
// inference at a time (queued in arrival order), as a plain service does.
// ONNX Runtime's inference build runs every node of a graph whatever
// outputs are fetched, so a request that wants no head output (logits,
// probs) runs the graph without the head (bytelm_state.onnx), as rnnserve
// and the PyTorch peer skip it; the two sessions never run at once. Before
// it listens, both sessions' outputs for export_onnx.py's check batches
// must match PyTorch's within 1e-4.
//
// onnxruntime-node must be resolvable: install it outside the tracked tree
// (npm install --ignore-scripts onnxruntime-node in a scratch directory;
// the package carries the native library) and point NODE_PATH at its
// node_modules.
//
//	NODE_PATH=.scratch/ort/node_modules node scripts/peers/ort_serve.js --model /tmp/peers-onnx --threads 2 --port 18081
//
// Exit status: 2 on bad flags, 3 if onnxruntime-node cannot be loaded, 4 if
// ONNX Runtime disagrees with PyTorch.
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');
const kserve = require('./kserve');

const MODEL = 'bytelm';
const TOLERANCE = 1e-4;
const EXIT_FLAGS = 2;
const EXIT_NO_ORT = 3;
const EXIT_MISMATCH = 4;

function fail(code, msg) {
  process.stderr.write(`ort_serve: ${msg}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const o = {host: '127.0.0.1', port: 18081, model: '', threads: 1};
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, val] = [argv[i], argv[i + 1]];
    if (val === undefined) fail(EXIT_FLAGS, `${flag} needs a value`);
    switch (flag) {
      case '--host': o.host = val; break;
      case '--port': o.port = Number(val); break;
      case '--model': o.model = val; break;
      case '--threads': o.threads = Number(val); break;
      default: fail(EXIT_FLAGS, `unknown flag ${flag}`);
    }
  }
  if (!o.model) fail(EXIT_FLAGS, '--model DIR (export_onnx.py\'s output) is required');
  if (!Number.isInteger(o.threads) || o.threads < 1) fail(EXIT_FLAGS, '--threads must be a positive integer');
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) fail(EXIT_FLAGS, '--port must be 0..65535');
  return o;
}

// check runs export_onnx.py's check batches through session and returns
// the largest difference from PyTorch's outputs over the session's outputs.
async function check(ort, session, checks) {
  let worst = 0;
  for (const c of checks) {
    const tokens = new ort.Tensor('int64', BigInt64Array.from(c.tokens, BigInt), c.shape);
    const got = await session.run({tokens});
    for (const name of session.outputNames) {
      const [g, want] = [got[name], c.outputs[name]];
      if (!g || g.data.length !== want.data.length || g.dims.join() !== want.shape.join()) {
        fail(EXIT_MISMATCH, `output ${name}: shape ${g && g.dims} against PyTorch's ${want.shape}`);
      }
      for (let i = 0; i < want.data.length; i++) worst = Math.max(worst, Math.abs(g.data[i] - want.data[i]));
      if (!(worst <= TOLERANCE)) fail(EXIT_MISMATCH, `output ${name}: differs from PyTorch's by ${worst}`);
    }
  }
  return worst;
}

// serial runs async functions one at a time, in the order they were given.
function serial() {
  let tail = Promise.resolve();
  return (fn) => {
    const p = tail.then(fn);
    tail = p.catch(() => {});
    return p;
  };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  let ort;
  let version;
  try {
    ort = require('onnxruntime-node');
    version = require('onnxruntime-node/package.json').version;
  } catch (err) {
    fail(EXIT_NO_ORT, `cannot load onnxruntime-node (set NODE_PATH to the node_modules it is installed in): ${err.message}`);
  }
  const options = {intraOpNumThreads: o.threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all'};
  const session = await ort.InferenceSession.create(path.join(o.model, 'bytelm.onnx'), options);
  const state = await ort.InferenceSession.create(path.join(o.model, 'bytelm_state.onnx'), options);
  const {checks, vocab} = JSON.parse(fs.readFileSync(path.join(o.model, 'check.json'), 'utf8'));
  const worst = Math.max(await check(ort, session, checks), await check(ort, state, checks));
  const full = checks[0].outputs;
  const dims = {vocab: full.logits.shape[2], hidden: full.hidden.shape[2], layers: full.hidden.shape[1]};
  const meta = JSON.stringify({name: MODEL, versions: ['1'], platform: 'onnxruntime_onnx',
    inputs: [{name: 'tokens', datatype: 'INT64', shape: [-1, -1]}],
    outputs: kserve.OUTPUTS.map((name) => ({name, datatype: 'FP32', shape: kserve.outputShape(name, false, -1, -1, dims)}))});
  const exclusive = serial();

  async function infer(body) {
    const req = kserve.parse(body, MODEL, vocab);
    const tokens = new ort.Tensor('int64', req.ids, [req.batch, req.steps]);
    const fetch = [...new Set(req.outputs.map(({name}) => (name === 'probs' ? 'logits' : name)))];
    const graph = fetch.includes('logits') ? session : state;
    const got = await exclusive(() => graph.run({tokens}, fetch));
    const outputs = req.outputs.map(({name, last}) => {
      let data = got[name === 'probs' ? 'logits' : name].data;
      if (name === 'probs') data = data.map(Math.exp);
      const shape = kserve.outputShape(name, last, req.batch, req.steps, dims);
      if (last && kserve.PER_STEP.has(name)) data = kserve.lastStep(data, req.batch, req.steps, shape[2]);
      return {name, shape, data};
    });
    return kserve.response(MODEL, req.id, outputs);
  }

  function send(res, status, body) {
    res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body)});
    res.end(body);
  }

  const server = http.createServer((req, res) => {
    const url = req.url.split('?')[0];
    if (req.method === 'GET' && url === '/v2/health/live') return send(res, 200, '{"live":true}');
    if (req.method === 'GET' && url === '/v2/health/ready') return send(res, 200, '{"ready":true}');
    const m = /^\/v2\/models\/([^/]+)(\/infer)?$/.exec(url);
    if (!m) return send(res, 404, kserve.error(`no route ${req.method} ${url}`));
    if (m[1] !== MODEL) return send(res, 404, kserve.error(`unknown model ${JSON.stringify(m[1])}`));
    if (!m[2] && req.method === 'GET') return send(res, 200, meta);
    if (!m[2] || req.method !== 'POST') return send(res, 405, kserve.error(`${req.method} ${url} not allowed`));
    const chunks = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > kserve.MAX_BODY_BYTES) over = true;
      else chunks.push(chunk);
    });
    req.on('end', () => {
      if (over) return send(res, 413, kserve.error(`body exceeds ${kserve.MAX_BODY_BYTES} bytes`));
      infer(Buffer.concat(chunks)).then((body) => send(res, 200, body), (err) => {
        if (err instanceof kserve.BadRequest) send(res, err.status, kserve.error(`bad request: ${err.message}`));
        else send(res, 500, kserve.error(`inference failed: ${err.message}`));
      });
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(o.port, o.host, () => {
    process.stderr.write(`ort_serve: onnxruntime-node ${version}, ${o.threads} intra-op thread(s); ` +
      `outputs within ${worst.toExponential(2)} of PyTorch's; listening on ${o.host}:${server.address().port}\n`);
  });
}

main().catch((err) => fail(1, err.stack || String(err)));
