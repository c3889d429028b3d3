package onnxbuild

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "rnnserve/models/onnx/onnxpb"
)

// A Hostile file is one the ONNX loader must refuse quickly and in little
// memory, each of a kind that once crashed, hung or exhausted it, or
// could have.
type Hostile struct {
	Name string
	Why  string
	Data []byte
	// External, when set, is the content of every external data file the
	// model names (the loader's open returns it).
	External []byte
}

// tinyGRU is a one-layer GRU on 2 features, hidden 3, as the exporter
// writes it, with its initial state read from h0 (which edit must make).
func tinyGRU(h0 string, extra ...*pb.NodeProto) *pb.GraphProto {
	const in, H = 2, 3
	return &pb.GraphProto{
		Name:  proto.String("hostile"),
		Input: []*pb.ValueInfoProto{Value("x", pb.TensorProto_FLOAT)},
		Initializer: []*pb.TensorProto{
			Fill("W", []int64{1, 3 * H, in}, 0.1, 0.01), Fill("R", []int64{1, 3 * H, H}, 0.2, 0.01),
			Fill("B", []int64{1, 6 * H}, 0.3, 0.01), Ints("axes", 1),
		},
		Node: append(extra,
			Node("gru", "GRU", []string{"x", "W", "R", "B", "", h0}, []string{"y", ""}, Int("hidden_size", H), Int("linear_before_reset", 1)),
			Node("squeeze", "Squeeze", []string{"y", "axes"}, []string{"out"})),
		Output: []*pb.ValueInfoProto{Value("out", pb.TensorProto_FLOAT)},
	}
}

// IdentityCycle is a GRU whose initial state comes from two Identity
// nodes that read each other: a walk that follows producers recursively
// to prove the state zero never ends (the Go stack overflow it caused
// is fatal: recover cannot catch it).
func IdentityCycle() Hostile {
	g := tinyGRU("h0",
		Node("loop_a", "Identity", []string{"h0b"}, []string{"h0"}),
		Node("loop_b", "Identity", []string{"h0"}, []string{"h0b"}))
	return Hostile{Name: "identity_cycle", Why: "initial state from a two-node Identity cycle", Data: Model(g, 14)}
}

// dangling is a chain of n shape computations that nothing reads: Shape
// of the input, then n Identity nodes, listed in reverse order (each node
// before the one that makes its input) or in order.
func dangling(n int, reverse bool) []byte {
	chain := []*pb.NodeProto{Node("", "Shape", []string{"x"}, []string{"s0"})}
	for i := range n {
		chain = append(chain, Node("", "Identity", []string{fmt.Sprint("s", i)}, []string{fmt.Sprint("s", i+1)}))
	}
	if reverse {
		for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
			chain[i], chain[j] = chain[j], chain[i]
		}
	}
	g := tinyGRU("")
	g.Node = append(g.Node, chain...)
	return Model(g, 14)
}

// DanglingReverse is 20,000 dangling nodes in reverse order: a cleanup
// that sweeps the node list until nothing changes takes one sweep per
// node, 20,000 squared steps. Sorted first, they load in linear time.
func DanglingReverse(n int) Hostile {
	return Hostile{Name: "dangling_reverse", Why: fmt.Sprintf("%d dangling nodes in reverse order", n), Data: dangling(n, true)}
}

// DanglingForward is the same nodes in order: a valid graph whose extra
// nodes are shape computations, which must load in time linear in them.
func DanglingForward(n int) []byte { return dangling(n, false) }

// DataCycle feeds the GRU's own output back into its input.
func DataCycle() Hostile {
	g := tinyGRU("")
	g.Node[0].Input[0] = "back"
	g.Node = append(g.Node, Node("back", "Identity", []string{"out"}, []string{"back"}))
	return Hostile{Name: "data_cycle", Why: "the GRU reads its own output", Data: Model(g, 14)}
}

// wire appends a length-delimited field.
func wire(b []byte, num protowire.Number, payload []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, payload)
}

// ManyNodes is a graph of n empty nodes, two bytes each: decoding it
// would allocate a hundred times its size.
func ManyNodes(n int) Hostile {
	graph := bytes.Repeat([]byte{0x0a, 0x00}, n) // field 1 (node), empty
	return Hostile{Name: "many_nodes", Why: fmt.Sprintf("%d empty nodes", n), Data: wire(nil, 7, graph)}
}

