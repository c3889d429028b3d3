package onnx

import (
	"fmt"
	"slices"

	pb "rnnserve/models/onnx/onnxpb"
)

// The graph is read in one pass over its nodes, in their order, giving
// each value a meaning from the meanings of the values a node reads: a
// constant, a shape computation, zeros, a value on the model's data path
// (with its layout), or recurrent layers' final states. ONNX lists nodes
// in topological order, and a node that reads a value no earlier node
// made is refused, so the pass sees every value made before it is read
// and cannot loop, whatever the file says.

// kind is what a value is to the model.
type kind uint8

const (
	kConst kind = iota + 1 // an initializer or a Constant's value
	kShape                 // computed from shapes and constants only
	kZeros                 // all zeros: the exporter's initial states
	kData                  // on the model's data path
	kState                 // final states of recurrent layers
	kOther                 // a value with no use here (a Dropout mask)
)

// axis labels of a data value's layout.
type axis uint8

const (
	axA axis = iota + 1 // first axis of the input: time or batch, told by the first recurrent node
	axB                 // second axis of the input
	axF                 // features
	axD                 // directions (a recurrent node's Y)
	axH                 // hidden units per direction (a recurrent node's Y)
	axR                 // the input's two axes flattened into rows
)

// stage is how far along the model a data value is.
type stage uint8

const (
	stIn   stage = iota + 1 // the graph input: token ids or features
	stEmb                   // embedded token ids
	stRNN                   // a recurrent layer's output
	stHead                  // the head's product
	stBias                  // the head's product plus its bias
	stAct                   // the head's activation
)

// value is the meaning of one named value of the graph.
type value struct {
	kind kind
	t    *pb.TensorProto // kConst
	// kData
	stage stage
	seq   int    // which step of the model's chain it comes from (see graph.seq)
	axes  []axis // layout
	outer axis   // for axR rows: which input axis varies slowest
	width int    // size of the last axis when known, else 0
	dirs  int    // a recurrent node's Y: its directions
	last  bool   // the time axis was taken at its last step
	// kState: entries of h_n (layer*dirs + direction), stacked [n, B, H]
	// or joined along the features [B, sum of widths].
	cell   bool // c rather than h
	blocks []int
	joined bool
}

type graph struct {
	*tensors
	// opset is the version of the default operator set the model
	// imports (0 if none), which decides what a Softmax without an axis
	// means.
	opset int64
	vals  map[string]*value
	m     *Model
	input string
	elem  pb.TensorProto_DataType
	time  axis // axA or axB once a recurrent node has said which is time
	// seq counts the steps of the model's chain (embedding, each
	// recurrent node, head, bias, activation); a step must read the
	// value the previous one made (directly or through layout glue).
	seq    int
	rnnSeq int   // seq of the last recurrent node
	blocks []int // h_n width of each entry so far
	cells  []bool
	// joinedStates counts the final states the graph's Concats join.
	joinedStates int
}

// maxJoinedStates bounds the final states all the Concats of a graph
// join together: as many as the graph's outputs (maxOutputs) can name,
// 4096 each (models.IO's limit), where an exporter joins each layer's
// once or twice.
const maxJoinedStates = maxOutputs * 4096

