// Package inferencepb is the generated Go code of rnnserve's gRPC
// protocol: the KServe v2 inference service (package inference, service
// GRPCInferenceService, as Triton and KServe name them) and the part of
// Triton's model configuration it reports. The .proto files beside it are
// the source; scripts/gen-proto.sh regenerates the code with protoc and
// the pinned protoc-gen-go and protoc-gen-go-grpc, and a test compiles the
// .proto files in Go (protocompile) to check that the generated code is
// current. The server's gRPC front end (server/grpc.go) and cmd/loadgen
// use it; it has no logic of its own.
package inferencepb