// ManyOutputs is a graph of n empty value infos (graph outputs).
func ManyOutputs(n int) Hostile {
	graph := bytes.Repeat([]byte{0x62, 0x00}, n) // field 12 (output), empty
	return Hostile{Name: "many_outputs", Why: fmt.Sprintf("%d empty graph outputs", n), Data: wire(nil, 7, graph)}
}

// PackedVarints is one initializer of n int64 values of one byte each,
// which decode to eight bytes each.
func PackedVarints(n int) Hostile {
	var t []byte
	t = wire(t, 7, make([]byte, n)) // int64_data, packed zeros
	graph := wire(nil, 5, t)        // initializer
	return Hostile{Name: "packed_varints", Why: fmt.Sprintf("%d one-byte int64 values", n), Data: wire(nil, 7, graph)}
}

// DeepGroups nests n groups in an undeclared field of the model: a
// decoder that recursed without a bound would overflow its stack.
func DeepGroups(n int) Hostile {
	var b []byte
	for range n {
		b = protowire.AppendTag(b, 99, protowire.StartGroupType)
	}
	for range n {
		b = protowire.AppendTag(b, 99, protowire.EndGroupType)
	}
	return Hostile{Name: "deep_groups", Why: fmt.Sprintf("%d nested groups", n), Data: b}
}

// HugeDims is a GRU whose W claims 2^60 elements and holds none.
func HugeDims() Hostile {
	g := tinyGRU("")
	g.Initializer[0] = &pb.TensorProto{Name: proto.String("W"), Dims: []int64{1 << 20, 1 << 20, 1 << 20},
		DataType: proto.Int32(int32(pb.TensorProto_FLOAT))}
	return Hostile{Name: "huge_dims", Why: "a weight of 2^60 elements", Data: Model(g, 14)}
}

// SharedExternal is a stack of n GRU layers of hidden size h whose
// weights all name the same range of one external file: decoded, they
// would be n times that file.
func SharedExternal(n, h int) Hostile {
	g := &pb.GraphProto{Name: proto.String("shared"), Input: []*pb.ValueInfoProto{Value("x", pb.TensorProto_FLOAT)}}
	var blob []byte
	cur := "x"
	for k := range n {
		w := Fill(fmt.Sprint("W", k), []int64{1, 3 * int64(h), int64(h)}, 0, 0)
		r := Fill(fmt.Sprint("R", k), []int64{1, 3 * int64(h), int64(h)}, 0, 0)
		raw := External(w, "weights.data", 0)
		External(r, "weights.data", 0)
		if blob == nil {
			blob = raw
		}
		y, out := fmt.Sprint("y", k), fmt.Sprint("out", k)
		g.Initializer = append(g.Initializer, w, r, Ints(fmt.Sprint("axes", k), 1))
		g.Node = append(g.Node,
			Node(fmt.Sprint("gru", k), "GRU", []string{cur, w.GetName(), r.GetName()}, []string{y, ""}, Int("hidden_size", int64(h)), Int("linear_before_reset", 1)),
			Node("", "Squeeze", []string{y, fmt.Sprint("axes", k)}, []string{out}))
		cur = out
	}
	g.Output = []*pb.ValueInfoProto{Value(cur, pb.TensorProto_FLOAT)}
	return Hostile{Name: "shared_external", Why: fmt.Sprintf("%d layers' weights on one external range", n), Data: Model(g, 14), External: blob}
}

// LongName is a graph whose unsupported node has a name of n bytes: the
// error must not print it whole.
func LongName(n int) Hostile {
	g := tinyGRU("")
	g.Node[1] = Node(string(bytes.Repeat([]byte("n"), n)), "Relu", []string{"y"}, []string{"out"})
	return Hostile{Name: "long_name", Why: fmt.Sprintf("a node name of %d bytes", n), Data: Model(g, 14)}
}

// All are the hostile files, at the sizes the tests use.
func All() []Hostile {
	return []Hostile{
		IdentityCycle(),
		DanglingReverse(20000),
		DataCycle(),
		ManyNodes(1 << 17),
		ManyOutputs(3 << 20),
		PackedVarints(32 << 20),
		DeepGroups(1 << 20),
		HugeDims(),
		SharedExternal(64, 256),
		LongName(8 << 20),
	}
}
