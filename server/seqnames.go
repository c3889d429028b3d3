package server

import (
	"fmt"
	"slices"
	"strings"

	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/server/api"
)

// seqNames are the names a sequence model's input and outputs are served
// under: rnnserve's own (tokens or features; logits, probs, top_k,
// top_k_probs, output, hidden, cell), or those of its spec's io section,
// an exported model's own names and layout.
type seqNames struct {
	input     string
	timeMajor bool                 // the input and per-step outputs are [T, B, ...]
	outputs   map[string]outputDef // by served name
	order     []string             // served names in metadata order
	defaults  []string             // what a request that names no output gets
	custom    bool                 // names from the spec's io
}

// outputDef is what a served output holds.
type outputDef struct {
	kind string // logits | probs | top_k | top_k_probs | output | hidden | cell | none
	rows bool   // a per-step output with time and batch flattened into rows
	// torch lays hidden or cell out as PyTorch's h_n, [n, B, H] for the
	// picked states (Join: [B, n*H]), instead of rnnserve's [B, layers*dirs, H].
	torch  bool
	states []int // h_n indices (layer*dirs + direction), with torch
	join   bool
	// perSequence: a head output of a model whose head reads h_n or
	// the last step, one row per sequence ([B, V]) instead of per step.
	perSequence bool
}

// perStep reports whether the output has a time axis.
func (d outputDef) perStep() bool {
	switch d.kind {
	case "logits", "probs", "top_k", "top_k_probs":
		return !d.perSequence
	case "output":
		return true
	}
	return false
}

func (d outputDef) head() bool {
	switch d.kind {
	case "logits", "probs", "top_k", "top_k_probs":
		return true
	}
	return false
}

// newSeqNames gives a network its served names: the spec's io when it has
// one, else rnnserve's.
func newSeqNames(net *rnn.Network, io *models.IO) *seqNames {
	s := &seqNames{outputs: map[string]outputDef{}}
	add := func(name string, d outputDef) {
		if _, taken := s.outputs[name]; !taken {
			d.perSequence = d.head() && net.HeadInput != rnn.HeadEveryStep
			s.outputs[name] = d
			s.order = append(s.order, name)
		}
	}
	if io == nil {
		s.input = map[bool]string{true: "tokens", false: "features"}[net.Vocab > 0]
		if net.HeadOut > 0 {
			for _, k := range []string{"logits", "probs", "top_k", "top_k_probs"} {
				add(k, outputDef{kind: k})
			}
			s.defaults = []string{"logits"}
		} else {
			s.defaults = []string{"output"}
		}
		add("output", outputDef{kind: "output"})
		add("hidden", outputDef{kind: "hidden"})
		if net.HasCell() {
			add("cell", outputDef{kind: "cell"})
		}
		return s
	}
	s.input, s.timeMajor, s.custom = io.Input, io.TimeMajor, true
	for _, o := range io.Outputs {
		d := outputDef{kind: o.Value, rows: o.Rows, join: o.Join, torch: true, states: o.States}
		switch o.Value {
		case "head":
			d.kind = "logits"
		case "h_n":
			d.kind = "hidden"
		case "c_n":
			d.kind = "cell"
		}
		if (d.kind == "hidden" || d.kind == "cell") && len(d.states) == 0 {
			d.states = make([]int, stateCount(net))
			for i := range d.states {
				d.states[i] = i
			}
		}
		add(o.Name, d)
		if d.kind != "none" {
			s.defaults = append(s.defaults, o.Name)
		}
	}
	// rnnserve's probabilities and top k, unless the model's own names
	// take them.
	if net.HeadOut > 0 {
		for _, k := range []string{"probs", "top_k", "top_k_probs"} {
			add(k, outputDef{kind: k})
		}
	}
	return s
}

// batchFirst reports whether every served tensor has the batch as its
// first axis (rnnserve's own names always do).
func (s *seqNames) batchFirst() bool {
	if s.timeMajor {
		return false
	}
	for _, d := range s.outputs {
		if d.rows || d.torch && !d.join && (d.kind == "hidden" || d.kind == "cell") {
			return false
		}
	}
	return true
}

