package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "rnnserve/models/onnx/onnxpb"
	"rnnserve/models/safetensors"
	"rnnserve/models/sniff"
)

// Errors returned by Read, wrapped with detail; test with errors.Is.
var (
	// ErrFormat means the input is not an ONNX model (the message says
	// what it is) or does not decode as one.
	ErrFormat = errors.New("onnx: not an ONNX model")
	// ErrUnsupported is matched by every *NodeError: a graph this package
	// does not recognise as a recurrent model it can serve.
	ErrUnsupported = errors.New("onnx: unsupported graph")
	// ErrExternalData means external tensor data that cannot be read: a
	// location outside the model's folder, a missing file, a bad range.
	ErrExternalData = errors.New("onnx: external data")
)

// NodeError says which node of the graph is not understood and why.
type NodeError struct {
	Node, Op string
	Why      string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("onnx: unsupported graph: node %q (%s): %s", e.Node, e.Op, e.Why)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *NodeError) Is(target error) bool { return target == ErrUnsupported }

// Model is the recurrent model found in an ONNX graph, in PyTorch's
// layout: row-major float32, PyTorch gate orders.
type Model struct {
	Input     int       // features per step (the embedding width with an embedding)
	Vocab     int       // 0: float features in
	Embedding []float32 // [Vocab][Input]
	Layers    []Layer   // one per LSTM/GRU node, bottom first
	HeadOut   int       // 0: no head
	HeadW     []float32 // [HeadOut][last layer's Dirs*Hidden]
	HeadB     []float32 // [HeadOut]; nil for a head without bias
	// Activation is "none", "softmax" or "log_softmax".
	Activation string
	// BatchFirst is true when the graph takes and gives batch-major
	// tensors (an exported batch_first=True module); the weights are the
	// same either way.
	BatchFirst bool
}

// Layer is one ONNX LSTM or GRU node.
type Layer struct {
	Cell          string // lstm | gru
	Input, Hidden int
	Bidirectional bool
	Dirs          []Weights // forward, then reverse
}

// Weights of one direction, as PyTorch's weight_ih, weight_hh, bias_ih,
// bias_hh.
type Weights struct {
	Wih, Whh, Bih, Bhh []float32
}

// MaxElements bounds one tensor of the graph.
const MaxElements = 1 << 32

// maxDepth bounds message nesting while decoding; onnxpb's messages nest
// at most six deep (ModelProto, GraphProto, NodeProto, AttributeProto,
// TensorProto, StringStringEntryProto), so deeper input is not ONNX.
const maxDepth = 16