func newGraph(ts *tensors) *graph {
	return &graph{tensors: ts, vals: map[string]*value{}, m: &Model{Activation: "none"}}
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

// nodeErr puts a node's name in front of an error about its inputs,
// keeping the error's sentinel.
func nodeErr(n *pb.NodeProto, err error) error {
	return fmt.Errorf("node %s (%s): %w", clip(nodeName(n)), clipShort(n.GetOpType()), err)
}

func attr(n *pb.NodeProto, name string) *pb.AttributeProto {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// attrInt is an INT attribute's value, or def when absent.
func attrInt(n *pb.NodeProto, name string, def int64) int64 {
	if a := attr(n, name); a != nil {
		return a.GetI()
	}
	return def
}

// shapeOps compute shapes, indices and the like from shapes and
// constants; they never see the model's data.
var shapeOps = []string{"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul",
	"Div", "Equal", "Where", "Range", "Reshape", "ConstantOfShape", "Expand", "Identity", "Transpose", "Tile", "Size"}

// zeroOps keep zeros zeros when their first input is zeros and the
// others are shapes or constants.
var zeroOps = []string{"Slice", "Gather", "Squeeze", "Unsqueeze", "Expand", "Reshape", "Identity", "Cast", "Tile", "Transpose"}

// read walks the graph and returns the model it holds.
func (g *graph) read(gp *pb.GraphProto) (*Model, error) {
	for _, t := range gp.GetInitializer() {
		g.vals[t.GetName()] = &value{kind: kConst, t: t}
	}
	var inputs []*pb.ValueInfoProto
	for _, in := range gp.GetInput() {
		if _, isConst := g.vals[in.GetName()]; !isConst {
			inputs = append(inputs, in)
		}
	}
	if len(inputs) != 1 {
		var names []string
		for i, in := range inputs {
			if i == 8 {
				names = append(names, fmt.Sprintf("... (%d inputs)", len(inputs)))
				break
			}
			names = append(names, clip(in.GetName()))
		}
		return nil, fmt.Errorf("%w: graph inputs %v: want exactly one (token ids or features; initial states given as inputs are not supported, export with zero initial states)", ErrUnsupported, names)
	}
	in := inputs[0]
	g.input = in.GetName()
	g.m.InputName = g.input
	g.elem = pb.TensorProto_DataType(in.GetType().GetTensorType().GetElemType())
	v := &value{kind: kData, stage: stIn}
	switch g.elem {
	case pb.TensorProto_INT64, pb.TensorProto_INT32:
		v.axes = []axis{axA, axB}
	case pb.TensorProto_FLOAT:
		v.axes = []axis{axA, axB, axF}
	default:
		return nil, fmt.Errorf("%w: graph input %s of type %v, want int64 token ids or float features", ErrUnsupported, clip(g.input), g.elem)
	}
	g.vals[g.input] = v
	nodes, err := g.sorted(gp.GetNode())
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if err := g.node(n); err != nil {
			return nil, err
		}
	}
	if len(g.m.Layers) == 0 {
		return nil, fmt.Errorf("%w: no LSTM, GRU or RNN node reads the graph's input", ErrUnsupported)
	}
	if err := g.outputs(gp); err != nil {
		return nil, err
	}
	return g.m, nil
}

// sorted returns the nodes in an order where each comes after the nodes
// that make its inputs: their own order when it is one (ONNX requires
// it, and exporters write it), else one found by Kahn's algorithm, in
// time linear in the nodes and their inputs. A node that reads a value
// nothing makes, a value made twice, or a cycle is refused.
func (g *graph) sorted(nodes []*pb.NodeProto) ([]*pb.NodeProto, error) {
	maker := map[string]int{} // value -> the node that makes it
	for i, n := range nodes {
		for _, o := range n.GetOutput() {
			if o == "" {
				continue
			}
			if _, ok := g.vals[o]; ok {
				return nil, bad(n, "makes %s, which is the graph's input or an initializer", clip(o))
			}
			if _, dup := maker[o]; dup {
				return nil, bad(n, "makes %s, which node %s also makes", clip(o), clip(nodeName(nodes[maker[o]])))
			}
			maker[o] = i
		}
	}
	inOrder := true
	waits := make([]int, len(nodes)) // inputs made by nodes not yet placed
	readers := map[int][]int{}       // node -> the nodes that read what it makes
	for i, n := range nodes {
		for _, in := range n.GetInput() {
			if in == "" {
				continue
			}
			j, made := maker[in]
			if !made {
				if _, ok := g.vals[in]; !ok {
					return nil, bad(n, "reads %s, which nothing in the graph makes", clip(in))
				}
				continue
			}
			if j >= i {
				inOrder = false
			}
			waits[i]++
			readers[j] = append(readers[j], i)
		}
	}
	if inOrder {
		return nodes, nil
	}
	out := make([]*pb.NodeProto, 0, len(nodes))
	var ready []int
	for i := range nodes {
		if waits[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		out = append(out, nodes[i])
		for _, r := range readers[i] {
			if waits[r]--; waits[r] == 0 {
				ready = append(ready, r)
			}
		}
	}
	if len(out) < len(nodes) {
		for i, w := range waits {
			if w > 0 {
				return nil, bad(nodes[i], "is on a cycle: it reads, through other nodes, a value it makes")
			}
		}
	}
	return out, nil
}

// node gives meanings to a node's outputs, or refuses it.
func (g *graph) node(n *pb.NodeProto) error {
	if d := n.GetDomain(); d != "" && d != "ai.onnx" {
		return bad(n, "operator of domain %s", clip(d))
	}
	op := n.GetOpType()
	ins := make([]*value, len(n.GetInput()))
	data, state, zeros, other := false, false, false, false
	for i, name := range n.GetInput() {
		if name == "" {
			continue
		}
		v, ok := g.vals[name]
		if !ok {
			return bad(n, "reads %s before it is made", clip(name)) // sorted prevents it
		}
		ins[i] = v
		switch v.kind {
		case kData:
			data = true
		case kState:
			state = true
		case kZeros:
			zeros = true
		case kOther:
			other = true
		}
	}
	if len(n.GetOutput()) == 0 {
		return bad(n, "no outputs")
	}
	outs := make([]*value, len(n.GetOutput()))
	var err error
	switch {
	case other:
		return bad(n, "reads a value that has no meaning in a recurrent model (a Dropout mask)")
	case op == "Constant":
		a := attr(n, "value")
		if a == nil || a.GetT() == nil || len(outs) != 1 {
			return bad(n, "a Constant without a tensor value")
		}
		outs[0] = &value{kind: kConst, t: a.GetT()}
	case op == "Shape" || op == "Size":
		for i := range outs {
			outs[i] = &value{kind: kShape}
		}
	case data || state:
		outs, err = g.dataNode(n, ins, len(outs))
	case zeros && slices.Contains(zeroOps, op) && ins[0] != nil && ins[0].kind == kZeros:
		for i := range outs {
			outs[i] = &value{kind: kZeros}
		}
	case zeros && op == "Concat":
		for _, v := range ins {
			if v == nil || v.kind != kZeros {
				return bad(n, "joins zeros with other values")
			}
		}
		outs[0] = &value{kind: kZeros}
	case zeros:
		return bad(n, "reads zeros (an initial state) in a way not understood")
	case op == "ConstantOfShape":
		var t *pb.TensorProto
		if a := attr(n, "value"); a != nil {
			t = a.GetT()
		}
		outs[0] = &value{kind: kShape}
		if isZero(t) {
			outs[0].kind = kZeros
		}
	case slices.Contains(shapeOps, op):
		for i := range outs {
			outs[i] = &value{kind: kShape}
		}
	case len(n.GetInput()) == 0:
		return bad(n, "operator %s is not one of those this package reads", clipShort(op))
	default:
		return bad(n, "operator %s on constants is not one the exporter writes for shapes", clipShort(op))
	}
	if err != nil {
		return err
	}
	for i, name := range n.GetOutput() {
		if name == "" {
			continue
		}
		if _, dup := g.vals[name]; dup {
			return bad(n, "makes %s, which the graph already has", clip(name))
		}
		if outs[i] == nil {
			return bad(n, "output %d has no meaning", i)
		}
		g.vals[name] = outs[i]
	}
	return nil
}

// axisOf resolves a possibly negative axis of a rank-r value.
func axisOf(a int64, r int) (int, bool) {
	if a < 0 {
		a += int64(r)
	}
	return int(a), a >= 0 && a < int64(r)
}

// constInts is the value of a small integer constant input.
func constInts(v *value) ([]int64, bool) {
	if v == nil || v.kind != kConst {
		return nil, false
	}
	return ints(v.t)
}

// scalarIndex is a Gather's index: a 0-D integer constant (keepdim false)
// or a 1-D one of one value (keepdim true).
func scalarIndex(v *value) (idx int64, keep, ok bool) {
	x, ok := constInts(v)
	if !ok || len(x) != 1 {
		return 0, false, false
	}
	switch len(v.t.GetDims()) {
	case 0:
		return x[0], false, true
	case 1:
		return x[0], true, true
	}
	return 0, false, false
}

// dataNode reads a node one of whose inputs is on the data path or final
// states.
func (g *graph) dataNode(n *pb.NodeProto, ins []*value, nout int) ([]*value, error) {
	op := n.GetOpType()
	outs := make([]*value, nout)
	one := func(v *value) ([]*value, error) {
		if nout != 1 {
			return nil, bad(n, "%d outputs, want 1", nout)
		}
		outs[0] = v
		return outs, nil
	}
	x := ins[0]
	if x == nil || (x.kind != kData && x.kind != kState) {
		// The data is not the first input: only the embedding's Gather and
		// the bias's Add read it elsewhere.
		switch {
		case op == "Gather" && len(ins) == 2 && ins[1] != nil && ins[1].kind == kData:
			return g.embedding(n, ins)
		case op == "Add" && len(ins) == 2 && ins[1] != nil && ins[1].kind == kData:
			return g.bias(n, ins[1], ins[0])
		}
		return nil, bad(n, "reads the model's data as input %d, in a way not understood", dataIndex(ins))
	}
	for i, v := range ins[1:] {
		if v != nil && (v.kind == kData || v.kind == kState) && op != "Concat" {
			return nil, bad(n, "reads the model's data twice (inputs 0 and %d): the model branches", i+1)
		}
	}
	switch op {
	case "Identity":
		return one(x)
	case "Dropout":
		if x.kind != kData {
			break
		}
		outs[0] = x
		for i := 1; i < nout; i++ {
			outs[i] = &value{kind: kOther}
		}
		return outs, nil
	case "Cast":
		// int32 token ids cast to int64 before the embedding.
		to := pb.TensorProto_DataType(attrInt(n, "to", 0))
		if x.kind == kData && x.stage == stIn && len(x.axes) == 2 && (to == pb.TensorProto_INT64 || to == pb.TensorProto_INT32) {
			return one(x)
		}
		return nil, bad(n, "casts the model's data (only token ids to int64 or int32 are understood)")
	case "Gather":
		return g.gather(n, x, ins)
	case "Transpose":
		return g.transpose(n, x)
	case "Squeeze", "Unsqueeze":
		return g.squeeze(n, x, ins)
	case "Reshape":
		return g.reshape(n, x, ins)
	case "Concat":
		return g.concat(n, ins)
	case "LSTM", "GRU", "RNN":
		return g.recurrent(n, x, ins, nout)
	case "MatMul", "Gemm":
		return g.head(n, x, ins)
	case "Add":
		if len(ins) != 2 {
			return nil, bad(n, "an Add of %d values", len(ins))
		}
		return g.bias(n, x, ins[1])
	case "Softmax", "LogSoftmax":
		if x.kind != kData || x.seq != g.seq || (x.stage != stHead && x.stage != stBias) {
			return nil, bad(n, "a %s that does not follow the head", op)
		}
		// Before opset 13 the op flattens the axes from its axis on, 1 by
		// default, into one: the last axis alone only where that is it.
		axis, rank := int64(-1), int64(len(x.axes))
		if g.opset < 13 {
			axis = 1
		}
		if a := attr(n, "axis"); a != nil {
			axis = a.GetI()
		}
		if axis < 0 {
			axis += rank
		}
		if axis != rank-1 {
			return nil, bad(n, "axis %d of %d (operator set %d), want the last", axis, rank, g.opset)
		}
		g.m.Activation = map[string]string{"Softmax": "softmax", "LogSoftmax": "log_softmax"}[op]
		g.seq++
		v := *x
		v.stage, v.seq = stAct, g.seq
		return one(&v)
	}
	if x.kind == kState {
		return nil, bad(n, "reads the final states %s of recurrent nodes: only gathering them (Concat, Gather, Squeeze, Unsqueeze) and a linear head on the last layer's are understood", clip(n.GetInput()[0]))
	}
	return nil, bad(n, "operator %s on the data path is not part of an embedding + LSTM/GRU/RNN + linear head model", clipShort(op))
}

func dataIndex(ins []*value) int {
	for i, v := range ins {
		if v != nil && (v.kind == kData || v.kind == kState) {
			return i
		}
	}
	return -1
}

// embedding: Gather(table, ids) on axis 0.
func (g *graph) embedding(n *pb.NodeProto, ins []*value) ([]*value, error) {
	ids := ins[1]
	if ids.stage != stIn || len(ids.axes) != 2 || g.m.Vocab != 0 || len(n.GetOutput()) != 1 {
		return nil, bad(n, "a Gather that is not the embedding lookup of token ids")
	}
	if a := attrInt(n, "axis", 0); a != 0 {
		return nil, bad(n, "axis %d, want 0", a)
	}
	if ins[0] == nil || ins[0].kind != kConst {
		return nil, bad(n, "the table %s is not a constant", clip(n.GetInput()[0]))
	}
	w, err := g.floats(ins[0].t)
	if err != nil {
		return nil, nodeErr(n, err)
	}
	s := w.shape
	if len(s) != 2 || s[0] < 1 || s[1] < 1 {
		return nil, bad(n, "the table %s has shape %v, want [vocab][width]", clip(n.GetInput()[0]), s)
	}
	g.m.Vocab, g.m.Input, g.m.Embedding = s[0], s[1], w.whole(s)
	g.seq++
	return []*value{{kind: kData, stage: stEmb, seq: g.seq, axes: []axis{axA, axB, axF}, width: s[1]}}, nil
}

// gather: the last step of a per-step value (out[:, -1]), or entries of
// final states (h_n[-1]).
func (g *graph) gather(n *pb.NodeProto, x *value, ins []*value) ([]*value, error) {
	if len(ins) != 2 || len(n.GetOutput()) != 1 {
		return nil, bad(n, "a Gather of the model's data with %d inputs", len(ins))
	}
	idx, keep, ok := scalarIndex(ins[1])
	if !ok {
		return nil, bad(n, "gathers the model's data at indices that are not one constant")
	}
	ax := attrInt(n, "axis", 0)
	if x.kind == kState {
		if x.joined || ax != 0 && ax != -3 {
			return nil, bad(n, "gathers final states on axis %d; only h_n's first axis (layers*dirs) is understood", ax)
		}
		k, ok := axisOf(idx, len(x.blocks))
		if !ok {
			return nil, bad(n, "index %d of final states with %d entries", idx, len(x.blocks))
		}
		return []*value{{kind: kState, cell: x.cell, blocks: []int{x.blocks[k]}, joined: !keep}}, nil
	}
	a, ok := axisOf(ax, len(x.axes))
	if !ok || keep || idx != -1 || x.stage != stRNN || x.last || len(x.axes) != 3 || x.axes[a] != g.time || x.axes[2] != axF {
		return nil, bad(n, "gathers index %d on axis %d of the model's data; only the last step of the last layer's output (out[:, -1] or out[-1]) is understood", idx, ax)
	}
	v := *x
	v.axes = slices.Delete(slices.Clone(x.axes), a, a+1)
	v.last = true
	return []*value{&v}, nil
}

func (g *graph) transpose(n *pb.NodeProto, x *value) ([]*value, error) {
	perm := attr(n, "perm")
	if perm == nil || x.kind != kData || len(n.GetOutput()) != 1 {
		return nil, bad(n, "a Transpose of the model's data without perm")
	}
	p := perm.GetInts()
	v := *x
	v.axes = slices.Clone(x.axes)
	switch {
	case len(v.axes) == 3 && slices.Equal(p, []int64{1, 0, 2}):
		v.axes[0], v.axes[1] = v.axes[1], v.axes[0]
	case len(v.axes) == 4 && slices.Equal(p, []int64{0, 2, 1, 3}) && v.axes[1] == axD:
		v.axes[1], v.axes[2] = v.axes[2], v.axes[1]
	default:
		return nil, bad(n, "perm %s on a value laid out %v: only batch-first swaps and the join of directions are understood", ints64(p), v.axes)
	}
	return []*value{&v}, nil
}

func (g *graph) squeeze(n *pb.NodeProto, x *value, ins []*value) ([]*value, error) {
	var axes []int64
	if a := attr(n, "axes"); a != nil {
		axes = a.GetInts()
	} else if len(ins) == 2 {
		var ok bool
		if axes, ok = constInts(ins[1]); !ok {
			return nil, bad(n, "axes not given as a constant")
		}
	}
	if len(axes) != 1 || len(n.GetOutput()) != 1 {
		return nil, bad(n, "axes %s: one axis is understood", ints64(axes))
	}
	if x.kind == kState {
		switch {
		case n.GetOpType() == "Squeeze" && !x.joined && len(x.blocks) == 1 && (axes[0] == 0 || axes[0] == -3):
			return []*value{{kind: kState, cell: x.cell, blocks: x.blocks, joined: true}}, nil
		case n.GetOpType() == "Unsqueeze" && x.joined && len(x.blocks) == 1 && (axes[0] == 0 || axes[0] == -3):
			return []*value{{kind: kState, cell: x.cell, blocks: x.blocks}}, nil
		}
		return nil, bad(n, "%s on axis %d of final states is not understood", n.GetOpType(), axes[0])
	}
	ax, ok := axisOf(axes[0], len(x.axes))
	if n.GetOpType() != "Squeeze" || !ok || x.axes[ax] != axD || x.dirs != 1 {
		return nil, bad(n, "%s on axis %d of a value laid out %v: only the direction axis of a one-direction layer's output is understood", n.GetOpType(), axes[0], x.axes)
	}
	v := *x
	v.axes = slices.Delete(slices.Clone(x.axes), ax, ax+1)
	v.axes[len(v.axes)-1] = axF
	return []*value{&v}, nil
}

func (g *graph) reshape(n *pb.NodeProto, x *value, ins []*value) ([]*value, error) {
	if x.kind != kData || len(ins) != 2 || len(n.GetOutput()) != 1 {
		return nil, bad(n, "a Reshape of final states or without a shape")
	}
	shape, ok := constInts(ins[1])
	if !ok {
		return nil, bad(n, "the shape %s is not a constant", clip(n.GetInput()[1]))
	}
	v := *x
	switch {
	case len(x.axes) == 4 && x.axes[2] == axD && x.axes[3] == axH && slices.Equal(shape, []int64{0, 0, -1}):
		v.axes = []axis{x.axes[0], x.axes[1], axF}
		v.width *= x.dirs
		return []*value{&v}, nil
	case len(x.axes) == 3 && x.axes[2] == axF && x.stage == stRNN && !x.last && len(shape) == 2 && shape[0] == -1 && shape[1] == int64(x.width):
		// out.reshape(-1, F) before a Linear head, which the exporter
		// then writes as Gemm: the rows keep their order, and the head is
		// applied row by row either way.
		v.axes, v.outer = []axis{axR, axF}, x.axes[0]
		return []*value{&v}, nil
	}
	return nil, bad(n, "shape %s on a value laid out %v: only joining the directions of a layer's output ([0, 0, -1]) and flattening it to rows ([-1, %d]) are understood", ints64(shape), x.axes, x.width)
}

// concat joins final states: on axis 0 (h_n's layers*dirs) or along the
// features of single entries (cat(h_n[-2], h_n[-1], dim=1)).
func (g *graph) concat(n *pb.NodeProto, ins []*value) ([]*value, error) {
	if len(n.GetOutput()) != 1 || len(ins) == 0 {
		return nil, bad(n, "a Concat of %d values", len(ins))
	}
	first := ins[0]
	total := 0
	for i, v := range ins {
		if v == nil || v.kind != kState || v.cell != first.cell || v.joined != first.joined || len(v.blocks) == 0 {
			return nil, bad(n, "input %d is not final states like input 0: only final states are joined", i)
		}
		if !v.joined && g.blocks[v.blocks[0]] != g.blocks[first.blocks[0]] {
			return nil, bad(n, "stacks final states of widths %d and %d", g.blocks[v.blocks[0]], g.blocks[first.blocks[0]])
		}
		total += len(v.blocks)
	}
	if total > 4096 {
		return nil, bad(n, "joins %d final states", total)
	}
	// Each Concat makes a list of the entries it joins: a chain of them
	// would make 32 KiB of lists per node of a few bytes.
	if g.joinedStates += total; g.joinedStates > maxJoinedStates {
		return nil, nodeErr(n, fmt.Errorf("%w: the graph's Concats join more than maxJoinedStates = %d final states in all", ErrLimit, maxJoinedStates))
	}
	blocks := make([]int, 0, total)
	for _, v := range ins {
		blocks = append(blocks, v.blocks...)
	}
	ax := attrInt(n, "axis", 0)
	switch {
	case !first.joined && (ax == 0 || ax == -3):
	case first.joined && (ax == 1 || ax == -1):
	default:
		return nil, bad(n, "joins final states on axis %d: only h_n's first axis, or the features of single entries, are understood", ax)
	}
	return []*value{{kind: kState, cell: first.cell, blocks: blocks, joined: first.joined}}, nil
}

// recurrent reads an LSTM, GRU or RNN node: one layer.
func (g *graph) recurrent(n *pb.NodeProto, x *value, ins []*value, nout int) ([]*value, error) {
	if x.kind != kData || x.stage > stRNN {
		return nil, bad(n, "a recurrent node after the head, or on final states")
	}
	if x.seq != g.seq {
		return nil, bad(n, "reads %s, which an earlier part of the model has already read: the model branches", clip(n.GetInput()[0]))
	}
	if x.last || len(x.axes) != 3 || x.axes[2] != axF {
		return nil, bad(n, "a recurrent node whose input is laid out %v (want time, batch, features)", x.axes)
	}
	if g.time == 0 {
		g.time = x.axes[0]
		g.m.BatchFirst = g.time == axB
	} else if x.axes[0] != g.time {
		return nil, bad(n, "its input has time and batch swapped relative to the first recurrent node")
	}
	for i, v := range ins {
		switch {
		case i == 0 || v == nil:
		case i <= 3 && v.kind != kConst:
			return nil, bad(n, "input %d (%s) is not a constant", i, clip(n.GetInput()[i]))
		case i == 4:
			return nil, bad(n, "sequence_lens %s: per-row lengths are not supported in an ONNX graph", clip(n.GetInput()[i]))
		case i == 7:
			return nil, bad(n, "peephole weights %s (PyTorch's LSTM has none)", clip(n.GetInput()[i]))
		case (i == 5 || i == 6) && v.kind != kZeros:
			return nil, bad(n, "initial state %s is not zeros (export the module without h0/c0)", clip(n.GetInput()[i]))
		case i > 7:
			return nil, bad(n, "%d inputs", len(ins))
		}
	}
	l, err := g.layer(n, ins)
	if err != nil {
		return nil, err
	}
	if x.stage == stIn && g.elem == pb.TensorProto_FLOAT {
		g.m.Input = l.Input
	} else if l.Input != x.width {
		return nil, bad(n, "input width %d, but the value it reads is %d wide", l.Input, x.width)
	}
	base := len(g.blocks)
	var h, c []int
	for d := range l.Dirs {
		h = append(h, base+d)
		g.blocks = append(g.blocks, l.Hidden)
		g.cells = append(g.cells, l.Cell == "lstm")
		if l.Cell == "lstm" {
			c = append(c, base+d)
		}
	}
	g.m.Layers = append(g.m.Layers, *l)
	g.seq++
	g.rnnSeq = g.seq
	if nout > 3 || nout > 2 && l.Cell != "lstm" {
		return nil, bad(n, "%d outputs", nout)
	}
	outs := make([]*value, nout)
	if nout > 0 {
		outs[0] = &value{kind: kData, stage: stRNN, seq: g.seq, axes: []axis{x.axes[0], axD, x.axes[1], axH}, width: l.Hidden, dirs: len(l.Dirs)}
	}
	if nout > 1 {
		outs[1] = &value{kind: kState, blocks: h}
	}
	if nout > 2 {
		outs[2] = &value{kind: kState, cell: true, blocks: c}
	}
	return outs, nil
}

// allBlocks are every h_n entry, in order.
func (g *graph) allBlocks() []int {
	b := make([]int, len(g.blocks))
	for i := range b {
		b[i] = i
	}
	return b
}

// lastBlocks are the h_n entries of the last layer.
func (g *graph) lastBlocks() []int {
	l := g.m.Layers[len(g.m.Layers)-1]
	var b []int
	for d := range l.Dirs {
		b = append(b, len(g.blocks)-len(l.Dirs)+d)
	}
	return b
}

// head reads MatMul(x, W) or Gemm(x, W, b): the linear head on the last
// layer's output at every step, at its last step, or on its final states.
func (g *graph) head(n *pb.NodeProto, x *value, ins []*value) ([]*value, error) {
	op := n.GetOpType()
	if g.m.HeadOut != 0 || g.seq != g.rnnSeq || len(n.GetOutput()) != 1 || len(ins) < 2 || len(ins) > 3 || ins[1] == nil || ins[1].kind != kConst {
		return nil, bad(n, "a %s that is not the head after the recurrent layers, with a constant weight", op)
	}
	var out value
	switch {
	case x.kind == kState:
		if x.cell || !x.joined || !slices.Equal(x.blocks, g.lastBlocks()) {
			return nil, bad(n, "the head reads final states %v of h_n (c_n: %v); only the last layer's, h_n[-1] or torch.cat((h_n[-2], h_n[-1]), dim=1), are understood (last layer: %v)",
				x.blocks, x.cell, g.lastBlocks())
		}
		g.m.HeadInput = "h_n"
		out = value{axes: []axis{g.batch(), axF}}
	case x.seq != g.rnnSeq || x.stage != stRNN || x.axes[len(x.axes)-1] != axF:
		return nil, bad(n, "the head reads a value laid out %v that is not the last layer's output", x.axes)
	case x.last:
		g.m.HeadInput = "last_step"
		out = value{axes: slices.Clone(x.axes)}
	default:
		g.m.HeadInput = "every_step"
		out = value{axes: slices.Clone(x.axes), outer: x.outer}
	}
	width := g.lastWidth()
	if op == "Gemm" && len(out.axes) != 2 {
		return nil, bad(n, "a Gemm on a value laid out %v (want 2-D)", x.axes)
	}
	w, err := g.floats(ins[1].t)
	if err != nil {
		return nil, nodeErr(n, err)
	}
	s := w.shape
	if len(s) != 2 {
		return nil, bad(n, "the weight %s has shape %v, want a matrix", clip(n.GetInput()[1]), s)
	}
	transB := false
	if op == "Gemm" {
		if attrInt(n, "transA", 0) != 0 {
			return nil, bad(n, "transA")
		}
		for _, k := range []string{"alpha", "beta"} {
			if a := attr(n, k); a != nil && a.GetF() != 1 {
				return nil, bad(n, "%s %v, want 1", k, a.GetF())
			}
		}
		transB = attrInt(n, "transB", 0) == 1
	}
	if transB {
		if s[1] != width {
			return nil, bad(n, "weight %v for input width %d", s, width)
		}
		g.m.HeadOut, g.m.HeadW = s[0], w.whole(s)
	} else {
		if s[0] != width {
			return nil, bad(n, "weight %v for input width %d", s, width)
		}
		g.m.HeadOut, g.m.HeadW = s[1], w.transposed()
	}
	if g.m.HeadOut < 1 {
		return nil, bad(n, "a head of %d outputs", g.m.HeadOut)
	}
	g.seq++
	out.kind, out.stage, out.seq, out.width = kData, stHead, g.seq, g.m.HeadOut
	if op == "Gemm" && len(ins) > 2 && ins[2] != nil {
		if err := g.headBias(n, ins[2]); err != nil {
			return nil, err
		}
		out.stage = stBias
	}
	return []*value{&out}, nil
}

// batch is the batch axis's label.
func (g *graph) batch() axis {
	if g.time == axA {
		return axB
	}
	return axA
}

// lastWidth is the width of the last layer's output, its directions joined.
func (g *graph) lastWidth() int {
	l := g.m.Layers[len(g.m.Layers)-1]
	return len(l.Dirs) * l.Hidden
}

// bias reads Add(head, b) or Add(b, head).
func (g *graph) bias(n *pb.NodeProto, x, b *value) ([]*value, error) {
	if x.kind != kData || x.stage != stHead || x.seq != g.seq || len(n.GetOutput()) != 1 {
		return nil, bad(n, "an Add that is not the head's bias")
	}
	if err := g.headBias(n, b); err != nil {
		return nil, err
	}
	v := *x
	v.stage = stBias
	return []*value{&v}, nil
}

func (g *graph) headBias(n *pb.NodeProto, b *value) error {
	if b == nil || b.kind != kConst || g.m.HeadB != nil {
		return bad(n, "the head's bias is not a constant")
	}
	v, err := g.floats(b.t)
	if err != nil {
		return nodeErr(n, err)
	}
	if s := v.shape; len(s) != 1 || s[0] != g.m.HeadOut {
		return bad(n, "the bias has shape %v, want [%d]", s, g.m.HeadOut)
	}
	g.m.HeadB = v.whole(v.shape)
	return nil
}

// outputs says what each graph output holds.
func (g *graph) outputs(gp *pb.GraphProto) error {
	if len(gp.GetOutput()) > maxOutputs {
		return fmt.Errorf("%w: %d graph outputs, limit %d", ErrUnsupported, len(gp.GetOutput()), maxOutputs)
	}
	seen := map[string]bool{g.input: true}
	timeMajor := g.time == axA
	for _, o := range gp.GetOutput() {
		name := o.GetName()
		if name == "" || len(name) > 256 {
			return fmt.Errorf("%w: a graph output named %s (want 1 to 256 bytes)", ErrUnsupported, clip(name))
		}
		if seen[name] {
			if name == g.input {
				continue // the input handed back: nothing to compute
			}
			return fmt.Errorf("%w: two graph outputs named %s", ErrUnsupported, clip(name))
		}
		seen[name] = true
		v, ok := g.vals[name]
		if !ok {
			return fmt.Errorf("%w: graph output %s is made by no node", ErrUnsupported, clip(name))
		}
		out := Output{Name: name, Value: "none"}
		switch {
		case v.kind == kState:
			out.Value, out.States, out.Join = "h_n", v.blocks, v.joined
			if v.cell {
				out.Value = "c_n"
			}
			if !v.joined && slices.Equal(v.blocks, g.allBlocks()) {
				out.States = nil // all of h_n (or c_n, every layer an LSTM), in order
			}
		case v.kind != kData:
		case v.seq == g.seq && v.stage >= stHead:
			// The head's result, after whatever the model ends with.
			if g.m.HeadInput != "every_step" || g.perStep(v, timeMajor, &out) {
				out.Value = "head"
			}
		case v.seq == g.rnnSeq && v.stage == stRNN && !v.last && v.axes[len(v.axes)-1] == axF:
			if g.perStep(v, timeMajor, &out) {
				out.Value = "output"
			}
		}
		g.m.Outputs = append(g.m.Outputs, out)
	}
	return nil
}

// maxOutputs bounds the graph's outputs (models.IO's limit).
const maxOutputs = 256

// perStep reports whether a per-step value is laid out as the input is
// (time-major or batch-first, or flattened to rows in that order), and
// marks rows.
func (g *graph) perStep(v *value, timeMajor bool, out *Output) bool {
	switch len(v.axes) {
	case 3:
		return (v.axes[0] == g.time) == timeMajor
	case 2:
		if v.axes[0] != axR {
			return false
		}
		out.Rows = true
		return (v.outer == g.time) == timeMajor
	}
	return false
}
