package onnx

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	b "rnnserve/models/internal/onnxbuild"
	pb "rnnserve/models/onnx/onnxpb"
)

// stack builds a graph on float features x [T, B, 2]: layers of the given
// ops (LSTM, GRU or RNN; dirs directions each, hidden 3), their outputs
// joined as the exporter joins them, then edit, with outputs named.
func stack(ops []string, dirs int, edit func(g *pb.GraphProto), outputs ...string) []byte {
	const H = 3
	g := &pb.GraphProto{Name: proto.String("stack"), Input: []*pb.ValueInfoProto{b.Value("x", pb.TensorProto_FLOAT)},
		Initializer: []*pb.TensorProto{b.Ints("axes1", 1), b.Ints("join", 0, 0, -1)}}
	cur, in := "x", 2
	for k, op := range ops {
		gates := map[string]int64{"LSTM": 4, "GRU": 3, "RNN": 1}[op]
		w, r, bias := fmt.Sprint("W", k), fmt.Sprint("R", k), fmt.Sprint("B", k)
		g.Initializer = append(g.Initializer, b.Fill(w, []int64{int64(dirs), gates * H, int64(in)}, float32(k), 0.01),
			b.Fill(r, []int64{int64(dirs), gates * H, H}, 0.5, 0.01), b.Fill(bias, []int64{int64(dirs), 2 * gates * H}, 0.1, 0.01))
		attrs := []*pb.AttributeProto{b.Int("hidden_size", H)}
		if op == "GRU" {
			attrs = append(attrs, b.Int("linear_before_reset", 1))
		}
		if dirs == 2 {
			attrs = append(attrs, b.String("direction", "bidirectional"))
		}
		outs := []string{fmt.Sprint("Y", k), fmt.Sprint("Yh", k)}
		if op == "LSTM" {
			outs = append(outs, fmt.Sprint("Yc", k))
		}
		g.Node = append(g.Node, b.Node(fmt.Sprint("rnn", k), op, []string{cur, w, r, bias}, outs, attrs...))
		if dirs == 1 {
			g.Node = append(g.Node, b.Node("", "Squeeze", []string{outs[0], "axes1"}, []string{fmt.Sprint("out", k)}))
		} else {
			g.Node = append(g.Node, b.Node("", "Transpose", []string{outs[0]}, []string{fmt.Sprint("t", k)}, b.IntList("perm", 0, 2, 1, 3)),
				b.Node("", "Reshape", []string{fmt.Sprint("t", k), "join"}, []string{fmt.Sprint("out", k)}))
		}
		cur, in = fmt.Sprint("out", k), dirs*H
	}
	if edit != nil {
		edit(g)
	}
	for _, o := range outputs {
		g.Output = append(g.Output, b.Value(o, pb.TensorProto_FLOAT))
	}
	return b.Model(g, 17)
}

// withHead adds a Gemm head of 4 outputs on value from (width in wide).
func withHead(from string, in int) func(g *pb.GraphProto) {
	return func(g *pb.GraphProto) {
		g.Initializer = append(g.Initializer, b.Fill("fc.w", []int64{4, int64(in)}, 0, 0.1), b.Fill("fc.b", []int64{4}, 1, 0))
		g.Node = append(g.Node, b.Node("fc", "Gemm", []string{from, "fc.w", "fc.b"}, []string{"logits"}, b.Int("transB", 1)))
	}
}

