#!/usr/bin/env bash
# Regenerates the Go code of rnnserve's gRPC protocol (server/inferencepb)
# and of the part of the ONNX model format it reads (models/onnx/onnxpb)
# from their .proto files. The generated code is committed, so building and
# testing need no protoc; run this after changing a .proto file.
#
# Needs protoc (Debian: apt-get install protobuf-compiler). The two Go
# plugins are installed at the pinned versions below into a cache
# directory (the Go module proxy serves them); protoc-gen-go's version
# follows the google.golang.org/protobuf version in go.mod.
set -euo pipefail

cd "$(dirname "$0")/.."
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOBUF_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
BIN="${XDG_CACHE_HOME:-$HOME/.cache}/rnnserve-protoc-plugins/protobuf-${PROTOBUF_VERSION}-grpc-${PROTOC_GEN_GO_GRPC_VERSION}"

command -v protoc >/dev/null || { echo "gen-proto: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
if [ ! -x "$BIN/protoc-gen-go" ] || [ ! -x "$BIN/protoc-gen-go-grpc" ]; then
	mkdir -p "$BIN"
	GOBIN="$BIN" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOBUF_VERSION}"
	GOBIN="$BIN" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
fi

DIR=server/inferencepb
protoc -I "$DIR" \
	--plugin=protoc-gen-go="$BIN/protoc-gen-go" --plugin=protoc-gen-go-grpc="$BIN/protoc-gen-go-grpc" \
	--go_out="$DIR" --go_opt=paths=source_relative \
	--go-grpc_out="$DIR" --go-grpc_opt=paths=source_relative \
	"$DIR"/grpc_service.proto "$DIR"/model_config.proto
ONNX=models/onnx/onnxpb
protoc -I "$ONNX" --plugin=protoc-gen-go="$BIN/protoc-gen-go" \
	--go_out="$ONNX" --go_opt=paths=source_relative "$ONNX"/onnx.proto
echo "gen-proto: regenerated $DIR and $ONNX with $(protoc --version), protoc-gen-go ${PROTOBUF_VERSION}, protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION}"
