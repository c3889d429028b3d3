package inferencepb_test

import (
	"testing"

	"rnnserve/internal/protogen"
	pb "rnnserve/server/inferencepb"
)

// TestGeneratedCodeIsCurrent: a .proto edited without running
// scripts/gen-proto.sh fails here (see protogen.CheckCurrent).
func TestGeneratedCodeIsCurrent(t *testing.T) {
	protogen.CheckCurrent(t, ".", pb.File_grpc_service_proto, pb.File_model_config_proto)
}
