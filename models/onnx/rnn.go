package onnx

import (
	"fmt"
	"slices"

	pb "rnnserve/models/onnx/onnxpb"
)

// rnn reads one LSTM or GRU node's attributes and weights.
func (g *graph) rnn(n *pb.NodeProto) (*Layer, error) {
	cell, gates := "lstm", 4
	defaultActs := []string{"Sigmoid", "Tanh", "Tanh"}
	if n.GetOpType() == "GRU" {
		cell, gates = "gru", 3
		defaultActs = defaultActs[:2]
	}
	l := &Layer{Cell: cell}
	dirs := 1
	for _, a := range n.GetAttribute() {
		switch a.GetName() {
		case "hidden_size":
			l.Hidden = int(a.GetI())
		case "direction":
			switch string(a.GetS()) {
			case "forward":
			case "bidirectional":
				l.Bidirectional, dirs = true, 2
			default:
				return nil, bad(n, "direction %q (PyTorch modules run forward or bidirectional)", a.GetS())
			}
		case "linear_before_reset":
			if a.GetI() != 1 {
				return nil, bad(n, "linear_before_reset %d: PyTorch's GRU applies the reset gate after the recurrent product (1)", a.GetI())
			}
		case "layout":
			if a.GetI() != 0 {
				return nil, bad(n, "layout %d, want 0 (time-major)", a.GetI())
			}
		case "input_forget":
			if a.GetI() != 0 {
				return nil, bad(n, "input_forget %d, want 0", a.GetI())
			}
		case "activations":
			for i, act := range a.GetStrings() {
				if string(act) != defaultActs[i%len(defaultActs)] {
					return nil, bad(n, "activations %q, want the defaults %q", a.GetStrings(), defaultActs)
				}
			}
		default:
			return nil, bad(n, "attribute %s is not supported", a.GetName())
		}
	}
	if n.GetOpType() == "GRU" && attr(n, "linear_before_reset") == nil {
		return nil, bad(n, "linear_before_reset 0 (the default): PyTorch's GRU applies the reset gate after the recurrent product (1)")
	}
	ins := n.GetInput()
	if len(ins) < 3 {
		return nil, bad(n, "fewer than 3 inputs")
	}
	for i, in := range ins {
		switch {
		case i == 4 && in != "":
			return nil, bad(n, "sequence_lens %q: per-row lengths are not supported in an ONNX graph", in)
		case i == 7 && in != "":
			return nil, bad(n, "peephole weights %q (PyTorch's LSTM has none)", in)
		case (i == 5 || i == 6) && in != "" && !g.zeros(in):
			return nil, bad(n, "initial state %q is not zeros (export the module without h0/c0)", in)
		}
	}
	H := l.Hidden
	rows := gates * H
	W, ws, err := g.floats(ins[1])
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if len(ws) != 3 || ws[0] != dirs || ws[1] != rows || H < 1 {
		return nil, bad(n, "W %q has shape %v, want [%d][%d][input] for hidden_size %d (%v)", ins[1], ws, dirs, rows, H, err)
	}
	l.Input = ws[2]
	R, rs, err := g.floats(ins[2])
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if !slices.Equal(rs, []int{dirs, rows, H}) {
		return nil, bad(n, "R %q has shape %v, want [%d][%d][%d] (%v)", ins[2], rs, dirs, rows, H, err)
	}
	var B []float32
	if len(ins) > 3 && ins[3] != "" {
		b, bs, err := g.floats(ins[3])
		if err != nil {
			return nil, nodeErr(n, err)
		}
		if !slices.Equal(bs, []int{dirs, 2 * rows}) {
			return nil, bad(n, "B %q has shape %v, want [%d][%d] (%v)", ins[3], bs, dirs, 2*rows, err)
		}
		B = b
	}
	// ONNX block k of the gates is PyTorch's block order[k].
	order := []int{0, 3, 1, 2} // LSTM: ONNX i, o, f, c -> PyTorch i, f, g, o
	if cell == "gru" {
		order = []int{1, 0, 2} // GRU: ONNX z, r, h -> PyTorch r, z, n
	}
	regate := func(src []float32, cols int) []float32 {
		out := make([]float32, len(src))
		for k, to := range order {
			copy(out[to*H*cols:(to+1)*H*cols], src[k*H*cols:(k+1)*H*cols])
		}
		return out
	}
	for d := range dirs {
		w := Weights{
			Wih: regate(W[d*rows*l.Input:(d+1)*rows*l.Input], l.Input),
			Whh: regate(R[d*rows*H:(d+1)*rows*H], H),
			Bih: make([]float32, rows),
			Bhh: make([]float32, rows),
		}
		if B != nil {
			w.Bih = regate(B[d*2*rows:d*2*rows+rows], 1)
			w.Bhh = regate(B[d*2*rows+rows:(d+1)*2*rows], 1)
		}
		l.Dirs = append(l.Dirs, w)
	}
	return l, nil
}

