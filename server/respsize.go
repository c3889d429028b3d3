package server

import (
	"fmt"
	"net/http"
	"time"

	"rnnserve/rnn"
	"rnnserve/server/internal/infer"
)

// Responses are sized before the model runs: a model, once it has
// decoded a request, lists the outputs it will compute with their shapes
// (an upper bound of each dimension), and Server.run turns them into the
// bytes of the response in the request's encoding (REST JSON, REST binary
// tensor data, gRPC raw or typed contents). A response over
// Options.MaxResponseBytes is refused (ErrResponseTooLarge) before any
// work; any other is charged to the request's share of the memory budget,
// as its body was, until it is written: its tensors twice (a model's
// per-row results and the assembled output) and its encoding twice (the
// buffer it is built in grows by doubling).

// Bytes an element takes at most, per encoding.
const (
	jsonFloatBytes    = 16 // "-1.2345678e-38," (strconv's shortest float32, 15) and a margin
	jsonIntBytes      = 21 // "-9223372036854775808,"
	typedIntBytes     = 10 // a varint
	classElementBytes = 72 // "value:index": %.6f of a float32 (at most 48), ':', an index, quotes
	outputOverhead    = 256
)

// responseBytes is the most bytes the encoding of outs takes, and the
// most their tensors take in memory, for request r.
func responseBytes(r *Request, outs []infer.PlannedOutput) (encoded, tensors int64) {
	for _, o := range outs {
		n := int64(1)
		for _, d := range o.Shape {
			n *= d
		}
		elem := int64(4)
		if o.Datatype == "INT64" {
			elem = 8
		}
		tensors += n * elem
		want := findOutput(r.Outputs, o.Name)
		binary := r.BinaryOutput
		if want != nil && want.Binary != nil {
			binary = *want.Binary
		}
		encoded += outputOverhead
		switch {
		case want != nil && want.Classification > 0:
			rows, last := int64(1), n
			if len(o.Shape) > 0 {
				last = o.Shape[len(o.Shape)-1]
				rows = n / max(last, 1)
			}
			k := rows * min(int64(want.Classification), last) // classify gives at most the last dimension
			tensors += k * classElementBytes
			encoded += k * classElementBytes
		case binary:
			encoded += n * elem
		case r.Protocol == protocolGRPC && o.Datatype == "INT64":
			encoded += n * typedIntBytes
		case r.Protocol == protocolGRPC:
			encoded += n * 4
		case o.Datatype == "INT64":
			encoded += n * jsonIntBytes
		default:
			encoded += n * jsonFloatBytes
		}
	}
	return encoded, tensors
}

// planResponse checks and charges the response to r of outputs outs.
func (s *Server) planResponse(r *Request, outs []infer.PlannedOutput) error {
	encoded, tensors := responseBytes(r, outs)
	if limit := s.opts.MaxResponseBytes; encoded > limit {
		return fmt.Errorf("%w: the response would take up to %d bytes %s, over max_response_bytes (%d): ask for fewer steps, rows or outputs (last_step, top_k, classification) or for binary data",
			ErrResponseTooLarge, encoded, encodingName(r), limit)
	}
	if r.Charge == nil {
		return nil
	}
	return r.Charge(2*tensors + 2*encoded)
}

// encodingName names r's response encoding for an error message.
func encodingName(r *Request) string {
	switch {
	case r.Protocol == protocolGRPC && r.BinaryOutput:
		return "as gRPC raw contents"
	case r.Protocol == protocolGRPC:
		return "as gRPC typed contents"
	case r.BinaryOutput:
		return "as binary tensor data"
	}
	return "as JSON"
}

// plannedOutputs are the outputs of a decoded request, shaped as encode
// shapes them (at most: a padded row counts its padding).
func (m *seqModel) plannedOutputs(in *seqInput) []infer.PlannedOutput {
	n := m.net
	B, T := int64(in.B), int64(in.T)
	var hidden, cell int64
	for _, dirs := range n.Layers {
		for _, l := range dirs {
			hidden += int64(l.Out())
			if l.Cell == rnn.LSTM {
				cell += int64(l.Hidden)
			}
		}
	}
	outs := make([]infer.PlannedOutput, 0, len(in.outputs))
	for _, o := range in.outputs {
		steps := T
		if o.last {
			steps = 1
		}
		p := infer.PlannedOutput{Name: o.name, Datatype: "FP32"}
		switch o.def.kind {
		case "logits", "probs", "top_k", "top_k_probs":
			last := int64(n.HeadOut)
			if o.def.kind == "top_k" || o.def.kind == "top_k_probs" {
				last = int64(o.k)
			}
			if o.def.kind == "top_k" {
				p.Datatype = "INT64"
			}
			if !o.def.perStep() {
				steps = 1
			}
			p.Shape = []int64{B, steps, last}
		case "output":
			p.Shape = []int64{B, steps, int64(n.OutputWidth())}
		case "cell":
			p.Shape = []int64{B, cell}
		default: // hidden
			p.Shape = []int64{B, hidden}
		}
		outs = append(outs, p)
	}
	return outs
}

// plannedOutputs are a tree request's outputs: nodes counts the nodes of
// all its trees.
func (m *treeModel) plannedOutputs(outs []RequestedOutput, trees, nodes int) []infer.PlannedOutput {
	C, B := int64(m.tm.Net.Classes), int64(trees)
	p := make([]infer.PlannedOutput, 0, len(outs))
	for _, o := range outs {
		switch o.Name {
		case "probs":
			p = append(p, infer.PlannedOutput{Name: o.Name, Datatype: "FP32", Shape: []int64{B, C}})
		case "node_probs":
			p = append(p, infer.PlannedOutput{Name: o.Name, Datatype: "FP32", Shape: []int64{int64(nodes), C}})
		default: // class, nodes
			p = append(p, infer.PlannedOutput{Name: o.Name, Datatype: "INT64", Shape: []int64{B}})
		}
	}
	return p
}

// writeDeadline gives the response to w until the write timeout to be
// written (a stream: each event); a client that does not read it in time
// loses its connection, and the request its share of the budget.
func (s *Server) writeDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
}
