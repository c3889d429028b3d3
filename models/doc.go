// Package models describes recurrent models on disk and loads them: a
// spec (YAML, or JSON, which YAML reads too) that gives the shape, and a
// weights file as PyTorch users have it, or seeded random weights.
//
// # Entry points
//
//   - Open(path) / OpenFS(fsys, name): a model folder (its model.yaml,
//     or else its one weights file), a spec file, or a lone weights file.
//     A weights file alone is served by inferring the spec from it (Infer;
//     an ONNX graph gives its own). This is what a server's model
//     repository calls for each folder.
//   - FormatSpec(m): the spec of a loaded model as YAML, to print and
//     save as model.yaml (with a comment when it was inferred).
//   - Load(specPath) / LoadFS / Build(spec, weights) / Shape(spec): the
//     spec-first paths (Shape makes dry networks for traffic analysis).
//
// # Weights files
//
// The format is read from the content, not the file name: safetensors
// (models/safetensors), PyTorch checkpoints written by torch.save, zip or
// legacy (models/pytorch, never running code from the file), and ONNX
// exports (models/onnx). F32, F16, BF16 and F64 tensors load, converted
// to float32; Model.Source records the file, its format and dtypes.
//
// # Tensor names
//
// Tensors are named as the state_dict of the user's module names them.
// With the default prefixes (a module with attributes embedding, rnn,
// head):
//
//	embedding  nn.Embedding(vocab_size, input_size)        embedding.weight
//	rnn        nn.LSTM / nn.GRU (batch_first either way)
//	           rnn.weight_ih_l{k}[_reverse]  [G*H][In]
//	           rnn.weight_hh_l{k}[_reverse]  [G*H][Out]
//	           rnn.bias_ih_l{k}[_reverse]    [G*H]     (absent with bias: false)
//	           rnn.bias_hh_l{k}[_reverse]    [G*H]
//	           rnn.weight_hr_l{k}[_reverse]  [P][H]    (LSTM with proj_size P)
//	head       nn.Linear(dirs*Out, out_features)       head.weight, head.bias
//
// A spec's prefixes map renames the parts (prefixes: {embedding: emb,
// rnn: lstm, head: fc}); a stack of several RNN modules (spec key
// layers) has one rnn prefix per module, by default rnn.0, rnn.1, ...
// (an nn.ModuleList called rnn). Without prefixes, the loader finds the
// parts in the file by their names' PyTorch suffixes and their shapes
// (Infer), and says which spec key settles it where it cannot.
// batch_first needs no conversion: it changes how a module is called, not
// its weights.
//
// A spec without a weights file means random weights from a fixed seed,
// for benchmarks and traffic sweeps of models nobody has trained.
package models
