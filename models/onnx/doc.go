// Package onnx imports recurrent models exported by torch.onnx.export:
// an optional Gather embedding, one ONNX LSTM or GRU node per layer, an
// optional MatMul+Add (or Gemm) head and an optional Softmax or
// LogSoftmax, with the glue the exporter writes around them.
//
// The ModelProto is decoded by google.golang.org/protobuf into the
// generated types of models/onnx/onnxpb (the part of onnx.proto this
// package reads); this package walks the graph.
//
// # What is recognised
//
// From the one graph input that is not an initializer (int64 token ids
// or float features) the walk follows the data forward, keeping track of
// where the time, batch and feature axes are:
//
//   - Gather(table, ids) on axis 0: the embedding;
//   - Transpose with perm [1, 0, 2]: batch_first in or out;
//   - LSTM / GRU with layout 0 and default activations: one layer each,
//     forward or bidirectional; initial states absent or zeros (the
//     exporter's ConstantOfShape, Slice, Expand); no sequence lengths, no
//     peepholes, no clip, input_forget 0, GRU linear_before_reset 1 (the
//     only form PyTorch's GRU has);
//   - Squeeze of the direction axis, or Transpose [0, 2, 1, 3] and a
//     Reshape with constant shape [0, 0, -1], to join the directions;
//   - MatMul with a [in][out] initializer, then Add of a bias; or Gemm;
//   - Softmax / LogSoftmax over the last axis: the head's activation.
//
// Nodes that only compute shapes (Shape, Gather, Unsqueeze, Concat, Slice,
// Cast, ...), build zero initial states, or rearrange the layers' final
// states (Y_h, Y_c) into graph outputs are allowed around these. Any other
// node, or one of these used in another way, is refused with a
// *NodeError naming the node and its operator.
//
// ONNX's gate orders (LSTM i, o, f, c; GRU z, r, h) and concatenated
// biases (W_b then R_b) are converted to PyTorch's (LSTM i, f, g, o; GRU
// r, z, n; bias_ih, bias_hh). Weights may be FLOAT, FLOAT16, BFLOAT16 or
// DOUBLE, converted to float32.
//
// External data (tensors stored beside the model) are read through the
// caller's open function, and only for locations that are local paths
// (no absolute paths, no "..").
package onnx