// Read decodes a serialized ONNX model and finds the recurrent model in
// its graph. open returns the bytes of an external data file given its
// location relative to the model's folder; nil refuses external data.
func Read(data []byte, open func(location string) ([]byte, error)) (*Model, error) {
	if f := sniff.Detect(data); f != sniff.ONNX && f != sniff.Unknown {
		return nil, fmt.Errorf("%w: this is %v", ErrFormat, f)
	}
	var mp pb.ModelProto
	// Fields onnxpb does not declare are skipped, not kept.
	if err := (proto.UnmarshalOptions{DiscardUnknown: true, RecursionLimit: maxDepth}).Unmarshal(data, &mp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if mp.GetGraph() == nil || len(mp.GetGraph().GetNode()) == 0 {
		return nil, fmt.Errorf("%w: no graph", ErrFormat)
	}
	for _, op := range mp.GetOpsetImport() {
		if d := op.GetDomain(); d != "" && d != "ai.onnx" {
			return nil, fmt.Errorf("%w: operator set of domain %q (only the default ONNX operators are read)", ErrUnsupported, d)
		}
	}
	g := &graph{open: open, consts: map[string]*pb.TensorProto{}, producer: map[string]*pb.NodeProto{},
		consumers: map[string][]*pb.NodeProto{}, done: map[*pb.NodeProto]bool{}, cache: map[string][]float32{}}
	return g.walk(mp.GetGraph())
}

type graph struct {
	open      func(string) ([]byte, error)
	consts    map[string]*pb.TensorProto // initializers and Constant outputs
	producer  map[string]*pb.NodeProto
	consumers map[string][]*pb.NodeProto
	done      map[*pb.NodeProto]bool // nodes accounted for
	cache     map[string][]float32
	outputs   map[string]bool
}

func nodeName(n *pb.NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	if len(n.GetOutput()) > 0 {
		return n.GetOutput()[0]
	}
	return "?"
}

func bad(n *pb.NodeProto, format string, a ...any) error {
	return &NodeError{Node: nodeName(n), Op: n.GetOpType(), Why: fmt.Sprintf(format, a...)}
}

func attr(n *pb.NodeProto, name string) *pb.AttributeProto {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// floats decodes a tensor to float32, reading external data if needed.
func (g *graph) floats(name string) ([]float32, []int, error) {
	t, ok := g.consts[name]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q is not a constant tensor", ErrUnsupported, name)
	}
	shape := make([]int, len(t.GetDims()))
	n := 1
	for i, d := range t.GetDims() {
		if d < 0 || d > MaxElements || n > MaxElements/max(int(d), 1) {
			return nil, nil, fmt.Errorf("%w: tensor %q has dims %v", ErrUnsupported, name, t.GetDims())
		}
		shape[i] = int(d)
		n *= int(d)
	}
	if v, ok := g.cache[name]; ok {
		return v, shape, nil
	}
	raw := t.GetRawData()
	if t.GetDataLocation() == pb.TensorProto_EXTERNAL {
		var err error
		if raw, err = g.external(t); err != nil {
			return nil, nil, err
		}
	}
	var dt safetensors.DType
	switch pb.TensorProto_DataType(t.GetDataType()) {
	case pb.TensorProto_FLOAT:
		dt = safetensors.F32
		if raw == nil {
			if len(t.GetFloatData()) != n {
				return nil, nil, fmt.Errorf("%w: tensor %q has %d floats for dims %v", ErrUnsupported, name, len(t.GetFloatData()), shape)
			}
			return t.GetFloatData(), shape, nil
		}
	case pb.TensorProto_DOUBLE:
		dt = safetensors.F64
		if raw == nil {
			raw = make([]byte, 0, 8*len(t.GetDoubleData()))
			for _, v := range t.GetDoubleData() {
				raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(v))
			}
		}
	case pb.TensorProto_FLOAT16, pb.TensorProto_BFLOAT16:
		dt = safetensors.F16
		if pb.TensorProto_DataType(t.GetDataType()) == pb.TensorProto_BFLOAT16 {
			dt = safetensors.BF16
		}
		if raw == nil {
			for _, v := range t.GetInt32Data() {
				raw = binary.LittleEndian.AppendUint16(raw, uint16(v))
			}
		}
	default:
		return nil, nil, fmt.Errorf("%w: tensor %q has data type %v, want a float type", ErrUnsupported, name, pb.TensorProto_DataType(t.GetDataType()))
	}
	st := safetensors.Tensor{Name: name, DType: dt, Shape: shape, Data: raw}
	v, err := st.Float32s()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: tensor %q: %w", ErrUnsupported, name, err)
	}
	g.cache[name] = v
	return v, shape, nil
}

