package onnx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

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
	// ErrLimit means a file over one of the package's limits (MaxNodes,
	// MaxMessages, the decoding budget, ...), named in the message.
	ErrLimit = errors.New("onnx: over a limit")
)

// NodeError says which node of the graph is not understood and why.
type NodeError struct {
	Node, Op string
	Why      string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("onnx: unsupported graph: node %s (%s): %s", clip(e.Node), clipShort(e.Op), e.Why)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *NodeError) Is(target error) bool { return target == ErrUnsupported }

// Model is the recurrent model found in an ONNX graph, its weights in
// PyTorch's layout (row-major, PyTorch's gate orders); and the graph's
// input and output names with what each output holds.
//
// Each weight is a tensor of the dtype the file stores (F32, F64, F16 or
// BF16) whose elements are still in the file: reading it (Float32sInto,
// Float32s) reads them from there, in PyTorch's layout, so the files
// given to ReadAt and its Opener must stay readable until the weights
// have been read.
type Model struct {
	Input     int                 // features per step (the embedding width with an embedding)
	Vocab     int                 // 0: float features in
	Embedding *safetensors.Tensor // [Vocab][Input]; nil without an embedding
	Layers    []Layer             // one per LSTM/GRU/RNN node, bottom first
	HeadOut   int                 // 0: no head
	HeadW     *safetensors.Tensor // [HeadOut][last layer's Dirs*Hidden]
	HeadB     *safetensors.Tensor // [HeadOut]; nil for a head without bias
	// HeadInput is where the head reads, as the graph shows it:
	// "every_step", "last_step" or "h_n" (rnn.ParseHeadInput's names);
	// "" without a head.
	HeadInput string
	// Activation is "none", "softmax" or "log_softmax".
	Activation string
	// BatchFirst is true when the graph takes and gives batch-major
	// tensors (an exported batch_first=True module); the weights are the
	// same either way.
	BatchFirst bool
	// InputName is the graph's input (token ids or features).
	InputName string
	// Outputs are the graph's outputs, in its order.
	Outputs []Output
}

// Output is one graph output and what it holds, in the terms of the
// server's named outputs (models.Output).
type Output struct {
	Name string
	// Value is "head" (the head's output after the activation), "output"
	// (the last layer's output at each step), "h_n" or "c_n" (final
	// states), or "none": a value the engine does not compute (an
	// intermediate one, a shape, a constant).
	Value string
	// Rows: a per-step value flattened to [T*B, X] (out.reshape(-1, X)).
	Rows bool
	// States are the entries of h_n or c_n (layer*dirs + direction);
	// Join concatenates them along the features ([B, n*H]) instead of
	// stacking them ([n, B, H]).
	States []int
	Join   bool
}

// Layer is one ONNX LSTM, GRU or RNN node.
type Layer struct {
	Cell          string // lstm | gru | rnn_tanh | rnn_relu
	Input, Hidden int
	Bidirectional bool
	Dirs          []Weights // forward, then reverse
}

// Weights of one direction, as PyTorch's weight_ih [gates*Hidden][Input],
// weight_hh [gates*Hidden][Hidden], bias_ih and bias_hh [gates*Hidden]
// (zeros where the node has no B).
type Weights struct {
	Wih, Whh, Bih, Bhh *safetensors.Tensor
}

// maxDepth bounds message nesting while decoding; onnxpb's messages nest
// at most six deep (ModelProto, GraphProto, NodeProto, AttributeProto,
// TensorProto, StringStringEntryProto), so deeper input is not ONNX.
const maxDepth = 16

// Read is ReadAt of a model in memory, whose external data files open
// returns whole (nil refuses external data).
func Read(data []byte, open func(location string) ([]byte, error)) (*Model, error) {
	var o Opener
	if open != nil {
		o = func(loc string) (io.ReaderAt, int64, error) {
			b, err := open(loc)
			return bytes.NewReader(b), int64(len(b)), err
		}
	}
	return ReadAt(bytes.NewReader(data), int64(len(data)), o)
}

// ReadAt reads the ONNX model of size bytes in r and finds the recurrent
// model in its graph; its weights are left where they are stored, to be
// read once, straight into the network (see Model). open opens external
// data files, by location relative to the model's folder; nil refuses
// external data.
//
// Everything the file claims is bounded before it is acted on: the file's
// size (MaxModelBytes), the messages it holds and the memory decoding
// them takes (MaxNodes, MaxMessages, DecodeSlack and DecodeFactor, counted
// by a walk of the wire format that reads the file front to back through
// a 64 KiB window and leaves tensor data in the file), each tensor's
// elements (MaxElements), and the bytes of tensor data the graph uses,
// which cannot exceed twice the bytes of the file and its external data.
// The graph is walked once, in topological order (sorted in linear time
// when the file's order is not one); a cycle is refused, so no walk can
// loop.
func ReadAt(r io.ReaderAt, size int64, open Opener) (*Model, error) {
	return readAt(r, size, open, elideMin)
}

// readAt is ReadAt leaving tensor data of more than elide bytes in the
// file.
func readAt(r io.ReaderAt, size int64, open Opener, elide int64) (*Model, error) {
	if f := sniff.DetectAt(r, size); f != sniff.ONNX && f != sniff.Unknown {
		return nil, fmt.Errorf("%w: this is %v", ErrFormat, f)
	}
	if size > MaxModelBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than MaxModelBytes = %d (protobuf's limit; larger weights go in external data)", ErrLimit, size, MaxModelBytes)
	}
	shallow, payloads, _, err := walk(r, size, elide)
	if err != nil {
		return nil, err
	}
	var mp pb.ModelProto
	// The walk has dropped every field onnxpb does not declare; what
	// decoding keeps as unknown are its marks of the data it left in the
	// file (and values of enums onnxpb does not know).
	if err := (proto.UnmarshalOptions{RecursionLimit: maxDepth}).Unmarshal(shallow, &mp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if mp.GetGraph() == nil || len(mp.GetGraph().GetNode()) == 0 {
		return nil, fmt.Errorf("%w: no graph", ErrFormat)
	}
	g := newGraph(newTensors(r, size, payloads, open))
	for _, op := range mp.GetOpsetImport() {
		if d := op.GetDomain(); d != "" && d != "ai.onnx" {
			return nil, fmt.Errorf("%w: operator set of domain %s (only the default ONNX operators are read)", ErrUnsupported, clip(d))
		}
		g.opset = op.GetVersion()
	}
	return g.read(mp.GetGraph())
}

// clip quotes a name from the file for a message, cut to 64 bytes.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// clipShort is clip for operator names and the like, unquoted.
func clipShort(s string) string {
	if len(s) <= 32 && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == utf8.RuneError }) {
		return s
	}
	return clip(s)
}

// ints64 summarises a list of integers from the file: at most 8 shown.
func ints64(v []int64) string {
	if len(v) <= 8 {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%v... (%d values)", v[:8], len(v))
}
