#!/usr/bin/env node
// Time ONNX Runtime (its CPU build, through onnxruntime-node) on the
// Table I models scripts/bench_onnx.py exported.
//
// One session per model, created once and reused for every length T, with
// intraOpNumThreads = --threads, one inter-op thread and sequential
// execution. Before timing, each model's output for the manifest's check
// input must match PyTorch's within 1e-4 (or the model's own "tolerance":
// the int8 models are checked against PyTorch on their dequantized
// weights, and ONNX Runtime rounds the activations too). For each shape,
// after a warm-up
// of at least --warmup seconds, the number of calls is calibrated so one
// repeat takes at least --min-time seconds; the result is the median time
// per call over --repeats repeats, each call awaiting session.run as a
// Node.js service would. The floor model (y = x + 1) is timed the same way:
// its time per call is the runtime's per-call floor.
//
// One JSON object per line goes to stdout:
//
//	{"engine": "onnxruntime", "version": "1.30.0", "threads": 1, "floor_ns": 14000}
//	{"engine": "onnxruntime", "cell": "lstm", "hidden": 64, "layers": 1, "T": 10,
//	 "threads": 1, "ns_per_step": 1234.5, "ns_per_op": 12345, "cpu_ns_per_step": 1200.1}
//
// cpu_ns_per_step is the process's CPU time (user and system) per step
// over the same repeats, median: on a shared machine, the time ONNX
// Runtime ran rather than waited (cmd/roofline times ours on the thread
// CPU clock likewise).
//
// onnxruntime-node must be resolvable: install it outside the repository
// (npm install --ignore-scripts onnxruntime-node in a scratch directory;
// the package carries the native library) and point NODE_PATH at that
// directory's node_modules.
//
// Usage:
//
//	NODE_PATH=/tmp/ort/node_modules node scripts/ort_bench.js --models /tmp/rnnserve-onnx \
//	    --threads 1 --lengths 1,10,100 [--cells lstm --hidden 64 --layers 1]
//	NODE_PATH=... node scripts/ort_bench.js --models /tmp/rnnserve-onnx --shapes lstm/64/1/10,gru/512/2/1
//
// --shapes (cell/hidden/layers/T, comma-separated) times just those shapes
// instead of the lengths --lengths of the models --cells, --hidden and
// --layers select. --precision int8 times the manifest's int8 models
// (scripts/bench_onnx.py --int8: DynamicQuantizeLSTM) instead of the
// float32 ones, and each result line says "precision": "int8"; --precision
// int8w7 the same graphs with 7-bit weights (bench_onnx.py).
//
// Exit status: 0 on success, 2 on bad flags, 3 if onnxruntime-node cannot
// be loaded, 4 if a model's output disagrees with PyTorch's.
'use strict';

const fs = require('fs');
const path = require('path');

const EXIT_FLAGS = 2;
const EXIT_NO_ORT = 3;
const EXIT_MISMATCH = 4;
const TOLERANCE = 1e-4;

function log(msg) {
  process.stderr.write(`ort_bench: ${msg}\n`);
}

function fail(code, msg) {
  log(msg);
  process.exit(code);
}

function intList(name, text) {
  const v = text.split(',').filter((s) => s.trim() !== '').map(Number);
  if (v.length === 0 || v.some((x) => !Number.isInteger(x) || x < 1)) {
    fail(EXIT_FLAGS, `--${name}: want positive integers, got ${JSON.stringify(text)}`);
  }
  return v;
}

function shapeList(text) {
  const shapes = text.split(',').filter((s) => s.trim() !== '').map((item) => {
    const [cell, ...dims] = item.trim().split('/');
    const [hidden, layers, T] = dims.map(Number);
    const bad = dims.length !== 3 || !['lstm', 'gru'].includes(cell) || dims.some((d) => !/^[0-9]+$/.test(d) || d < 1);
    if (bad) {
      fail(EXIT_FLAGS, `--shapes: want cell/hidden/layers/T, got ${JSON.stringify(item)}`);
    }
    return {cell, hidden, layers, T};
  });
  if (shapes.length === 0) fail(EXIT_FLAGS, `--shapes: no shapes in ${JSON.stringify(text)}`);
  return shapes;
}

function parseArgs(argv) {
  const o = {models: '', threads: 1, lengths: [1, 10, 50, 100], cells: null, hidden: null, layers: null,
    shapes: null, minTime: 0.2, repeats: 5, warmup: 0.2, precision: 'f32'};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const val = argv[i + 1];
    if (val === undefined) fail(EXIT_FLAGS, `${flag} needs a value`);
    i++;
    switch (flag) {
      case '--models': o.models = val; break;
      case '--threads': [o.threads] = intList('threads', val); break;
      case '--lengths': o.lengths = intList('lengths', val); break;
      case '--hidden': o.hidden = intList('hidden', val); break;
      case '--layers': o.layers = intList('layers', val); break;
      case '--repeats': [o.repeats] = intList('repeats', val); break;
      case '--cells': o.cells = val.split(',').map((s) => s.trim()).filter(Boolean); break;
      case '--shapes': o.shapes = shapeList(val); break;
      case '--min-time': o.minTime = Number(val); break;
      case '--warmup': o.warmup = Number(val); break;
      case '--precision':
        if (!['f32', 'int8', 'int8w7'].includes(val)) fail(EXIT_FLAGS, `--precision: want f32, int8 or int8w7, got ${JSON.stringify(val)}`);
        o.precision = val;
        break;
      default: fail(EXIT_FLAGS, `unknown flag ${flag}`);
    }
  }
  if (!o.models) fail(EXIT_FLAGS, '--models DIR is required');
  if (!(o.minTime > 0) || !(o.warmup >= 0)) fail(EXIT_FLAGS, '--min-time must be > 0 and --warmup >= 0');
  return o;
}

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// seconds runs fn calls times, awaiting each, and returns the elapsed seconds.
async function seconds(fn, calls) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) {
    await fn();
  }
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

