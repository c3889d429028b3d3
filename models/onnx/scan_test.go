package onnx

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	b "rnnserve/models/internal/onnxbuild"
	pb "rnnserve/models/onnx/onnxpb"
)

// repeating is a file of n copies of unit after head, made as it is read.
type repeating struct {
	head, unit []byte
	n          int64
}

func (r *repeating) size() int64 { return int64(len(r.head)) + r.n*int64(len(r.unit)) }

func (r *repeating) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) && off < r.size() {
		if off < int64(len(r.head)) {
			k := copy(p[n:], r.head[off:])
			n, off = n+k, off+int64(k)
			continue
		}
		i := (off - int64(len(r.head))) % int64(len(r.unit))
		k := copy(p[n:], r.unit[i:])
		n, off = n+k, off+int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TestMaxMessages: a graph of 2^20 + 1 outputs, each padded with a field
// onnxpb does not declare (decoding drops it, so it costs no memory and
// the memory bound does not stop the walk first), is refused for
// MaxMessages, from a walk of the file through its window.
func TestMaxMessages(t *testing.T) {
	unit := protowire.AppendTag(nil, 12, protowire.BytesType) // GraphProto.output
	pad := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), make([]byte, 24))
	unit = protowire.AppendBytes(unit, pad)
	n := int64(MaxMessages + 1)
	head := protowire.AppendTag(nil, 7, protowire.BytesType) // ModelProto.graph
	head = protowire.AppendVarint(head, uint64(n*int64(len(unit))))
	f := &repeating{head: head, unit: unit, n: n}
	_, _, c, err := walk(f, f.size(), elideMin)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxMessages") {
		t.Fatalf("%d outputs: %v, want ErrLimit naming MaxMessages", n, err)
	}
	if c.messages != MaxMessages+1 {
		t.Errorf("stopped at message %d, want %d", c.messages, MaxMessages+1)
	}
}

// TestShallow: the walk's shallow encoding decodes to the model without
// its large tensor data and without the fields onnxpb does not declare,
// and says where the data are; small data stay in it.
func TestShallow(t *testing.T) {
	big := make([]float32, 200) // 800 bytes: left in the file
	for i := range big {
		big[i] = float32(i)
	}
	g := &pb.GraphProto{Name: proto.String("g"), Initializer: []*pb.TensorProto{
		b.Floats("big", []int64{200}, big), b.Floats("small", []int64{3}, []float32{1, 2, 3}),
		{Name: proto.String("raw"), RawData: bytes.Repeat([]byte{7}, 1000)},
	}}
	data := b.Model(g, 17)
	// A field onnxpb does not declare (ModelProto's 12) and a group: both
	// dropped.
	data = protowire.AppendBytes(protowire.AppendTag(data, 12, protowire.BytesType), []byte("dropped"))
	data = protowire.AppendTag(protowire.AppendTag(data, 99, protowire.StartGroupType), 99, protowire.EndGroupType)
	shallow, payloads, _, err := walk(bytes.NewReader(data), int64(len(data)), elideMin)
	if err != nil {
		t.Fatal(err)
	}
	if len(shallow) > 300 {
		t.Errorf("shallow encoding of %d bytes for a model of %d", len(shallow), len(data))
	}
	var mp pb.ModelProto
	if err := proto.Unmarshal(shallow, &mp); err != nil {
		t.Fatal(err)
	}
	ts := newTensors(bytes.NewReader(data), int64(len(data)), payloads, nil)
	init := mp.GetGraph().GetInitializer()
	if len(init) != 3 || mp.GetGraph().GetName() != "g" || mp.GetOpsetImport()[0].GetVersion() != 17 {
		t.Fatalf("decoded %v", &mp)
	}
	for i, want := range []struct {
		left  bool
		field string
		n     int64
	}{{true, "float_data", 800}, {false, "", 0}, {true, "raw_data", 1000}} {
		p, left, err := ts.payload(init[i])
		if err != nil || left != want.left || left && (string(tensorMD.Fields().ByNumber(p.field).Name()) != want.field || p.n != want.n) {
			t.Errorf("tensor %s: %+v %v %v, want left %v in %s, %d bytes", init[i].GetName(), p, left, err, want.left, want.field, want.n)
		}
		if left != elided(init[i]) {
			t.Errorf("tensor %s: elided %v, payload %v", init[i].GetName(), elided(init[i]), left)
		}
	}
	if got := init[1].GetFloatData(); len(got) != 3 || got[2] != 3 {
		t.Errorf("small tensor decoded as %v", got)
	}
	if init[0].GetFloatData() != nil || init[2].GetRawData() != nil {
		t.Error("large data decoded")
	}
	s, err := ts.floats(init[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := values(t, s.whole(s.shape)); got[199] != 199 {
		t.Errorf("big[199] read as %v", got[199])
	}
}