// TestHeadInputs: the graph shows where the head reads: h_n[-1] of one
// direction, cat(h_n[-2], h_n[-1]) of two, out[-1] time-major; other
// readings of the final states are refused, naming them.
func TestHeadInputs(t *testing.T) {
	scalar := func(name string, v int64) *pb.TensorProto { return b.Scalar(name, v) }
	for _, c := range []struct {
		name  string
		ops   []string
		dirs  int
		edit  func(g *pb.GraphProto)
		input string // want HeadInput, or the refusal's words
		outs  []Output
	}{
		{"h_n[-1]", []string{"GRU", "GRU"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, scalar("last", -1))
			g.Node = append(g.Node, b.Node("", "Concat", []string{"Yh0", "Yh1"}, []string{"h_n"}, b.Int("axis", 0)),
				b.Node("", "Gather", []string{"h_n", "last"}, []string{"h_last"}, b.Int("axis", 0)))
			withHead("h_last", 3)(g)
		}, "h_n", []Output{{Name: "logits", Value: "head"}, {Name: "h_n", Value: "h_n"}, {Name: "h_last", Value: "h_n", States: []int{1}, Join: true}}},
		{"cat(h_n[-2], h_n[-1])", []string{"LSTM", "LSTM"}, 2, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, scalar("m2", -2), scalar("m1", -1))
			g.Node = append(g.Node, b.Node("", "Concat", []string{"Yh0", "Yh1"}, []string{"h_n"}, b.Int("axis", 0)),
				b.Node("", "Gather", []string{"h_n", "m2"}, []string{"f"}, b.Int("axis", 0)),
				b.Node("", "Gather", []string{"h_n", "m1"}, []string{"r"}, b.Int("axis", 0)),
				b.Node("", "Concat", []string{"f", "r"}, []string{"cat"}, b.Int("axis", 1)),
				b.Node("", "Concat", []string{"Yc0", "Yc1"}, []string{"c_n"}, b.Int("axis", 0)))
			withHead("cat", 6)(g)
		}, "h_n", []Output{{Name: "logits", Value: "head"}, {Name: "c_n", Value: "c_n"}, {Name: "cat", Value: "h_n", States: []int{2, 3}, Join: true}}},
		{"out[-1]", []string{"RNN"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, scalar("last", -1))
			g.Node = append(g.Node, b.Node("", "Gather", []string{"out0", "last"}, []string{"o_last"}, b.Int("axis", 0)))
			withHead("o_last", 3)(g)
		}, "last_step", []Output{{Name: "logits", Value: "head"}, {Name: "out0", Value: "output"}, {Name: "o_last", Value: "none"}}},
		{"every step, rows", []string{"LSTM"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, b.Ints("rows", -1, 3))
			g.Node = append(g.Node, b.Node("", "Reshape", []string{"out0", "rows"}, []string{"flat"}))
			withHead("flat", 3)(g)
			g.Node = append(g.Node, b.Node("", "LogSoftmax", []string{"logits"}, []string{"logp"}, b.Int("axis", 1)))
		}, "every_step", []Output{{Name: "logp", Value: "head", Rows: true}, {Name: "logits", Value: "none"}, {Name: "flat", Value: "output", Rows: true}}},
		{"h_n[0] of two layers", []string{"GRU", "GRU"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, scalar("first", 0))
			g.Node = append(g.Node, b.Node("", "Concat", []string{"Yh0", "Yh1"}, []string{"h_n"}, b.Int("axis", 0)),
				b.Node("", "Gather", []string{"h_n", "first"}, []string{"h0"}, b.Int("axis", 0)))
			withHead("h0", 3)(g)
		}, "the head reads final states [0] of h_n", nil},
		{"c_n", []string{"LSTM"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, scalar("last", -1))
			g.Node = append(g.Node, b.Node("", "Gather", []string{"Yc0", "last"}, []string{"c_last"}, b.Int("axis", 0)))
			withHead("c_last", 3)(g)
		}, "(c_n: true)", nil},
		{"out[0]", []string{"GRU"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, scalar("first", 0))
			g.Node = append(g.Node, b.Node("", "Gather", []string{"out0", "first"}, []string{"o0"}, b.Int("axis", 0)))
			withHead("o0", 3)(g)
		}, "gathers index 0 on axis 0", nil},
		{"a second head", []string{"GRU"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, b.Fill("w2", []int64{3, 5}, 0, 0.1))
			g.Node = append(g.Node, b.Node("", "MatMul", []string{"out0", "w2"}, []string{"other"}))
			g.Node = append(g.Node, b.Node("fc", "MatMul", []string{"out0", "w2"}, []string{"logits"}))
		}, "not the head after the recurrent layers", nil},
		{"a branch", []string{"GRU"}, 1, func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, b.Fill("W9", []int64{1, 9, 2}, 0, 0.1), b.Fill("R9", []int64{1, 9, 3}, 0, 0.1))
			g.Node = append(g.Node, b.Node("again", "GRU", []string{"x", "W9", "R9"}, []string{"y9"}, b.Int("hidden_size", 3), b.Int("linear_before_reset", 1)))
		}, "the model branches", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var names []string
			for _, o := range c.outs {
				names = append(names, o.Name)
			}
			if c.outs == nil {
				names = []string{"logits"}
			}
			m, err := Read(stack(c.ops, c.dirs, c.edit, names...), nil)
			if c.outs == nil {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.input) {
					t.Errorf("%v, want ErrUnsupported saying %q", err, c.input)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.HeadInput != c.input || m.HeadOut != 4 {
				t.Errorf("head input %q, %d outputs; want %q, 4", m.HeadInput, m.HeadOut, c.input)
			}
			if !reflect.DeepEqual(m.Outputs, c.outs) {
				t.Errorf("outputs %+v\nwant %+v", m.Outputs, c.outs)
			}
			if m.InputName != "x" || m.BatchFirst {
				t.Errorf("input %q, batch first %v", m.InputName, m.BatchFirst)
			}
		})
	}
}