// ints decodes an integer constant (shapes, axes, permutations).
func (g *graph) ints(name string) ([]int64, bool) {
	t, ok := g.consts[name]
	if !ok || t.GetDataLocation() == pb.TensorProto_EXTERNAL {
		return nil, false
	}
	switch pb.TensorProto_DataType(t.GetDataType()) {
	case pb.TensorProto_INT64:
		if raw := t.GetRawData(); raw != nil {
			if len(raw)%8 != 0 {
				return nil, false
			}
			out := make([]int64, len(raw)/8)
			for i := range out {
				out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			return out, true
		}
		return t.GetInt64Data(), true
	case pb.TensorProto_INT32:
		var out []int64
		if raw := t.GetRawData(); raw != nil {
			if len(raw)%4 != 0 {
				return nil, false
			}
			for i := 0; i < len(raw); i += 4 {
				out = append(out, int64(int32(binary.LittleEndian.Uint32(raw[i:]))))
			}
			return out, true
		}
		for _, v := range t.GetInt32Data() {
			out = append(out, int64(v))
		}
		return out, true
	}
	return nil, false
}

// external reads a tensor's external data through g.open, only from a
// local path inside the model's folder.
func (g *graph) external(t *pb.TensorProto) ([]byte, error) {
	var loc string
	var offset, length int64 = 0, -1
	for _, e := range t.GetExternalData() {
		switch e.GetKey() {
		case "location":
			loc = e.GetValue()
		case "offset", "length":
			var v int64
			if _, err := fmt.Sscan(e.GetValue(), &v); err != nil || v < 0 {
				return nil, fmt.Errorf("%w: tensor %q: %s %q", ErrExternalData, t.GetName(), e.GetKey(), e.GetValue())
			}
			if e.GetKey() == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if loc == "" || !filepath.IsLocal(loc) || !fs.ValidPath(filepath.ToSlash(loc)) || strings.Contains(loc, `\`) {
		return nil, fmt.Errorf("%w: tensor %q: location %q is outside the model's folder (only relative paths below it are read)", ErrExternalData, t.GetName(), loc)
	}
	if g.open == nil {
		return nil, fmt.Errorf("%w: tensor %q is stored in %q, and no folder was given to read it from", ErrExternalData, t.GetName(), loc)
	}
	data, err := g.open(filepath.ToSlash(loc))
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %w", ErrExternalData, t.GetName(), err)
	}
	if offset > int64(len(data)) || length > int64(len(data))-offset {
		return nil, fmt.Errorf("%w: tensor %q: offset %d and length %d outside %q (%d bytes)", ErrExternalData, t.GetName(), offset, length, loc, len(data))
	}
	if length < 0 {
		length = int64(len(data)) - offset
	}
	return data[offset : offset+length], nil
}

// index records producers, consumers, constants and graph outputs.
func (g *graph) index(gp *pb.GraphProto) error {
	for _, t := range gp.GetInitializer() {
		g.consts[t.GetName()] = t
	}
	g.outputs = map[string]bool{}
	for _, o := range gp.GetOutput() {
		g.outputs[o.GetName()] = true
	}
	for _, n := range gp.GetNode() {
		if n.GetDomain() != "" && n.GetDomain() != "ai.onnx" {
			return bad(n, "operator of domain %q", n.GetDomain())
		}
		for _, o := range n.GetOutput() {
			if o == "" {
				continue
			}
			if _, dup := g.producer[o]; dup {
				return bad(n, "value %q has two producers", o)
			}
			g.producer[o] = n
		}
		for _, in := range n.GetInput() {
			if in != "" {
				g.consumers[in] = append(g.consumers[in], n)
			}
		}
		if n.GetOpType() == "Constant" {
			a := attr(n, "value")
			if a == nil || a.GetT() == nil || len(n.GetOutput()) != 1 {
				return bad(n, "a Constant without a tensor value")
			}
			t := a.GetT()
			g.consts[n.GetOutput()[0]] = t
			g.done[n] = true
		}
	}
	return nil
}

// axis labels of the main value's layout.
const (
	axA = "a" // first axis of the input: time or batch, told by the first RNN
	axB = "b" // second axis of the input
	axF = "F" // features
	axD = "D" // directions (an RNN's Y)
	axH = "H" // hidden units per direction (an RNN's Y)
	axR = "R" // time and batch flattened into rows
)

func (g *graph) walk(gp *pb.GraphProto) (*Model, error) {
	if err := g.index(gp); err != nil {
		return nil, err
	}
	var inputs []*pb.ValueInfoProto
	for _, in := range gp.GetInput() {
		if _, isConst := g.consts[in.GetName()]; !isConst {
			inputs = append(inputs, in)
		}
	}
	if len(inputs) != 1 {
		var names []string
		for _, in := range inputs {
			names = append(names, in.GetName())
		}
		return nil, fmt.Errorf("%w: graph inputs %q: want exactly one (token ids or features; initial states given as inputs are not supported, export with zero initial states)", ErrUnsupported, names)
	}
	in := inputs[0]
	m := &Model{Activation: "none"}
	elem := pb.TensorProto_DataType(in.GetType().GetTensorType().GetElemType())
	cur := in.GetName()
	var layout []string
	switch elem {
	case pb.TensorProto_INT64, pb.TensorProto_INT32:
		layout = []string{axA, axB}
	case pb.TensorProto_FLOAT:
		layout = []string{axA, axB, axF}
	default:
		return nil, fmt.Errorf("%w: graph input %q of type %v, want int64 token ids or float features", ErrUnsupported, cur, elem)
	}
	timeAxis := "" // axA or axB once an RNN has said which is time
	stage := 0     // 0 before embedding, 1 RNN layers, 2 head added, 3 activation
	width := 0     // feature width of cur
	lastFromRNN := false
	for {
		var next *pb.NodeProto
		for _, c := range g.consumers[cur] {
			if c.GetOpType() == "Shape" {
				g.done[c] = true // shape computations are checked in sweep
				continue
			}
			if next != nil {
				return nil, bad(c, "the value %q also feeds node %q: the model branches", cur, nodeName(next))
			}
			next = c
		}
		if next == nil {
			if !g.outputs[cur] {
				return nil, fmt.Errorf("%w: the data path ends at %q, which is not a graph output", ErrUnsupported, cur)
			}
			break
		}
		n := next
		g.done[n] = true
		ins, outs := n.GetInput(), n.GetOutput()
		if len(outs) == 0 {
			return nil, bad(n, "no output")
		}
		mainIn := slices.Index(ins, cur)
		switch op := n.GetOpType(); op {
		case "Identity", "Dropout":
			if mainIn != 0 {
				return nil, bad(n, "unexpected input position")
			}
		case "Gather":
			if stage != 0 || elem == pb.TensorProto_FLOAT || mainIn != 1 || len(ins) != 2 {
				return nil, bad(n, "a Gather that is not the embedding lookup of token ids")
			}
			if a := attr(n, "axis"); a != nil && a.GetI() != 0 {
				return nil, bad(n, "axis %d, want 0", a.GetI())
			}
			w, shape, err := g.floats(ins[0])
			if errors.Is(err, ErrExternalData) {
				return nil, nodeErr(n, err)
			}
			if err != nil || len(shape) != 2 {
				return nil, bad(n, "the table %q is not a constant 2-D float tensor (%v)", ins[0], err)
			}
			m.Vocab, m.Input, m.Embedding = shape[0], shape[1], w
			width = shape[1]
			layout = append(layout, axF)
			stage = 1
		case "Transpose":
			perm := attr(n, "perm")
			if perm == nil || mainIn != 0 {
				return nil, bad(n, "a Transpose without perm")
			}
			p := perm.GetInts()
			switch {
			case len(layout) == 3 && slices.Equal(p, []int64{1, 0, 2}):
				layout[0], layout[1] = layout[1], layout[0]
			case len(layout) == 4 && slices.Equal(p, []int64{0, 2, 1, 3}) && layout[1] == axD:
				layout[1], layout[2] = layout[2], layout[1]
			default:
				return nil, bad(n, "perm %v on a value laid out %v: only batch-first swaps and the join of RNN directions are understood", p, layout)
			}
		case "Squeeze":
			axes, ok := squeezeAxes(g, n)
			if !ok || len(axes) != 1 || mainIn != 0 {
				return nil, bad(n, "squeeze axes not given as one constant")
			}
			ax := int(axes[0])
			if ax < 0 {
				ax += len(layout)
			}
			if ax < 0 || ax >= len(layout) || layout[ax] != axD || m.Layers[len(m.Layers)-1].Bidirectional {
				return nil, bad(n, "squeezes axis %d of a value laid out %v: only the direction axis of a one-direction RNN output is understood", axes[0], layout)
			}
			layout = slices.Delete(layout, ax, ax+1)
			layout[len(layout)-1] = axF
		case "Reshape":
			shape, ok := g.ints(ins[1])
			if !ok || mainIn != 0 {
				return nil, bad(n, "the shape %q is not a constant", ins[1])
			}
			if len(layout) == 4 && layout[2] == axD && layout[3] == axH && slices.Equal(shape, []int64{0, 0, -1}) {
				layout = []string{layout[0], layout[1], axF}
				if m.Layers[len(m.Layers)-1].Bidirectional {
					width *= 2
				}
				break
			}
			// out.reshape(-1, F) before a Linear head, which the exporter
			// then writes as Gemm: the rows keep their order, and the head
			// is applied row by row either way.
			if len(layout) == 3 && layout[2] == axF && stage == 1 && len(shape) == 2 && shape[0] == -1 && shape[1] == int64(width) {
				layout = []string{axR, axF}
				break
			}
			return nil, bad(n, "shape %v on a value laid out %v: only joining the directions of an RNN output ([0, 0, -1]) and flattening it to rows ([-1, %d]) are understood", shape, layout, width)
		case "LSTM", "GRU":
			if mainIn != 0 || stage > 1 || len(layout) != 3 || layout[2] != axF {
				return nil, bad(n, "an RNN whose input is laid out %v (want time, batch, features)", layout)
			}
			if timeAxis == "" {
				timeAxis = layout[0]
				m.BatchFirst = timeAxis == axB
				if m.Input == 0 {
					m.Input = -1 // set from the weights below
				}
			} else if layout[0] != timeAxis {
				return nil, bad(n, "its input has time and batch swapped relative to the first RNN")
			}
			l, err := g.rnn(n)
			if err != nil {
				return nil, err
			}
			if m.Input == -1 {
				m.Input = l.Input
			} else if want := width; len(m.Layers) > 0 || m.Vocab > 0 {
				if l.Input != want {
					return nil, bad(n, "input width %d, but the value it reads is %d wide", l.Input, want)
				}
			}
			m.Layers = append(m.Layers, *l)
			width = l.Hidden
			layout = []string{layout[0], axD, layout[1], axH}
			stage = 1
			lastFromRNN = true
			if len(outs) > 0 {
				cur = outs[0]
			}
			if err := g.stateOutputs(n); err != nil {
				return nil, err
			}
			continue
		case "MatMul":
			if stage != 1 || !lastFromRNN || mainIn != 0 || layout[len(layout)-1] != axF {
				return nil, bad(n, "a MatMul that is not the head after the RNN layers")
			}
			w, shape, err := g.floats(ins[1])
			if errors.Is(err, ErrExternalData) {
				return nil, nodeErr(n, err)
			}
			if err != nil || len(shape) != 2 || shape[0] != width {
				return nil, bad(n, "the weight %q is not a constant [%d][out] float matrix (%v, %v)", ins[1], width, shape, err)
			}
			m.HeadOut, m.HeadW = shape[1], transpose(w, shape[0], shape[1])
			stage = 2
		case "Add":
			if stage != 2 || m.HeadB != nil || len(ins) != 2 {
				return nil, bad(n, "an Add that is not the head's bias")
			}
			b, shape, err := g.floats(ins[1-mainIn])
			if errors.Is(err, ErrExternalData) {
				return nil, nodeErr(n, err)
			}
			if err != nil || len(shape) != 1 || shape[0] != m.HeadOut {
				return nil, bad(n, "the bias %q is not a constant [%d] float vector", ins[1-mainIn], m.HeadOut)
			}
			m.HeadB = b
		case "Gemm":
			if stage != 1 || !lastFromRNN || mainIn != 0 || len(layout) != 2 {
				return nil, bad(n, "a Gemm that is not the head after the RNN layers (on a 2-D value)")
			}
			if a := attr(n, "transA"); a != nil && a.GetI() != 0 {
				return nil, bad(n, "transA")
			}
			for _, k := range []string{"alpha", "beta"} {
				if a := attr(n, k); a != nil && a.GetF() != 1 {
					return nil, bad(n, "%s %v, want 1", k, a.GetF())
				}
			}
			w, shape, err := g.floats(ins[1])
			if errors.Is(err, ErrExternalData) {
				return nil, nodeErr(n, err)
			}
			if err != nil || len(shape) != 2 {
				return nil, bad(n, "the weight %q is not a constant float matrix", ins[1])
			}
			if a := attr(n, "transB"); a != nil && a.GetI() == 1 {
				m.HeadOut, m.HeadW = shape[0], w
				if shape[1] != width {
					return nil, bad(n, "weight %v for input width %d", shape, width)
				}
			} else {
				if shape[0] != width {
					return nil, bad(n, "weight %v for input width %d", shape, width)
				}
				m.HeadOut, m.HeadW = shape[1], transpose(w, shape[0], shape[1])
			}
			if len(ins) > 2 && ins[2] != "" {
				b, bs, err := g.floats(ins[2])
				if errors.Is(err, ErrExternalData) {
					return nil, nodeErr(n, err)
				}
				if err != nil || len(bs) != 1 || bs[0] != m.HeadOut {
					return nil, bad(n, "the bias %q is not a constant [%d] float vector", ins[2], m.HeadOut)
				}
				m.HeadB = b
			}
			stage = 2
		case "Softmax", "LogSoftmax":
			if stage != 2 {
				return nil, bad(n, "a %s that does not follow the head", op)
			}
			if a := attr(n, "axis"); a != nil && a.GetI() != -1 && a.GetI() != int64(len(layout)-1) {
				return nil, bad(n, "axis %d, want the last", a.GetI())
			}
			m.Activation = map[string]string{"Softmax": "softmax", "LogSoftmax": "log_softmax"}[op]
			stage = 3
		default:
			return nil, bad(n, "operator %s on the data path is not part of an embedding + LSTM/GRU + linear head model", op)
		}
		if len(outs) != 1 && op(n) != "Dropout" {
			return nil, bad(n, "%d outputs", len(outs))
		}
		cur = outs[0]
		if op(n) != "Identity" && op(n) != "Dropout" {
			lastFromRNN = lastFromRNN && (op(n) == "Transpose" || op(n) == "Squeeze" || op(n) == "Reshape")
		}
	}
	if len(m.Layers) == 0 {
		return nil, fmt.Errorf("%w: no LSTM or GRU node on the data path", ErrUnsupported)
	}
	if !lastFromRNN && stage == 1 {
		return nil, fmt.Errorf("%w: the data path ends inside an RNN output's glue", ErrUnsupported)
	}
	if m.HeadW != nil && m.HeadOut == 0 {
		return nil, fmt.Errorf("%w: empty head", ErrUnsupported)
	}
	return m, g.sweep(gp)
}

func op(n *pb.NodeProto) string { return n.GetOpType() }

func squeezeAxes(g *graph, n *pb.NodeProto) ([]int64, bool) {
	if a := attr(n, "axes"); a != nil {
		return a.GetInts(), true
	}
	if ins := n.GetInput(); len(ins) == 2 {
		return g.ints(ins[1])
	}
	return nil, false
}

// transpose turns a [rows][cols] matrix into [cols][rows].
func transpose(w []float32, rows, cols int) []float32 {
	out := make([]float32, len(w))
	for i := range rows {
		for j := range cols {
			out[j*rows+i] = w[i*cols+j]
		}
	}
	return out
}
