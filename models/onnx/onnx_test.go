package onnx

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	b "rnnserve/models/internal/onnxbuild"
	pb "rnnserve/models/onnx/onnxpb"
	"rnnserve/models/safetensors"
)

// values reads a weight of a Model.
func values(t testing.TB, w *safetensors.Tensor) []float32 {
	t.Helper()
	v, err := w.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func golden(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "golden", name, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestReadExports checks what Read finds in torch.onnx.export's graphs;
// the numbers are checked against PyTorch in models' TestUserGoldens.
func TestReadExports(t *testing.T) {
	lm, err := Read(golden(t, "onnx_lstm_lm"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if lm.Vocab != 30 || lm.Input != 8 || len(lm.Layers) != 2 || lm.Layers[1].Cell != "lstm" || lm.Layers[1].Hidden != 12 ||
		lm.HeadOut != 30 || lm.HeadB == nil || lm.Activation != "log_softmax" || !lm.BatchFirst || lm.HeadInput != "every_step" {
		t.Errorf("LM: %+v", lm)
	}
	// The graph's names: a client written for input_ids and output gets
	// the log-probabilities under "output".
	if want := []Output{{Name: "output", Value: "head"}, {Name: "h_n", Value: "h_n"}, {Name: "c_n", Value: "c_n"}}; lm.InputName != "input_ids" || !reflect.DeepEqual(lm.Outputs, want) {
		t.Errorf("LM names: input %q, outputs %+v; want input_ids, %+v", lm.InputName, lm.Outputs, want)
	}
	gru, err := Read(golden(t, "onnx_gru_bidir"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if gru.Vocab != 0 || gru.Input != 6 || len(gru.Layers) != 2 || !gru.Layers[0].Bidirectional || gru.Layers[1].Input != 20 ||
		len(gru.Layers[1].Dirs) != 2 || gru.HeadOut != 0 || gru.BatchFirst {
		t.Errorf("GRU: %+v", gru)
	}
}

// tiny builds a one-layer LSTM graph as the exporter lays it out:
// features -> LSTM -> Squeeze(axis 1) -> output, with edit applied.
func tiny(edit func(g *pb.GraphProto)) []byte {
	const in, H = 2, 3
	g := &pb.GraphProto{
		Name:  proto.String("tiny"),
		Input: []*pb.ValueInfoProto{b.Value("x", pb.TensorProto_FLOAT)},
		Initializer: []*pb.TensorProto{
			b.Fill("W", []int64{1, 4 * H, in}, 0.1, 0.01), b.Fill("R", []int64{1, 4 * H, H}, 0.2, 0.01),
			b.Fill("B", []int64{1, 8 * H}, 0.3, 0.01), b.Ints("axes", 1),
		},
		Node: []*pb.NodeProto{
			b.Node("lstm", "LSTM", []string{"x", "W", "R", "B"}, []string{"y", "", ""}, b.Int("hidden_size", H)),
			b.Node("squeeze", "Squeeze", []string{"y", "axes"}, []string{"out"}),
		},
		Output: []*pb.ValueInfoProto{b.Value("out", pb.TensorProto_FLOAT)},
	}
	if edit != nil {
		edit(g)
	}
	return b.Model(g, 14)
}

func TestTinyGateOrder(t *testing.T) {
	m, err := Read(tiny(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layers[0]
	wih, bhh := values(t, l.Dirs[0].Wih), values(t, l.Dirs[0].Bhh)
	// W holds 0.1 + i/100 in ONNX order i, o, f, c (blocks of H*in = 6
	// elements): PyTorch's f block (1) is ONNX block 2, o (3) is ONNX 1.
	for torchBlock, onnxBlock := range []int{0, 2, 3, 1} {
		got := wih[torchBlock*6]
		want := float32(0.1 + float32(onnxBlock*6)/100)
		if math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("W_ih block %d starts %v, want ONNX block %d's %v", torchBlock, got, onnxBlock, want)
		}
	}
	// B is W_b (12) then R_b (12): bias_hh block 0 is B[12].
	if got, want := bhh[0], float32(0.3+12.0/100); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("bias_hh[0] = %v, want %v", got, want)
	}
}

func TestReadErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"safetensors handed as ONNX", append([]byte{2, 0, 0, 0, 0, 0, 0, 0}, "{}"...), ErrFormat, "this is a safetensors file"},
		{"not protobuf", []byte{0x08, 0x07, 0x12, 0xff, 0xff}, ErrFormat, "not an ONNX model"},
		{"unsupported operator", tiny(func(g *pb.GraphProto) {
			g.Node[1] = b.Node("act", "Relu", []string{"y"}, []string{"out"})
		}), ErrUnsupported, `node "act" (Relu)`},
		{"extra node", tiny(func(g *pb.GraphProto) {
			g.Node = append(g.Node, b.Node("stray", "Conv", []string{"W"}, []string{"z"}))
		}), ErrUnsupported, `node "stray" (Conv)`},
		{"reverse only", tiny(func(g *pb.GraphProto) {
			g.Node[0].Attribute = append(g.Node[0].Attribute, b.String("direction", "reverse"))
		}), ErrUnsupported, `direction "reverse"`},
		{"clip", tiny(func(g *pb.GraphProto) {
			g.Node[0].Attribute = append(g.Node[0].Attribute, b.Float("clip", 3))
		}), ErrUnsupported, `attribute "clip"`},
		{"nonzero initial state", tiny(func(g *pb.GraphProto) {
			g.Initializer = append(g.Initializer, b.Floats("h0", []int64{1, 1, 3}, []float32{1, 0, 0}))
			g.Node[0].Input = append(g.Node[0].Input, "", "h0")
		}), ErrUnsupported, `initial state "h0"`},
		{"wrong hidden size", tiny(func(g *pb.GraphProto) { g.Node[0].Attribute[0].I = proto.Int64(4) }), ErrUnsupported, "want [1][16][input]"},
		{"custom domain", tiny(func(g *pb.GraphProto) { g.Node[1].Domain = proto.String("com.microsoft") }), ErrUnsupported, "com.microsoft"},
		{"external data outside the folder", tiny(func(g *pb.GraphProto) {
			b.External(g.Initializer[0], "../../etc/passwd", 0)
		}), ErrExternalData, "outside the model's folder"},
		{"external data absolute", tiny(func(g *pb.GraphProto) {
			b.External(g.Initializer[0], "/etc/passwd", 0)
		}), ErrExternalData, "outside the model's folder"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opened := false
			_, err := Read(c.data, func(string) ([]byte, error) { opened = true; return nil, errors.New("no file") })
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("Read error %v, want %v saying %q", err, c.want, c.msg)
			}
			if opened && errors.Is(c.want, ErrExternalData) {
				t.Error("opened a file outside the folder")
			}
		})
	}
}

// TestExternalData moves the GRU export's initializers into a data file
// beside it and checks Read gives the same weights through open.
func TestExternalData(t *testing.T) {
	data := golden(t, "onnx_gru_bidir")
	inline, err := Read(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mp pb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	var blob []byte
	for _, init := range mp.GetGraph().GetInitializer() {
		blob = append(blob, b.External(init, "weights/data.bin", len(blob))...)
	}
	ext, _ := proto.Marshal(&mp)
	var asked []string
	got, err := Read(ext, func(loc string) ([]byte, error) { asked = append(asked, loc); return blob, nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) == 0 || asked[0] != "weights/data.bin" {
		t.Errorf("open called with %q", asked)
	}
	for k := range inline.Layers {
		for d := range inline.Layers[k].Dirs {
			a, b := values(t, inline.Layers[k].Dirs[d].Wih), values(t, got.Layers[k].Dirs[d].Wih)
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("layer %d dir %d W_ih[%d] %v, inline %v", k, d, i, b[i], a[i])
				}
			}
		}
	}
	if _, err := Read(ext, nil); !errors.Is(err, ErrExternalData) {
		t.Errorf("external data without a folder: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestTinyGemmHead: out.reshape(-1, H) followed by nn.Linear, which the
// exporter writes as Reshape and Gemm (transB 1), and the same head written
// as Gemm without transB (weight [H][out]); both with and without a bias,
// then Softmax.
func TestTinyGemmHead(t *testing.T) {
	const H, out = 3, 5
	w := make([]float32, out*H) // [out][H], PyTorch's Linear layout
	for i := range w {
		w[i] = float32(i) / 10
	}
	wT := make([]float32, H*out) // [H][out]
	for o := range out {
		for h := range H {
			wT[h*out+o] = w[o*H+h]
		}
	}
	bias := []float32{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		name   string
		transB bool
		bias   bool
	}{{"transB", true, true}, {"plain", false, true}, {"no-bias", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			data := tiny(func(g *pb.GraphProto) {
				weight, dims := w, []int64{out, H}
				if !tc.transB {
					weight, dims = wT, []int64{H, out}
				}
				g.Initializer = append(g.Initializer, b.Ints("shape", -1, H), b.Floats("fc.weight", dims, weight), b.Floats("fc.bias", []int64{out}, bias))
				gemm := b.Node("fc", "Gemm", []string{"rows", "fc.weight"}, []string{"logits"})
				if tc.bias {
					gemm.Input = append(gemm.Input, "fc.bias")
				}
				if tc.transB {
					gemm.Attribute = append(gemm.Attribute, b.Int("transB", 1))
				}
				g.Node = append(g.Node, b.Node("flat", "Reshape", []string{"out", "shape"}, []string{"rows"}), gemm,
					b.Node("sm", "Softmax", []string{"logits"}, []string{"probs"}, b.Int("axis", 1)))
				g.Output[0].Name = proto.String("probs")
			})
			m, err := Read(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if m.HeadOut != out || m.Activation != "softmax" {
				t.Fatalf("head out %d, activation %q; want %d, softmax", m.HeadOut, m.Activation, out)
			}
			headW := values(t, m.HeadW)
			for i := range w {
				if headW[i] != w[i] {
					t.Fatalf("HeadW[%d] = %v, want %v (PyTorch's [out][H] layout)", i, headW[i], w[i])
				}
			}
			if tc.bias != (m.HeadB != nil) {
				t.Fatalf("HeadB %v with bias %v", m.HeadB, tc.bias)
			}
			if m.HeadB != nil {
				if headB := values(t, m.HeadB); !slices.Equal(headB, bias) {
					t.Fatalf("HeadB = %v, want %v", headB, bias)
				}
			}
		})
	}
	// Flattening to anything but [-1, width] is refused with the node named.
	data := tiny(func(g *pb.GraphProto) {
		g.Initializer = append(g.Initializer, b.Ints("shape", -1, 2))
		g.Node = append(g.Node, b.Node("flat", "Reshape", []string{"out", "shape"}, []string{"rows"}))
		g.Output[0].Name = proto.String("rows")
	})
	if _, err := Read(data, nil); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "flat") {
		t.Errorf("reshape to [-1, 2] of a width-3 output: %v, want ErrUnsupported naming the node", err)
	}
}

// TestSoftmaxAxisByOpset: before operator set 13 a Softmax flattens the
// axes from its axis on (1 by default) and normalizes them together, so
// one without an axis is over the last axis only on rows of rank 2; on
// the time-major output of rank 3 it would be over batch and classes
// together, and is refused. From 13 the default is the last axis.
func TestSoftmaxAxisByOpset(t *testing.T) {
	const H = 3
	for _, tc := range []struct {
		name  string
		rows  bool // the head reads out.reshape(-1, H): rank 2
		axis  *int64
		opset int64
		ok    bool
	}{
		{"rows, no axis, 11", true, nil, 11, true},
		{"steps, no axis, 11", false, nil, 11, false},
		{"steps, axis -1, 11", false, proto.Int64(-1), 11, true},
		{"steps, axis 1, 11", false, proto.Int64(1), 11, false},
		{"steps, no axis, 13", false, nil, 13, true},
		{"steps, axis 1, 13", false, proto.Int64(1), 13, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &pb.GraphProto{}
			if tc.rows {
				g.Initializer = append(g.Initializer, b.Ints("shape", -1, H))
				g.Node = append(g.Node, b.Node("flat", "Reshape", []string{"out", "shape"}, []string{"rows"}))
				withHead("rows", H)(g)
			} else {
				g.Initializer = append(g.Initializer, b.Fill("fc.w", []int64{H, 4}, 0, 0.1))
				g.Node = append(g.Node, b.Node("fc", "MatMul", []string{"out", "fc.w"}, []string{"logits"}))
			}
			sm := b.Node("sm", "Softmax", []string{"logits"}, []string{"probs"})
			if tc.axis != nil {
				sm.Attribute = append(sm.Attribute, b.Int("axis", *tc.axis))
			}
			g.Node = append(g.Node, sm)
			data := tiny(func(tg *pb.GraphProto) {
				tg.Initializer = append(tg.Initializer, g.Initializer...)
				tg.Node = append(tg.Node, g.Node...)
				tg.Output[0].Name = proto.String("probs")
			})
			var mp pb.ModelProto
			if err := proto.Unmarshal(data, &mp); err != nil {
				t.Fatal(err)
			}
			mp.OpsetImport[0].Version = proto.Int64(tc.opset)
			data, _ = proto.Marshal(&mp)
			m, err := Read(data, nil)
			switch {
			case tc.ok && err != nil:
				t.Fatal(err)
			case tc.ok && m.Activation != "softmax":
				t.Fatalf("activation %q, want softmax", m.Activation)
			case !tc.ok && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "want the last")):
				t.Fatalf("%v, want ErrUnsupported: not the last axis", err)
			}
		})
	}
}
