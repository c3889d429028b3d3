// The KServe v2 infer request and response of rnnserve's bytelm, for the
// ONNX Runtime peer (ort_serve.js): the same rules as kserve.py, which the
// PyTorch peer uses. A request carries one input, `tokens` (INT64 or INT32,
// shape [B, T], data flat or nested in row-major order), and optionally the
// outputs it wants, each with the parameters `last_step` (the last time
// step only) and `binary_data` (only false: the peers speak JSON). The
// response is {"model_name", "model_version", "id"?, "outputs": [{"name",
// "datatype", "shape", "data"}]} with data flat, as rnnserve writes it.
// The limits are rnnserve's defaults: 64 rows, 4096 steps, an 8 MiB body.
// A refusal is a BadRequest carrying its HTTP status: 400, 413 for a body
// over the limit, 404 for another model version (as rnnserve).
//
// No onnxruntime here, so its tests run anywhere:
//
//	node --test scripts/peers/
'use strict';

const MAX_BODY_BYTES = 8 << 20;
const MAX_ROWS = 64;
const MAX_STEPS = 4096;
const OUTPUTS = ['logits', 'probs', 'output', 'hidden', 'cell'];
const PER_STEP = new Set(['logits', 'probs', 'output']);
const DEFAULT_OUTPUT = 'logits';

// BadRequest is a request the service refuses; status is the HTTP status.
class BadRequest extends Error {
  constructor(message, status = 400) {
    super(message);
    this.name = 'BadRequest';
    this.status = status;
  }
}

function isObject(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkKeys(obj, allowed, what) {
  if (!isObject(obj)) throw new BadRequest(`${what}: want a JSON object`);
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw new BadRequest(`${what}: unknown field ${JSON.stringify(k)}`);
  }
}

function flatten(data, out) {
  for (const v of data) {
    if (Array.isArray(v)) flatten(v, out);
    else out.push(v);
  }
  return out;
}

// nestingOK: nested data must follow the shape exactly (or be flat).
function nestingOK(data, shape) {
  if (data.every((v) => !Array.isArray(v))) return true;
  const walk = (v, dims) => {
    if (dims.length === 0) return !Array.isArray(v);
    return Array.isArray(v) && v.length === dims[0] && v.every((x) => walk(x, dims.slice(1)));
  };
  return walk(data, shape);
}

function parseTokens(inp, vocab) {
  checkKeys(inp, ['name', 'datatype', 'shape', 'data', 'parameters'], 'input');
  if (inp.name !== 'tokens') throw new BadRequest(`unknown input ${JSON.stringify(inp.name)}: send "tokens"`);
  if (inp.datatype !== 'INT64' && inp.datatype !== 'INT32') {
    throw new BadRequest(`input "tokens": datatype ${JSON.stringify(inp.datatype)}, want INT64 or INT32`);
  }
  if (inp.parameters != null && !(isObject(inp.parameters) && Object.keys(inp.parameters).length === 0)) {
    throw new BadRequest('input "tokens": parameters are not supported (binary tensor data is not served by this peer)');
  }
  const shape = inp.shape;
  if (!Array.isArray(shape) || shape.length !== 2 || !shape.every(Number.isInteger)) {
    throw new BadRequest(`input "tokens": shape ${JSON.stringify(shape)}, want [B, T]`);
  }
  const [b, t] = shape;
  if (b < 1 || b > MAX_ROWS) throw new BadRequest(`input "tokens": ${b} rows, want 1..${MAX_ROWS}`);
  if (t < 1 || t > MAX_STEPS) throw new BadRequest(`input "tokens": ${t} steps, want 1..${MAX_STEPS}`);
  if (!Array.isArray(inp.data)) throw new BadRequest('input "tokens": want data as a JSON array');
  if (!nestingOK(inp.data, shape)) {
    throw new BadRequest(`input "tokens": nested data does not follow the shape ${JSON.stringify(shape)}`);
  }
  const flat = flatten(inp.data, []);
  if (flat.length !== b * t) throw new BadRequest(`input "tokens": ${flat.length} values for shape ${JSON.stringify(shape)}`);
  const ids = new BigInt64Array(flat.length);
  for (let i = 0; i < flat.length; i++) {
    const v = flat[i];
    if (!Number.isInteger(v)) {
      throw new BadRequest(`input "tokens": value ${JSON.stringify(v)} at index ${i} is not an ${inp.datatype} integer`);
    }
    if (v < 0 || v >= vocab) {
      throw new BadRequest(`input "tokens": id ${v} at [${Math.floor(i / t)}, ${i % t}] is outside the vocabulary [0, ${vocab})`);
    }
    ids[i] = BigInt(v);
  }
  return {ids, batch: b, steps: t};
}

