// Package onnxpb is the generated Go code of the part of the ONNX model
// format rnnserve reads: onnx.proto beside it declares ONNX's messages
// and fields under their published names and numbers, only those that
// rnnserve reads, so a decoder skips the rest of a file without holding
// it and no message can nest inside itself. scripts/gen-proto.sh
// regenerates the code with protoc and the pinned protoc-gen-go; a test
// checks the code against onnx.proto, and onnx.proto against an upstream
// onnx.proto. models/onnx walks the decoded graph; this package has no
// logic of its own.
package onnxpb
