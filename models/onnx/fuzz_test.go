package onnx

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"rnnserve/internal/fuzzbound"
	b "rnnserve/models/internal/onnxbuild"
	pb "rnnserve/models/onnx/onnxpb"
)

// fuzzBound is what Read may take on one fuzz input: fuzzbound's default
// time (2 s of CPU time), and 32 MiB plus 16 bytes per input byte allocated; an input
// over either ends the worker and is recorded under testdata/fuzz.
var fuzzBound = fuzzbound.Limits{Bytes: 32 << 20, PerByte: 16}

// FuzzRead feeds Read arbitrary bytes under fuzzBound: it must return a
// model whose weights all read from the file, or an error matching one of
// the package's sentinels, never panic, and never ask for external data
// outside the folder. Seeds: every
// golden export, the tiny graph, and every hostile kind (onnxbuild) at a
// size small enough for a seed.
//
//	go test -run '^$' -fuzz FuzzRead -fuzztime 10m -parallel 1 ./models/onnx
func FuzzRead(f *testing.F) {
	goldens, _ := filepath.Glob("../testdata/golden/onnx_*")
	for _, g := range goldens {
		f.Add(golden(f, filepath.Base(g)))
	}
	f.Add(tiny(nil))
	for _, h := range []b.Hostile{b.IdentityCycle(), b.DanglingReverse(200), b.DataCycle(), b.ManyNodes(1000),
		b.ManyOutputs(1000), b.PackedVarints(1000), b.DeepGroups(1000), b.HugeDims(), b.SharedExternal(2, 4), b.LongName(1000)} {
		f.Add(h.Data)
	}
	f.Add(b.DanglingForward(200))
	fuzzbound.Bytes(f, fuzzBound, func(t *testing.T, data []byte) {
		m, err := Read(data, func(loc string) ([]byte, error) {
			if loc == "" || loc[0] == '/' || len(loc) >= 2 && loc[:2] == ".." {
				t.Fatalf("asked for %q", loc)
			}
			return make([]byte, 64), nil
		})
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrExternalData) && !errors.Is(err, ErrLimit) {
				t.Fatalf("error %v matches no sentinel", err)
			}
			if len(err.Error()) > 2000 {
				t.Fatalf("an error of %d bytes", len(err.Error()))
			}
			return
		}
		if len(m.Layers) == 0 {
			t.Fatal("a model without layers")
		}
		readWeights(t, m)
	})
}

// graphOps are the operators FuzzGraph writes: those the reader knows,
// and one it does not.
var graphOps = []string{"LSTM", "GRU", "RNN", "Gather", "Transpose", "Squeeze", "Unsqueeze", "Reshape", "Concat",
	"MatMul", "Gemm", "Add", "Softmax", "LogSoftmax", "Identity", "Dropout", "Cast", "Shape", "ConstantOfShape",
	"Slice", "Constant", "Relu"}

// FuzzGraph builds a graph from the input, node by node (an operator,
// inputs among the values made so far, outputs, attributes), so that the
// reader sees well-formed protobuf with arbitrary structure, which
// FuzzRead's byte mutations rarely reach. The graph reads float features
// or token ids, has a few weights of fitting shapes, and names some values
// as outputs. Read must not panic, and must refuse with a sentinel or
// return a model with layers whose weights all read.
//
//	go test -run '^$' -fuzz FuzzGraph -fuzztime 10m -parallel 1 ./models/onnx
func FuzzGraph(f *testing.F) {
	f.Add([]byte{0, 0, 3, 1, 2, 3, 1, 0})                                // one LSTM
	f.Add([]byte{1, 2, 3, 1, 2, 3, 0, 0, 1, 3, 10, 4, 1, 1, 0, 0, 5, 0}) // GRU, squeeze
	f.Add([]byte{18, 1, 4, 0, 1, 0, 2, 1, 3, 1, 2, 3, 9, 3, 2, 0, 11})
	fuzzbound.Bytes(f, fuzzBound, func(t *testing.T, data []byte) {
		model := buildGraph(data)
		// Its tensors are small: read once as Read reads them (decoded with
		// the graph), once with every tensor's data left in the file.
		for _, elide := range []int64{elideMin, 0} {
			m, err := readAt(bytes.NewReader(model), int64(len(model)), nil, elide)
			if err != nil {
				if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrExternalData) && !errors.Is(err, ErrLimit) {
					t.Fatalf("error %v matches no sentinel", err)
				}
				continue
			}
			if len(m.Layers) == 0 {
				t.Fatal("a model without layers")
			}
			readWeights(t, m)
		}
	})
}

