// Tests of kserve.js on the request cases kserve.py is tested on
// (testdata/requests.json), so both peers accept and refuse alike. Needs
// Node.js only (no onnxruntime):
//
//	node --test scripts/peers/
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const test = require('node:test');
const kserve = require('./kserve');

const CASES = JSON.parse(fs.readFileSync(path.join(__dirname, 'testdata', 'requests.json'), 'utf8'));

function caseBody(c) {
  if (c.body_bytes !== undefined) return Buffer.alloc(c.body_bytes, ' ');
  if (c.raw !== undefined) return Buffer.from(c.raw);
  return Buffer.from(JSON.stringify(c.body));
}

test('request cases: accepted with their shape and outputs, or refused with their status', () => {
  assert.ok(CASES.cases.length > 30);
  for (const c of CASES.cases) {
    let req;
    try {
      req = kserve.parse(caseBody(c), 'bytelm', CASES.vocab);
    } catch (err) {
      assert.ok(err instanceof kserve.BadRequest, `${c.name}: ${err}`);
      assert.equal(err.status, c.status, `${c.name}: ${err.message}`);
      continue;
    }
    assert.equal(c.status, 200, `${c.name}: accepted`);
    assert.equal(req.batch, c.batch, c.name);
    assert.equal(req.steps, c.steps, c.name);
    assert.deepEqual(req.outputs.map(({name, last}) => [name, last]), c.outputs, c.name);
    assert.deepEqual(Array.from(req.ids, Number), c.body.inputs[0].data.flat(Infinity), c.name);
    assert.equal(req.id, c.body.id ?? null, c.name);
  }
});

test('mutated requests are parsed or refused with BadRequest, nothing else', () => {
  const seeds = CASES.cases.filter((c) => c.status === 200).map(caseBody);
  let state = 16;
  const rand = (n) => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state % n;
  };
  const values = [null, true, 0, -1, 1.5, 1e300, '', 'x', [], {}, [[]], [1, [2]], {a: 1}];
  let refused = 0;
  let accepted = 0;
  for (let i = 0; i < 3000; i++) {
    let body = Buffer.from(seeds[rand(seeds.length)]);
    if (i % 2 === 0) {
      for (let k = 0; k <= rand(4); k++) body[rand(body.length)] = rand(256);
    } else {
      const obj = JSON.parse(body);
      const targets = [obj, obj.inputs[0], ...(Array.isArray(obj.outputs) ? obj.outputs : [])];
      const target = targets[rand(targets.length)];
      const keys = [...Object.keys(target), 'extra'];
      target[keys[rand(keys.length)]] = values[rand(values.length)];
      body = Buffer.from(JSON.stringify(obj));
    }
    let req;
    try {
      req = kserve.parse(body, 'bytelm', 256);
    } catch (err) {
      assert.ok(err instanceof kserve.BadRequest, `${body}: ${err.stack}`);
      refused++;
      continue;
    }
    accepted++;
    assert.ok(req.batch >= 1 && req.batch <= 64 && req.steps >= 1 && req.steps <= 4096);
    assert.equal(req.ids.length, req.batch * req.steps);
    assert.ok(req.ids.every((v) => v >= 0n && v < 256n));
  }
  assert.ok(refused > 1000 && accepted > 20, `${refused} refused, ${accepted} accepted`);
});

test('output shapes, last step and the response', () => {
  const dims = {hidden: 4, layers: 2, vocab: 3};
  assert.deepEqual(kserve.outputShape('logits', false, 2, 5, dims), [2, 5, 3]);
  assert.deepEqual(kserve.outputShape('probs', true, 2, 5, dims), [2, 1, 3]);
  assert.deepEqual(kserve.outputShape('output', true, 2, 5, dims), [2, 1, 4]);
  assert.deepEqual(kserve.outputShape('hidden', true, 2, 5, dims), [2, 2, 4]);
  // [B=2, T=3, W=2]: the last step of each row.
  const data = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  assert.deepEqual(Array.from(kserve.lastStep(data, 2, 3, 2)), [5, 6, 11, 12]);
  const body = JSON.parse(kserve.response('bytelm', 'r7', [{name: 'hidden', shape: [1, 2, 1], data: Float32Array.from([0.5, -0.25])}]));
  assert.deepEqual(body, {model_name: 'bytelm', model_version: '1', id: 'r7',
    outputs: [{name: 'hidden', datatype: 'FP32', shape: [1, 2, 1], data: [0.5, -0.25]}]});
  assert.equal(JSON.parse(kserve.response('bytelm', null, [])).id, undefined);
  assert.throws(() => kserve.response('bytelm', null, [{name: 'hidden', shape: [1, 2, 2], data: new Float32Array(1)}]));
});