// TestRNNNodes: ONNX RNN nodes are Elman layers, tanh by default or
// with activations Tanh, relu with Relu for every direction; W, R and B
// need no regating.
func TestRNNNodes(t *testing.T) {
	for _, c := range []struct {
		acts []string
		dirs int
		cell string // or the refusal's words
	}{
		{nil, 1, "rnn_tanh"},
		{[]string{"Tanh", "Tanh"}, 2, "rnn_tanh"},
		{[]string{"Relu"}, 1, "rnn_relu"},
		{[]string{"Relu", "Relu"}, 2, "rnn_relu"},
		{[]string{"Relu", "Tanh"}, 2, `activations "Relu", "Tanh", want Tanh, Tanh`},
		{[]string{"Sigmoid"}, 1, `want Tanh`},
	} {
		data := stack([]string{"RNN"}, c.dirs, func(g *pb.GraphProto) {
			if c.acts != nil {
				g.Node[0].Attribute = append(g.Node[0].Attribute, b.Strings("activations", c.acts...))
			}
		}, "out0")
		m, err := Read(data, nil)
		if !strings.HasPrefix(c.cell, "rnn_") {
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.cell) {
				t.Errorf("activations %q: %v, want ErrUnsupported saying %q", c.acts, err, c.cell)
			}
			continue
		}
		if err != nil {
			t.Fatalf("activations %q: %v", c.acts, err)
		}
		l := m.Layers[0]
		if l.Cell != c.cell || len(l.Dirs) != c.dirs || l.Hidden != 3 || l.Input != 2 {
			t.Errorf("activations %q: layer %s hidden %d input %d, %d directions; want %s", c.acts, l.Cell, l.Hidden, l.Input, len(l.Dirs), c.cell)
		}
		// W is 0 + i/100 in ONNX order, which is PyTorch's: W_ih[i] of
		// direction d is W[d*6 + i].
		for d, w := range l.Dirs {
			for i, v := range values(t, w.Wih) {
				if want := float32(d*6+i) * 0.01; v != want {
					t.Fatalf("direction %d W_ih[%d] = %v, want %v", d, i, v, want)
				}
			}
			if bhh := values(t, w.Bhh); bhh[0] != 0.1+float32(d*6+3)*0.01 {
				t.Errorf("direction %d bias_hh[0] = %v, want B's second half", d, bhh[0])
			}
		}
	}
}

// TestOrderAndCycles: nodes out of order are sorted; a node that reads
// a value nothing makes, a value made twice, and a cycle are refused.
func TestOrderAndCycles(t *testing.T) {
	if _, err := Read(stack([]string{"GRU"}, 1, func(g *pb.GraphProto) { g.Node[0], g.Node[1] = g.Node[1], g.Node[0] }, "out0"), nil); err != nil {
		t.Errorf("nodes out of order: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(g *pb.GraphProto)
		says string
	}{
		{"never", func(g *pb.GraphProto) { g.Node[1].Input[1] = "nowhere" }, `reads "nowhere", which nothing in the graph makes`},
		{"twice", func(g *pb.GraphProto) {
			g.Node = append(g.Node, b.Node("again", "Identity", []string{"x"}, []string{"out0"}))
		}, `makes "out0", which node "out0" also makes`},
		{"the input remade", func(g *pb.GraphProto) {
			g.Node = append([]*pb.NodeProto{b.Node("remake", "Identity", []string{"axes1"}, []string{"x"})}, g.Node...)
		}, `makes "x", which is the graph's input or an initializer`},
		{"a cycle", func(g *pb.GraphProto) {
			g.Node = append(g.Node, b.Node("a", "Identity", []string{"c"}, []string{"b"}), b.Node("c", "Identity", []string{"b"}, []string{"c"}))
		}, `node "a" (Identity): is on a cycle`},
		{"no outputs", func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, b.Ints("shape", 1, 1, 3))
			g.Node = append([]*pb.NodeProto{b.Node("zeros", "ConstantOfShape", []string{"shape"}, []string{"z"}),
				b.Node("mute", "Concat", []string{"z", "z"}, nil)}, g.Node...)
		}, `node "mute" (Concat): no outputs`},
	} {
		_, err := Read(stack([]string{"GRU"}, 1, c.edit, "out0"), nil)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrUnsupported saying %q", c.name, err, c.says)
		}
	}
}