function parseOutput(out) {
  checkKeys(out, ['name', 'parameters'], 'output');
  const name = out.name;
  if (!OUTPUTS.includes(name)) {
    throw new BadRequest(`unknown output ${JSON.stringify(name)} (this peer serves ${OUTPUTS.join(', ')})`);
  }
  const params = out.parameters ?? {};
  checkKeys(params, ['last_step', 'binary_data'], `output ${JSON.stringify(name)} parameters`);
  const last = params.last_step ?? false;
  if (typeof last !== 'boolean') throw new BadRequest(`output ${JSON.stringify(name)}: last_step must be true or false`);
  if ((params.binary_data ?? false) !== false) {
    throw new BadRequest(`output ${JSON.stringify(name)}: binary_data must be false (this peer speaks JSON only)`);
  }
  return {name, last};
}

// parse checks one infer request body (a Buffer or string) for modelName
// and returns {ids (BigInt64Array, row-major), batch, steps, outputs: [{name, last}], id}.
function parse(body, modelName, vocab) {
  if (body.length > MAX_BODY_BYTES) throw new BadRequest(`body of ${body.length} bytes exceeds ${MAX_BODY_BYTES}`, 413);
  let req;
  try {
    req = JSON.parse(body);
  } catch (err) {
    throw new BadRequest(`malformed JSON: ${err.message}`);
  }
  checkKeys(req, ['id', 'model_name', 'model_version', 'inputs', 'outputs', 'parameters'], 'request');
  if (req.model_name !== undefined && req.model_name !== modelName) {
    throw new BadRequest(`model_name ${JSON.stringify(req.model_name)} disagrees with the URL's ${JSON.stringify(modelName)}`);
  }
  if (req.model_version !== undefined && req.model_version !== '1') {
    throw new BadRequest(`model_version ${JSON.stringify(req.model_version)}: only version "1" is served`, 404);
  }
  const params = req.parameters ?? {};
  checkKeys(params, ['binary_data_output'], 'request parameters');
  if ((params.binary_data_output ?? false) !== false) throw new BadRequest('binary_data_output must be false (this peer speaks JSON only)');
  if (req.id !== undefined && req.id !== null && typeof req.id !== 'string') throw new BadRequest('id must be a string');
  if (!Array.isArray(req.inputs) || req.inputs.length === 0) throw new BadRequest('no input: send "tokens"');
  if (req.inputs.length !== 1) throw new BadRequest(`${req.inputs.length} inputs: send "tokens" only`);
  const tokens = parseTokens(req.inputs[0], vocab);
  let outputs;
  if (req.outputs === undefined || req.outputs === null || (Array.isArray(req.outputs) && req.outputs.length === 0)) {
    outputs = [{name: DEFAULT_OUTPUT, last: false}];
  } else if (!Array.isArray(req.outputs)) {
    throw new BadRequest('outputs: want a JSON array');
  } else {
    outputs = req.outputs.map(parseOutput);
    const seen = new Set();
    for (const o of outputs) {
      if (seen.has(o.name)) throw new BadRequest(`output ${JSON.stringify(o.name)} asked for twice`);
      seen.add(o.name);
    }
  }
  return {...tokens, outputs, id: req.id ?? null};
}

// outputShape is the shape rnnserve gives an output for batch rows of steps.
function outputShape(name, last, batch, steps, dims) {
  const t = last ? 1 : steps;
  switch (name) {
    case 'logits': case 'probs': return [batch, t, dims.vocab];
    case 'output': return [batch, t, dims.hidden];
    case 'hidden': case 'cell': return [batch, dims.layers, dims.hidden];
    default: throw new Error(`outputShape: unknown output ${name}`);
  }
}

// lastStep copies the last step of each row of a [B, T, W] array.
function lastStep(data, batch, steps, width) {
  const out = new Float32Array(batch * width);
  for (let r = 0; r < batch; r++) {
    out.set(data.subarray(((r + 1) * steps - 1) * width, (r + 1) * steps * width), r * width);
  }
  return out;
}

// response is the response body: outputs is a list of {name, shape, data
// (a Float32Array)}.
function response(modelName, id, outputs) {
  const body = {model_name: modelName, model_version: '1'};
  if (id !== null) body.id = id;
  body.outputs = outputs.map(({name, shape, data}) => {
    if (data.length !== shape.reduce((a, b) => a * b, 1)) throw new Error(`${name}: ${data.length} values for shape ${shape}`);
    return {name, datatype: 'FP32', shape, data: Array.from(data)};
  });
  return JSON.stringify(body);
}

function error(message) {
  return JSON.stringify({error: message});
}

module.exports = {BadRequest, MAX_BODY_BYTES, OUTPUTS, PER_STEP, parse, outputShape, lastStep, response, error};
