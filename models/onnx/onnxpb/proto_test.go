package onnxpb_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protoreflect"

	"rnnserve/internal/protogen"
	pb "rnnserve/models/onnx/onnxpb"
)

// TestGeneratedCodeIsCurrent: onnx.proto edited without running
// scripts/gen-proto.sh fails here (see protogen.CheckCurrent).
func TestGeneratedCodeIsCurrent(t *testing.T) {
	protogen.CheckCurrent(t, ".", pb.File_onnx_proto)
}

// upstreamProtos are where an upstream onnx.proto is looked for: the
// file named by $ONNX_PROTO (e.g. onnx/onnx.proto of a release), then
// Debian's libonnx-dev and python3-onnx.
var upstreamProtos = []string{
	os.Getenv("ONNX_PROTO"),
	"/usr/include/onnx/onnx.proto",
	"/usr/lib/python3/dist-packages/onnx/onnx.proto",
}

// TestSubsetOfONNX checks every message, field and enum value that
// onnx.proto declares against an upstream onnx.proto: the same full
// name, number, type, label, packing and oneof, so that what rnnserve
// decodes is what ONNX writes. It runs where an upstream file is found
// (CI installs libonnx-dev; a developer may point $ONNX_PROTO at a
// release's onnx/onnx.proto).
func TestSubsetOfONNX(t *testing.T) {
	var path string
	for _, p := range upstreamProtos {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no upstream onnx.proto: apt-get install libonnx-dev, or set ONNX_PROTO")
		}
		t.Skip("no upstream onnx.proto to check against: apt-get install libonnx-dev, or set ONNX_PROTO")
	}
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{ImportPaths: []string{filepath.Dir(path)}}}
	files, err := c.Compile(context.Background(), filepath.Base(path))
	if err != nil {
		t.Fatalf("compile %s: %v", path, err)
	}
	up := files[0]
	t.Logf("checked against %s", path)
	if up.Package() != pb.File_onnx_proto.Package() {
		t.Fatalf("upstream package %s, ours %s", up.Package(), pb.File_onnx_proto.Package())
	}
	var checkMessages func(ours protoreflect.MessageDescriptors)
	checkMessages = func(ours protoreflect.MessageDescriptors) {
		for i := range ours.Len() {
			m := ours.Get(i)
			d, err := files.AsResolver().FindDescriptorByName(m.FullName())
			um, ok := d.(protoreflect.MessageDescriptor)
			if err != nil || !ok {
				t.Errorf("message %s is not in %s", m.FullName(), path)
				continue
			}
			for j := range m.Fields().Len() {
				f := m.Fields().Get(j)
				uf := um.Fields().ByName(f.Name())
				switch {
				case uf == nil:
					t.Errorf("field %s is not in %s", f.FullName(), path)
				case uf.Number() != f.Number() || uf.Kind() != f.Kind() || uf.Cardinality() != f.Cardinality() || uf.IsPacked() != f.IsPacked():
					t.Errorf("field %s: ours %d %v %v packed %v, upstream %d %v %v packed %v", f.FullName(),
						f.Number(), f.Cardinality(), f.Kind(), f.IsPacked(), uf.Number(), uf.Cardinality(), uf.Kind(), uf.IsPacked())
				case f.Message() != nil && f.Message().FullName() != uf.Message().FullName(),
					f.Enum() != nil && f.Enum().FullName() != uf.Enum().FullName():
					t.Errorf("field %s has another type upstream", f.FullName())
				case (f.ContainingOneof() == nil) != (uf.ContainingOneof() == nil) ||
					f.ContainingOneof() != nil && f.ContainingOneof().Name() != uf.ContainingOneof().Name():
					t.Errorf("field %s: oneof differs upstream", f.FullName())
				}
			}
			checkEnums(t, m.Enums(), files.AsResolver().FindDescriptorByName, path)
			checkMessages(m.Messages())
		}
	}
	checkMessages(pb.File_onnx_proto.Messages())
	checkEnums(t, pb.File_onnx_proto.Enums(), files.AsResolver().FindDescriptorByName, path)
}

func checkEnums(t *testing.T, ours protoreflect.EnumDescriptors, find func(protoreflect.FullName) (protoreflect.Descriptor, error), path string) {
	t.Helper()
	for i := range ours.Len() {
		e := ours.Get(i)
		d, err := find(e.FullName())
		ue, ok := d.(protoreflect.EnumDescriptor)
		if err != nil || !ok {
			t.Errorf("enum %s is not in %s", e.FullName(), path)
			continue
		}
		for j := range e.Values().Len() {
			v := e.Values().Get(j)
			uv := ue.Values().ByName(v.Name())
			switch {
			case uv == nil && e.FullName() == "onnx.TensorProto.DataType" && v.Number() > 16:
				// Types after BFLOAT16 came after the Debian release; they are only refused anyway.
			case uv == nil:
				t.Errorf("enum value %s is not in %s", v.FullName(), path)
			case uv.Number() != v.Number():
				t.Errorf("enum value %s is %d, upstream %d", v.FullName(), v.Number(), uv.Number())
			}
		}
	}
}