// readWeights reads every weight of m, as binding it to a network does.
func readWeights(t *testing.T, m *Model) {
	for _, w := range weights(m) {
		v, err := w.Float32s()
		if err != nil {
			t.Fatalf("weight %s: %v", w.Name, err)
		}
		if len(v) != w.NumElements() {
			t.Fatalf("weight %s: %d values for shape %v", w.Name, len(v), w.Shape)
		}
	}
}

// buildGraph turns bytes into a graph (see FuzzGraph).
func buildGraph(data []byte) []byte {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		v := int(data[0])
		data = data[1:]
		return v
	}
	const H = 2
	elem := pb.TensorProto_FLOAT
	if next()%2 == 1 {
		elem = pb.TensorProto_INT64
	}
	g := &pb.GraphProto{Name: proto.String("fuzz"), Input: []*pb.ValueInfoProto{b.Value("x", elem)},
		Initializer: []*pb.TensorProto{
			b.Fill("W4", []int64{1, 4 * H, H}, 0.1, 0.01), b.Fill("R4", []int64{1, 4 * H, H}, 0.2, 0.01), b.Fill("B4", []int64{1, 8 * H}, 0, 0.01),
			b.Fill("W3", []int64{1, 3 * H, H}, 0.1, 0.01), b.Fill("R3", []int64{1, 3 * H, H}, 0.2, 0.01),
			b.Fill("W1", []int64{2, H, H}, 0.1, 0.01), b.Fill("R1", []int64{2, H, H}, 0.2, 0.01),
			b.Fill("emb", []int64{5, H}, 0, 0.1), b.Fill("fc", []int64{H, 3}, 0, 0.1), b.Fill("fcb", []int64{3}, 0, 1),
			b.Ints("axes0", 0), b.Ints("axes1", 1), b.Ints("join", 0, 0, -1), b.Ints("rows", -1, H), b.Scalar("last", -1),
		}}
	values := []string{"x", ""}
	for _, t := range g.Initializer {
		values = append(values, t.GetName())
	}
	for k := range next() % 12 {
		op := graphOps[next()%len(graphOps)]
		var ins []string
		for range next() % 5 {
			ins = append(ins, values[next()%len(values)])
		}
		var outs []string
		for j := range next() % 4 {
			outs = append(outs, fmt.Sprint("v", k, "_", j))
		}
		var attrs []*pb.AttributeProto
		for range next() % 3 {
			switch next() % 8 {
			case 0:
				attrs = append(attrs, b.Int("hidden_size", int64(next()%4)))
			case 1:
				attrs = append(attrs, b.Int("linear_before_reset", 1))
			case 2:
				attrs = append(attrs, b.String("direction", []string{"forward", "bidirectional", "reverse"}[next()%3]))
			case 3:
				attrs = append(attrs, b.Int("axis", int64(next()%5)-2))
			case 4:
				attrs = append(attrs, b.IntList("perm", [][]int64{{1, 0, 2}, {0, 2, 1, 3}}[next()%2]...))
			case 5:
				attrs = append(attrs, b.Int("transB", int64(next()%2)))
			case 6:
				attrs = append(attrs, b.Strings("activations", "Relu", "Relu"))
			case 7:
				attrs = append(attrs, b.Tensor("value", b.Ints("c", int64(next()))))
			}
		}
		g.Node = append(g.Node, b.Node("", op, ins, outs, attrs...))
		values = append(values, outs...)
	}
	for range next() % 4 {
		g.Output = append(g.Output, b.Value(values[next()%len(values)], pb.TensorProto_FLOAT))
	}
	return b.Model(g, 17)
}