// known lists the served output names for an error message.
func (s *seqNames) known() string {
	var names []string
	for _, n := range s.order {
		if s.outputs[n].kind != "none" {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

// stateCount is the length of h_n's first axis: layers times directions.
func stateCount(n *rnn.Network) int {
	c := 0
	for _, dirs := range n.Layers {
		c += len(dirs)
	}
	return c
}

// toBatchFirst turns a time-major input tensor [T, B, ...] into the
// batch-first one the engine takes, in a copy.
func toBatchFirst(t *Tensor) *Tensor {
	if len(t.Shape) < 2 {
		return t
	}
	T, B := int(t.Shape[0]), int(t.Shape[1])
	u := *t
	u.Shape = slices.Clone(t.Shape)
	u.Shape[0], u.Shape[1] = t.Shape[1], t.Shape[0]
	if t.Int64 != nil {
		u.Int64 = swapAxes(t.Int64, T, B, len(t.Int64)/max(T*B, 1))
	}
	if t.Float32 != nil {
		u.Float32 = swapAxes(t.Float32, T, B, len(t.Float32)/max(T*B, 1))
	}
	return &u
}

// swapAxes turns [a][b][x] into [b][a][x].
func swapAxes[E any](v []E, a, b, x int) []E {
	out := make([]E, len(v))
	for i := range a {
		for j := range b {
			copy(out[(j*a+i)*x:(j*a+i+1)*x], v[(i*b+j)*x:(i*b+j+1)*x])
		}
	}
	return out
}

// lay gives a per-step output [B, S, X], built batch-first, the served
// layout: [S, B, X] time-major, and time and batch flattened into rows
// when the output is rows.
func (s *seqNames) lay(d outputDef, o OutputTensor) OutputTensor {
	B, S, X := int(o.Shape[0]), int(o.Shape[1]), int(o.Shape[2])
	if s.timeMajor {
		o.Shape = []int64{int64(S), int64(B), int64(X)}
		switch {
		case B == 1 || S == 1: // the same elements in the same order
		case o.Int64 != nil:
			o.Int64 = swapAxes(o.Int64, B, S, X)
		default:
			o.Float32 = swapAxes(o.Float32, B, S, X)
		}
	}
	if d.rows {
		o.Shape = []int64{o.Shape[0] * o.Shape[1], o.Shape[2]}
	}
	return o
}

// torchStates builds a PyTorch-laid-out h_n or c_n from the rows' states:
// the picked entries stacked [n, B, H], or joined [B, n*H].
func torchStates(n *rnn.Network, name string, d outputDef, res []rowResult) (OutputTensor, error) {
	cell := d.kind == "cell"
	// Where each h_n entry starts in a row's state, and its width.
	var off, width []int
	h, c := 0, 0
	for _, dirs := range n.Layers {
		for _, l := range dirs {
			if cell {
				if l.Cell == rnn.LSTM {
					off, width = append(off, c), append(width, l.Hidden)
					c += l.Hidden
				} else {
					off, width = append(off, -1), append(width, 0)
				}
			} else {
				off, width = append(off, h), append(width, l.Out())
			}
			h += l.Out()
		}
	}
	B := len(res)
	total := 0
	for _, j := range d.states {
		if j < 0 || j >= len(off) || off[j] < 0 {
			return OutputTensor{}, fmt.Errorf("server: output %q: state %d is not one of the model's", name, j)
		}
		total += width[j]
	}
	row := func(rr rowResult, j int) []float32 {
		if cell {
			return rr.cn[off[j] : off[j]+width[j]]
		}
		return rr.hn[off[j] : off[j]+width[j]]
	}
	f := make([]float32, 0, B*total)
	if d.join {
		for _, rr := range res {
			for _, j := range d.states {
				f = append(f, row(rr, j)...)
			}
		}
		return OutputTensor{Name: name, Shape: []int64{int64(B), int64(total)}, Datatype: "FP32", Float32: f}, nil
	}
	for _, j := range d.states {
		for _, rr := range res {
			f = append(f, row(rr, j)...)
		}
	}
	H := 0
	if len(d.states) > 0 {
		H = width[d.states[0]]
	}
	return OutputTensor{Name: name, Shape: []int64{int64(len(d.states)), int64(B), int64(H)}, Datatype: "FP32", Float32: f}, nil
}

// metadata describes the served input (and lengths) and outputs.
func (s *seqNames) metadata(n *rnn.Network) (inputs, outputs []api.TensorMetadata) {
	bt := "[B, T"
	if s.timeMajor {
		bt = "[T, B"
	}
	if n.Vocab > 0 {
		inputs = append(inputs, api.TensorMetadata{Name: s.input, Datatype: "INT64", Shape: []int64{-1, -1}, Doc: fmt.Sprintf("token ids %s] in [0, %d)", bt, n.Vocab)})
	} else {
		inputs = append(inputs, api.TensorMetadata{Name: s.input, Datatype: "FP32", Shape: []int64{-1, -1, int64(n.Input)}, Doc: fmt.Sprintf("feature vectors %s, input_size]", bt)})
	}
	inputs = append(inputs, api.TensorMetadata{Name: "lengths", Datatype: "INT64", Shape: []int64{-1},
		Doc: "optional [B]: each row's real steps in 1..T, any order; steps past a row's length are padding (zero output, the head of zero), as pack_padded_sequence gives"})
	for _, name := range s.order {
		d := s.outputs[name]
		if d.kind == "none" {
			continue
		}
		md := api.TensorMetadata{Name: name, Datatype: "FP32", Doc: outputNames[d.kind]}
		width := int64(-1)
		switch d.kind {
		case "logits", "probs":
			width = int64(n.HeadOut)
		case "output":
			width = int64(n.OutputWidth())
		case "top_k":
			md.Datatype = "INT64"
		}
		switch {
		case d.perSequence:
			md.Shape = []int64{-1, width}
			md.Doc = strings.Replace(md.Doc, ", T, ", ", ", 1) + fmt.Sprintf(" (one row per sequence: the head reads %v)", n.HeadInput)
		case d.perStep() && d.rows:
			md.Shape = []int64{-1, width}
		case d.perStep():
			md.Shape = []int64{-1, -1, width}
		case d.torch:
			md.Shape = torchStateShape(n, d)
		default:
			md.Shape = append([]int64{-1}, stateShape(n, d.kind == "cell")...)
		}
		if s.custom {
			md.Doc = customDoc(d, bt)
			if d.perSequence {
				md.Doc = strings.Replace(customDoc(d, "[B"), ", V]", ", V] (no time axis)", 1) + fmt.Sprintf(": the head reads %v", n.HeadInput)
			}
		}
		outputs = append(outputs, md)
	}
	return inputs, outputs
}

// customDoc describes an output served under an exported model's name.
func customDoc(d outputDef, bt string) string {
	switch {
	case d.kind == "logits" && d.rows:
		return fmt.Sprintf("FP32 %s] flattened to rows: the head's output (after the model's activation)", bt)
	case d.kind == "logits":
		return fmt.Sprintf("FP32 %s, V]: the head's output (after the model's activation)", bt)
	case d.kind == "output" && d.rows:
		return fmt.Sprintf("FP32 %s] flattened to rows: the last layer's output at each step", bt)
	case d.kind == "output":
		return fmt.Sprintf("FP32 %s, W]: the last layer's output at each step", bt)
	case d.kind == "probs":
		return fmt.Sprintf("FP32 %s, V]: next-token probabilities", bt)
	case d.kind == "top_k":
		return fmt.Sprintf("INT64 %s, k]: the k most likely ids (parameter k, default 5)", bt)
	case d.kind == "top_k_probs":
		return fmt.Sprintf("FP32 %s, k]: their probabilities", bt)
	}
	what := map[string]string{"hidden": "final hidden states", "cell": "final cell states"}[d.kind]
	if d.join {
		return fmt.Sprintf("FP32 [B, n*H]: %s %v of h_n's first axis (layer*dirs + direction), joined along the features", what, d.states)
	}
	return fmt.Sprintf("FP32 [n, B, H]: %s %v of h_n's first axis (layer*dirs + direction), as PyTorch lays them out", what, d.states)
}

// torchStateShape is the metadata shape of a PyTorch-laid-out state output.
func torchStateShape(n *rnn.Network, d outputDef) []int64 {
	var width []int64
	for _, dirs := range n.Layers {
		for _, l := range dirs {
			if d.kind == "cell" {
				width = append(width, int64(l.Hidden))
			} else {
				width = append(width, int64(l.Out()))
			}
		}
	}
	total := int64(0)
	for _, j := range d.states {
		if j >= 0 && j < len(width) {
			total += width[j]
		}
	}
	if d.join {
		return []int64{-1, total}
	}
	H := int64(-1)
	if len(d.states) > 0 && d.states[0] >= 0 && d.states[0] < len(width) {
		H = width[d.states[0]]
	}
	return []int64{int64(len(d.states)), -1, H}
}