// zeros reports whether value name is all zeros: a zero constant, the
// exporter's ConstantOfShape (value 0), or a slice, reshape or expansion
// of one. The nodes that make it are marked done.
func (g *graph) zeros(name string) bool {
	if _, ok := g.consts[name]; ok {
		v, _, err := g.floats(name)
		if err != nil {
			return false
		}
		for _, x := range v {
			if x != 0 {
				return false
			}
		}
		return true
	}
	n, ok := g.producer[name]
	if !ok {
		return false
	}
	switch n.GetOpType() {
	case "ConstantOfShape":
		if a := attr(n, "value"); a != nil && a.GetT() != nil {
			t := a.GetT()
			for _, b := range t.GetRawData() {
				if b != 0 {
					return false
				}
			}
			for _, f := range t.GetFloatData() {
				if f != 0 {
					return false
				}
			}
		}
		g.done[n] = true
		return true
	case "Slice", "Gather", "Squeeze", "Unsqueeze", "Expand", "Reshape", "Identity", "Cast", "Tile":
		if len(n.GetInput()) > 0 && g.zeros(n.GetInput()[0]) {
			g.done[n] = true
			return true
		}
	}
	return false
}

// stateGlue are the operators the exporter uses to gather the layers'
// final states into h_n and c_n outputs.
var stateGlue = []string{"Concat", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Identity", "Slice", "Gather"}

// stateOutputs accepts what consumes an RNN node's Y_h and Y_c: glue that
// ends in graph outputs (the engine computes h_n and c_n itself).
func (g *graph) stateOutputs(n *pb.NodeProto) error {
	var visit func(value string) error
	visit = func(value string) error {
		for _, c := range g.consumers[value] {
			if g.done[c] {
				continue
			}
			if !slices.Contains(stateGlue, c.GetOpType()) {
				return bad(c, "reads the final state %q of an RNN node: only gathering final states into graph outputs is supported (a head on h_n is not)", value)
			}
			g.done[c] = true
			for _, o := range c.GetOutput() {
				if err := visit(o); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, o := range n.GetOutput()[1:] {
		if o == "" {
			continue
		}
		if err := visit(o); err != nil {
			return err
		}
	}
	return nil
}

// shapeOps compute shapes, indices and the like from Shape's output and
// constants; they never see the model's data.
var shapeOps = []string{"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul",
	"Div", "Equal", "Where", "Range", "Reshape", "ConstantOfShape", "Expand", "Identity"}

// sweep accepts the nodes the walk has not accounted for if they only
// compute shapes, and refuses any other.
func (g *graph) sweep(gp *pb.GraphProto) error {
	shapeVal := map[string]bool{}
	for name := range g.consts {
		shapeVal[name] = true
	}
	for n := range g.done {
		if n.GetOpType() == "Shape" {
			shapeVal[n.GetOutput()[0]] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, n := range gp.GetNode() {
			if g.done[n] || !slices.Contains(shapeOps, n.GetOpType()) {
				continue
			}
			ok := true
			for _, in := range n.GetInput() {
				if in != "" && !shapeVal[in] && n.GetOpType() != "Shape" {
					ok = false
				}
			}
			if ok {
				g.done[n] = true
				changed = true
				for _, o := range n.GetOutput() {
					shapeVal[o] = true
				}
			}
		}
	}
	for _, n := range gp.GetNode() {
		if !g.done[n] {
			return bad(n, "not part of the recognised model (an embedding, LSTM/GRU layers, a linear head and their glue)")
		}
	}
	return nil
}

// nodeErr puts a node's name in front of an error about its inputs,
// keeping the error's sentinel.
func nodeErr(n *pb.NodeProto, err error) error {
	return fmt.Errorf("node %q (%s): %w", nodeName(n), n.GetOpType(), err)
}
