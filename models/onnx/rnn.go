package onnx

import (
	"slices"
	"strings"

	pb "rnnserve/models/onnx/onnxpb"
)

// layer reads one LSTM, GRU or RNN node's attributes and weights.
func (g *graph) layer(n *pb.NodeProto, ins []*value) (*Layer, error) {
	op := n.GetOpType()
	cell, gates := "lstm", 4
	defaultActs := []string{"Sigmoid", "Tanh", "Tanh"}
	switch op {
	case "GRU":
		cell, gates = "gru", 3
		defaultActs = defaultActs[:2]
	case "RNN":
		// PyTorch's nn.RNN: h' = tanh or relu of W_ih x + b_ih + W_hh h + b_hh.
		cell, gates = "rnn_tanh", 1
		defaultActs = []string{"Tanh"}
	}
	l := &Layer{Cell: cell}
	dirs := 1
	var acts []string
	for _, a := range n.GetAttribute() {
		switch a.GetName() {
		case "hidden_size":
			if a.GetI() < 1 || a.GetI() > 1<<24 {
				return nil, bad(n, "hidden_size %d, want 1..%d", a.GetI(), 1<<24)
			}
			l.Hidden = int(a.GetI())
		case "direction":
			switch string(a.GetS()) {
			case "forward":
			case "bidirectional":
				l.Bidirectional, dirs = true, 2
			default:
				return nil, bad(n, "direction %s (PyTorch modules run forward or bidirectional)", clip(string(a.GetS())))
			}
		case "linear_before_reset":
			if op != "GRU" || a.GetI() != 1 {
				return nil, bad(n, "linear_before_reset %d: PyTorch's GRU applies the reset gate after the recurrent product (1)", a.GetI())
			}
		case "layout":
			if a.GetI() != 0 {
				return nil, bad(n, "layout %d, want 0 (time-major)", a.GetI())
			}
		case "input_forget":
			if op != "LSTM" || a.GetI() != 0 {
				return nil, bad(n, "input_forget %d, want 0", a.GetI())
			}
		case "activations":
			if len(a.GetStrings()) > 6 {
				return nil, bad(n, "%d activations", len(a.GetStrings()))
			}
			for _, s := range a.GetStrings() {
				acts = append(acts, string(s))
			}
		default:
			return nil, bad(n, "attribute %s is not supported", clip(a.GetName()))
		}
	}
	if op == "GRU" && attr(n, "linear_before_reset") == nil {
		return nil, bad(n, "linear_before_reset 0 (the default): PyTorch's GRU applies the reset gate after the recurrent product (1)")
	}
	if l.Hidden == 0 {
		return nil, bad(n, "no hidden_size")
	}
	if acts != nil {
		// One list per direction, each the defaults; an RNN may have Relu
		// for both directions (nn.RNN(nonlinearity='relu')).
		want := slices.Repeat(defaultActs, dirs)
		if op == "RNN" && len(acts) == dirs && !slices.ContainsFunc(acts, func(s string) bool { return s != "Relu" }) {
			l.Cell, want = "rnn_relu", acts
		}
		if !slices.Equal(acts, want) {
			return nil, bad(n, "activations %s, want %s (PyTorch's)", clipList(acts), strings.Join(want, ", "))
		}
	}
	if len(ins) < 3 || ins[1] == nil || ins[2] == nil {
		return nil, bad(n, "no W or no R")
	}
	H := l.Hidden
	rows := gates * H
	W, err := g.floats(ins[1].t)
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if ws := W.shape; len(ws) != 3 || ws[0] != dirs || ws[1] != rows || ws[2] < 1 {
		return nil, bad(n, "W %s has shape %v, want [%d][%d][input] for hidden_size %d", clip(n.GetInput()[1]), ws, dirs, rows, H)
	}
	l.Input = W.shape[2]
	R, err := g.floats(ins[2].t)
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if rs := R.shape; !slices.Equal(rs, []int{dirs, rows, H}) {
		return nil, bad(n, "R %s has shape %v, want [%d][%d][%d]", clip(n.GetInput()[2]), rs, dirs, rows, H)
	}
	var B *stored
	if len(ins) > 3 && ins[3] != nil {
		if B, err = g.floats(ins[3].t); err != nil {
			return nil, nodeErr(n, err)
		}
		if bs := B.shape; !slices.Equal(bs, []int{dirs, 2 * rows}) {
			return nil, bad(n, "B %s has shape %v, want [%d][%d]", clip(n.GetInput()[3]), bs, dirs, 2*rows)
		}
	}
	// PyTorch's block b of the gates is ONNX's block src[b].
	src := []int{0}
	switch cell {
	case "lstm":
		src = []int{0, 2, 3, 1} // PyTorch i, f, g, o from ONNX i, o, f, c
	case "gru":
		src = []int{1, 0, 2} // PyTorch r, z, n from ONNX z, r, h
	}
	for d := range dirs {
		w := Weights{
			Wih: W.gates(int64(d*rows*l.Input), src, H, l.Input),
			Whh: R.gates(int64(d*rows*H), src, H, H),
		}
		if B != nil {
			w.Bih = B.gates(int64(d*2*rows), src, H, 1)
			w.Bhh = B.gates(int64(d*2*rows+rows), src, H, 1)
		} else {
			w.Bih, w.Bhh = zeros("bias_ih", rows), zeros("bias_hh", rows)
		}
		l.Dirs = append(l.Dirs, w)
	}
	return l, nil
}

// clipList summarises a list of names from the file.
func clipList(v []string) string {
	var out []string
	for i, s := range v {
		if i == 4 {
			out = append(out, "...")
			break
		}
		out = append(out, clip(s))
	}
	return strings.Join(out, ", ")
}
