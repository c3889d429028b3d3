package inferencepb_test

import (
	"context"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	pb "rnnserve/server/inferencepb"
)

// TestGeneratedCodeIsCurrent compiles the .proto files beside the
// generated code (with protocompile, a Go protobuf compiler, so no protoc
// is needed) and checks that the descriptors compiled into the generated
// Go code are the same: a .proto edited without running
// scripts/gen-proto.sh fails here.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{ImportPaths: []string{"."}}}
	files, err := c.Compile(context.Background(), "grpc_service.proto", "model_config.proto")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []protoreflect.FileDescriptor{pb.File_grpc_service_proto, pb.File_model_config_proto} {
		got := files.FindFileByPath(want.Path())
		if got == nil {
			t.Fatalf("%s not compiled", want.Path())
		}
		a, b := protodesc.ToFileDescriptorProto(got), protodesc.ToFileDescriptorProto(want)
		for _, fd := range []*descriptorpb.FileDescriptorProto{a, b} {
			fd.SourceCodeInfo = nil
		}
		if !proto.Equal(a, b) {
			t.Errorf("%s: the generated code is not that of the .proto file; run scripts/gen-proto.sh", want.Path())
		}
	}
}
