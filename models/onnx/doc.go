// Package onnx imports recurrent models exported by torch.onnx.export:
// an optional Gather embedding, one ONNX LSTM, GRU or RNN node per layer,
// an optional linear head (MatMul and Add, or Gemm) on every step, on the
// last step or on the final states, and an optional Softmax or
// LogSoftmax, with the glue the exporter writes around them; and the
// graph's own input and output names, with what each output holds.
//
// The ModelProto is decoded by google.golang.org/protobuf into the
// generated types of models/onnx/onnxpb (the part of onnx.proto this
// package reads); this package reads the graph. The weights are not
// decoded with it: they stay in the file and are read once, straight into
// the caller's float32 buffers.
//
// # Bounded by construction
//
// A model file is hostile until read. Before decoding, a walk of the wire
// format reads the file front to back through a 64 KiB window, with a
// stack no deeper than onnxpb's messages nest (six), and writes a shallow
// copy of it: every field onnxpb does not declare dropped (subgraphs,
// functions, nested types: nothing can contain itself), and each tensor's
// data of more than 512 bytes in raw_data or packed float_data and
// double_data left in the file, the tensor marked with where they are.
// The walk counts the nodes and messages and the memory decoding the copy
// will take, and refuses a file over MaxNodes, MaxMessages or DecodeSlack
// + DecodeFactor bytes per byte of the file before reading past the
// limit. The graph is then read in one pass over its nodes in topological
// order: their own order when it is one (ONNX requires it), else one found
// by Kahn's algorithm in time linear in the nodes; a cycle, a value made
// twice and a value nothing makes are refused, so nothing can send the
// reader round a loop and no walk recurses. A tensor may hold at most
// MaxElements elements, and each use of a tensor claims its stored bytes:
// together at most twice the bytes the file and its external data files
// (MaxExternalBytes) store (twice: a tied embedding and head read one
// tensor), so shared or overlapping claims cannot multiply memory. Errors
// quote names and values from the file cut to a few dozen bytes.
//
// A Model's weights are views of the stored bytes in PyTorch's layout
// (gate blocks reordered, biases split, a MatMul head transposed through
// a 256 KiB tile), read by safetensors.Tensor.Float32sInto: F32 straight
// into the destination, other dtypes through a 64 KiB buffer.
//
// # What is recognised
//
// Each value gets a meaning from the values its node reads: a constant,
// a shape computation (Shape, Gather, Concat, Slice, ... on shapes and
// constants), zeros (ConstantOfShape of 0 and its slices: the exporter's
// initial states), the model's data, or recurrent layers' final states.
// On the data, from the one graph input that is not an initializer
// (int64 or int32 token ids, or float features):
//
//   - Gather(table, ids) on axis 0: the embedding;
//   - Transpose with perm [1, 0, 2]: batch_first in or out;
//   - LSTM / GRU / RNN with layout 0 and PyTorch's activations: one layer
//     each, forward or bidirectional; an RNN is nn.RNN with tanh, or relu
//     where its activations are Relu; initial states absent or zeros; no
//     sequence lengths, no peepholes, no clip, input_forget 0, GRU
//     linear_before_reset 1 (the only form PyTorch's GRU has);
//   - Squeeze of the direction axis, or Transpose [0, 2, 1, 3] and a
//     Reshape to [0, 0, -1], to join the directions; Reshape to [-1, W]
//     to flatten time and batch into rows;
//   - Gather of index -1 on the time axis: the last step (out[:, -1]);
//   - on final states (Y_h, Y_c): Concat on axis 0 (h_n), Gather of one
//     entry (h_n[-1]), Concat on axis 1 of single entries
//     (torch.cat((h_n[-2], h_n[-1]), dim=1)), Squeeze and Unsqueeze of
//     axis 0;
//   - MatMul with a [in][out] constant, then Add of a bias; or Gemm: the
//     head, on every step, the last step or the last layer's final
//     states, which sets Model.HeadInput;
//   - Softmax / LogSoftmax over the last axis: the head's activation.
//
// Any other node on the data, or one of these used in another way, is
// refused with a *NodeError naming the node and its operator.
//
// Each graph output is then the head's result, the last layer's output,
// some of h_n or c_n, or a value the engine does not compute ("none"),
// in the graph's layout (time-major or batch-first, rows); Model.Outputs
// lists them under the graph's names for the server to serve.
//
// ONNX's gate orders (LSTM i, o, f, c; GRU z, r, h) and concatenated
// biases (W_b then R_b) are converted to PyTorch's (LSTM i, f, g, o; GRU
// r, z, n; bias_ih, bias_hh). Weights may be FLOAT, FLOAT16, BFLOAT16 or
// DOUBLE, converted to float32.
//
// External data (tensors stored beside the model) are read through the
// caller's Opener, each file opened once, and only for locations that are
// local paths (no absolute paths, no "..").
package onnx
