package dre

import (
	"rnnserve/internal/f32"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// WorkingSet is the working set of T steps of batch B of a network, from
// its shape alone, in bytes (see the package documentation for the
// formula).
type WorkingSet struct {
	Weights      int64 `json:"weights_bytes"`      // parameters except the embedding, at their stored size
	Embedding    int64 `json:"embedding_bytes"`    // vocab × input × 4
	Intermediate int64 `json:"intermediate_bytes"` // input and layer output sequences, final states, head output
	Total        int64 `json:"total_bytes"`
}

// NewWorkingSet is the working set of these parts, Total their sum: the
// one place a WorkingSet is made.
func NewWorkingSet(weights, embedding, intermediate int64) WorkingSet {
	return WorkingSet{Weights: weights, Embedding: embedding, Intermediate: intermediate,
		Total: weights + embedding + intermediate}
}

// Plus is the working set of w and o together (an encoder and its
// decoder, say).
func (w WorkingSet) Plus(o WorkingSet) WorkingSet {
	return NewWorkingSet(w.Weights+o.Weights, w.Embedding+o.Embedding, w.Intermediate+o.Intermediate)
}

// WorkingSetOf computes the working set of T steps of batch B of net,
// every parameter float32.
func WorkingSetOf(net *rnn.Network, T, B int) WorkingSet {
	return WorkingSetOfPrecision(net, T, B, schedule.F32)
}

// WorkingSetOfPrecision is WorkingSetOf for a network whose recurrent
// weights (W_ih, W_hh and W_hr of every layer and direction) are stored
// at precision prec, as a Partitioned program stores them: 2 bytes each
// for schedule.BF16; for schedule.Int8 1 byte each (rows rounded up to
// four bytes) plus 8 bytes a row for its scale and sum (int8Bytes).
// Biases, embedding and head stay 4 bytes.
func WorkingSetOfPrecision(net *rnn.Network, T, B int, prec schedule.Precision) WorkingSet {
	tb := int64(T) * int64(B)
	emb := 4 * int64(net.Vocab) * int64(net.Input)
	values := tb*int64(net.Input) + int64(net.HeadRows(T, B))*int64(net.HeadOut)
	for _, dirs := range net.Layers {
		l, d := dirs[0], int64(len(dirs))
		state := int64(l.Out())
		if l.Cell == rnn.LSTM {
			state += int64(l.Hidden)
		}
		values += tb*d*int64(l.Out()) + d*int64(B)*state
	}
	weights := net.WeightBytes() - emb
	switch prec {
	case schedule.BF16:
		weights -= 2 * recurrentElems(net)
	case schedule.Int8:
		weights += int8Bytes(net) - 4*recurrentElems(net)
	}
	return NewWorkingSet(weights, emb, 4*values)
}

// int8Bytes is what an int8 program's products read of every layer's
// W_ih, W_hh and W_hr: each row's values rounded up to a multiple of four
// bytes, plus its scale and the sum the VNNI kernel subtracts (8 bytes).
func int8Bytes(net *rnn.Network) int64 {
	var b int64
	row := func(cols int) int64 { return int64(f32.I8Stride(cols) + 8) }
	for _, dirs := range net.Layers {
		for _, l := range dirs {
			rows := int64(l.Rows())
			b += rows*row(l.Input) + rows*row(l.Out()) + int64(l.Proj)*row(l.Hidden)
		}
	}
	return b
}

// recurrentElems counts the elements of every layer's W_ih, W_hh and W_hr.
func recurrentElems(net *rnn.Network) int64 {
	var e int64
	for _, dirs := range net.Layers {
		for _, l := range dirs {
			rows := int64(l.Rows())
			e += rows*int64(l.Input) + rows*int64(l.Out()) + int64(l.Proj)*int64(l.Hidden)
		}
	}
	return e
}

// PlanBytes is the size of a plan's buffers by kind, in bytes: what the
// schedule actually allocates. Weights include the embedding.
type PlanBytes struct {
	Weights     int64 `json:"weights_bytes"`
	Inputs      int64 `json:"inputs_bytes"`
	Activations int64 `json:"activations_bytes"`
	Outputs     int64 `json:"outputs_bytes"`
	Total       int64 `json:"total_bytes"`
}

// PlanBytesOf sums the sizes of p's buffers by kind.
func PlanBytesOf(p *schedule.Plan) PlanBytes {
	pb := PlanBytes{
		Weights:     p.BufferBytes(schedule.KindWeight),
		Inputs:      p.BufferBytes(schedule.KindInput),
		Activations: p.BufferBytes(schedule.KindActivation),
		Outputs:     p.BufferBytes(schedule.KindOutput),
	}
	pb.Total = pb.Weights + pb.Inputs + pb.Activations + pb.Outputs
	return pb
}
