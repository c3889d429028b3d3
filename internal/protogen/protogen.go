// Package protogen checks that generated protobuf Go code is that of the
// .proto files committed beside it (scripts/gen-proto.sh writes it). The
// .proto files are compiled in Go with protocompile, so the check needs
// no protoc; the generated packages' tests call it.
package protogen

import (
	"context"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// CheckCurrent compiles the .proto files of the generated descriptors
// (their paths relative to dir) and fails t for every one whose compiled
// form differs from the descriptor compiled into the generated code:
// a .proto edited without running scripts/gen-proto.sh.
func CheckCurrent(t testing.TB, dir string, generated ...protoreflect.FileDescriptor) {
	t.Helper()
	var paths []string
	for _, fd := range generated {
		paths = append(paths, fd.Path())
	}
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{ImportPaths: []string{dir}}}
	files, err := c.Compile(context.Background(), paths...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range generated {
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