// timePerCall warms fn up, calibrates, and returns the median seconds per
// call; cpu, if given, receives the median CPU seconds per call of the
// same repeats (the process's user and system time: on a shared machine,
// time this process ran rather than waited).
async function timePerCall(fn, o, cpu) {
  let calls = 1;
  let el = await seconds(fn, calls);
  for (let spent = el; spent < o.warmup; spent += el) {
    calls = Math.min(calls * 2, 1 << 20);
    el = await seconds(fn, calls);
  }
  calls = 1;
  el = await seconds(fn, calls);
  while (el < o.minTime) {
    calls = Math.max(calls + 1, Math.min(100 * calls, Math.ceil(calls * 1.2 * o.minTime / Math.max(el, 1e-9))));
    el = await seconds(fn, calls);
  }
  const samples = [];
  const cpuSamples = [];
  for (let r = 0; r < o.repeats; r++) {
    const c0 = process.cpuUsage();
    samples.push((await seconds(fn, calls)) / calls);
    const c = process.cpuUsage(c0);
    cpuSamples.push((c.user + c.system) / 1e6 / calls);
  }
  if (cpu) cpu.seconds = median(cpuSamples);
  return median(samples);
}

function sessionOptions(threads) {
  return {intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all'};
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  let ort;
  let version = 'unknown';
  try {
    ort = require('onnxruntime-node');
    version = require('onnxruntime-node/package.json').version;
  } catch (err) {
    fail(EXIT_NO_ORT, `cannot load onnxruntime-node (set NODE_PATH to the node_modules it is installed in): ${err.message}`);
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(o.models, 'manifest.json'), 'utf8'));

  const floorSession = await ort.InferenceSession.create(path.join(o.models, manifest.floor.file), sessionOptions(o.threads));
  const fx = new ort.Tensor('float32', new Float32Array(manifest.floor.width), [1, 1, manifest.floor.width]);
  const floor = await timePerCall(() => floorSession.run({x: fx}), o);
  console.log(JSON.stringify({engine: 'onnxruntime', version, threads: o.threads, floor_ns: Math.round(floor * 1e9)}));
  log(`onnxruntime-node ${version}, ${o.threads} intra-op thread(s); per-call floor ${(floor * 1e6).toFixed(1)} µs`);

  const want = (list, v) => list === null || list.includes(v);
  // lengths(m): the lengths to time model m at, none if it is not selected.
  const lengths = (m) => {
    if (o.shapes !== null) {
      return o.shapes.filter((s) => s.cell === m.cell && s.hidden === m.hidden && s.layers === m.layers).map((s) => s.T);
    }
    return want(o.cells, m.cell) && want(o.hidden, m.hidden) && want(o.layers, m.layers) ? o.lengths : [];
  };
  for (const m of manifest.models) {
    if ((m.precision || 'f32') !== o.precision) continue;
    const modelLengths = lengths(m);
    if (modelLengths.length === 0) continue;
    const session = await ort.InferenceSession.create(path.join(o.models, m.file), sessionOptions(o.threads));
    const c = m.check;
    const got = (await session.run({x: new ort.Tensor('float32', Float32Array.from(c.x), [c.steps, 1, m.hidden])})).y.data;
    let worst = 0;
    for (let i = 0; i < c.y.length; i++) worst = Math.max(worst, Math.abs(got[i] - c.y[i]));
    const tolerance = m.tolerance || TOLERANCE;
    if (got.length !== c.y.length || !(worst <= tolerance)) {
      fail(EXIT_MISMATCH, `${m.file}: ONNX Runtime's output differs from PyTorch's by ${worst} (allowed ${tolerance})`);
    }
    log(`${m.file}: output within ${worst.toPrecision(3)} of PyTorch's`);
    for (const T of modelLengths) {
      const data = new Float32Array(T * m.hidden);
      for (let i = 0; i < data.length; i++) data[i] = Math.sin(i) * 0.5;
      const x = new ort.Tensor('float32', data, [T, 1, m.hidden]);
      const cpu = {};
      const perCall = await timePerCall(() => session.run({x}), o, cpu);
      const rec = {engine: 'onnxruntime', cell: m.cell, hidden: m.hidden, layers: m.layers, T,
        threads: o.threads, ns_per_step: Math.round(perCall * 1e9 / T * 10) / 10, ns_per_op: Math.round(perCall * 1e9),
        cpu_ns_per_step: Math.round(cpu.seconds * 1e9 / T * 10) / 10};
      if (o.precision !== 'f32') rec.precision = o.precision;
      console.log(JSON.stringify(rec));
    }
    await session.release();
  }
  await floorSession.release();
}

main().catch((err) => fail(1, err.stack || String(err)));
