package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"rnnserve/rnn"
	"rnnserve/server/api"
)

// maxNesting bounds the depth of nested JSON arrays in tensor data.
const maxNesting = 8

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
}

// decodeNumbers reads a flat or nested JSON array of numbers, checking
// that it holds exactly want values. Nested arrays are read in row-major
// order, as KServe v2 allows.
func decodeNumbers(name string, raw json.RawMessage, want int, each func(i int, n json.Number) error) error {
	if len(raw) == 0 {
		return badRequest("input %q: missing data", name)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	depth, i := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return badRequest("input %q: data: %v", name, err)
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '[':
				if depth++; depth > maxNesting {
					return badRequest("input %q: data nested deeper than %d", name, maxNesting)
				}
			case ']':
				depth--
			default:
				return badRequest("input %q: data must be an array of numbers", name)
			}
		case json.Number:
			if depth == 0 {
				return badRequest("input %q: data must be an array", name)
			}
			if i >= want {
				return badRequest("input %q: more than %d values for its shape", name, want)
			}
			if err := each(i, v); err != nil {
				return err
			}
			i++
		default:
			return badRequest("input %q: data must hold only numbers, found %v", name, tok)
		}
	}
	if i != want {
		return badRequest("input %q: %d values, want %d for its shape", name, i, want)
	}
	return nil
}

// decodeInt64s reads integer tensor data.
func decodeInt64s(t *api.Tensor, want int) ([]int64, error) {
	v := make([]int64, want)
	err := decodeNumbers(t.Name, t.Data, want, func(i int, n json.Number) error {
		x, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return badRequest("input %q: value %s at index %d is not a 64-bit integer", t.Name, n, i)
		}
		v[i] = x
		return nil
	})
	return v, err
}

// decodeFloat32s reads float tensor data, refusing values that are not
// finite in float32.
func decodeFloat32s(t *api.Tensor, want int) ([]float32, error) {
	v := make([]float32, want)
	err := decodeNumbers(t.Name, t.Data, want, func(i int, n json.Number) error {
		x, err := strconv.ParseFloat(string(n), 32)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return badRequest("input %q: value %s at index %d is not a finite float32", t.Name, n, i)
		}
		v[i] = float32(x)
		return nil
	})
	return v, err
}

// shapeSize checks a tensor's shape against the rank and limits wanted and
// returns its element count.
func shapeSize(t *api.Tensor, rank int, limits []int64) (int, error) {
	if len(t.Shape) != rank {
		return 0, badRequest("input %q: shape %v has rank %d, want %d", t.Name, t.Shape, len(t.Shape), rank)
	}
	n := int64(1)
	for i, d := range t.Shape {
		if d < 1 || d > limits[i] {
			return 0, badRequest("input %q: dimension %d of shape %v is %d, want 1..%d", t.Name, i, t.Shape, d, limits[i])
		}
		n *= d
	}
	return int(n), nil
}

// request is a decoded infer request: batch-first inputs and what to return.
type request struct {
	B, T     int
	tokens   []int64   // [B][T]
	features []float32 // [B][T][F]
	outputs  []outputSpec
	seq      sequenceParams
}

type outputSpec struct {
	name string
	last bool // only the last time step
	k    int  // top_k
}

type sequenceParams struct {
	id         string
	start, end bool
}

func (r *request) wants(name string) bool {
	for _, o := range r.outputs {
		if o.name == name {
			return true
		}
	}
	return false
}

// Outputs a request may ask for.
var outputNames = map[string]string{
	"logits":      "FP32 [B, T, V]: the head's output (after the model's activation)",
	"probs":       "FP32 [B, T, V]: next-token probabilities",
	"top_k":       "INT64 [B, T, k]: the k most likely ids (parameter k, default 5)",
	"top_k_probs": "FP32 [B, T, k]: their probabilities",
	"output":      "FP32 [B, T, W]: the last layer's output at each step",
	"hidden":      "FP32 [B, layers*dirs, Out]: the final h",
	"cell":        "FP32 [B, layers*dirs, H]: the final c (LSTM)",
}

// decodeRequest validates an infer request against a model's network.
func decodeRequest(req *api.InferRequest, net *rnn.Network, o *Options) (*request, error) {
	r := &request{}
	var seen string
	for i := range req.Inputs {
		t := &req.Inputs[i]
		switch t.Name {
		case "tokens":
			if net.Vocab == 0 {
				return nil, badRequest(`the model takes input "features" [B, T, %d] FP32, not "tokens"`, net.Input)
			}
			if t.Datatype != "INT64" && t.Datatype != "INT32" {
				return nil, badRequest(`input "tokens": datatype %q, want INT64 or INT32`, t.Datatype)
			}
			n, err := shapeSize(t, 2, []int64{int64(o.MaxRequestRows), int64(o.MaxSteps)})
			if err != nil {
				return nil, err
			}
			if r.tokens, err = decodeInt64s(t, n); err != nil {
				return nil, err
			}
			for j, id := range r.tokens {
				if id < 0 || id >= int64(net.Vocab) {
					return nil, badRequest(`input "tokens": id %d at [%d, %d] is outside the vocabulary [0, %d)`, id, j/int(t.Shape[1]), j%int(t.Shape[1]), net.Vocab)
				}
			}
		case "features":
			if net.Vocab > 0 {
				return nil, badRequest(`the model takes input "tokens" [B, T] INT64, not "features"`)
			}
			if t.Datatype != "FP32" {
				return nil, badRequest(`input "features": datatype %q, want FP32`, t.Datatype)
			}
			n, err := shapeSize(t, 3, []int64{int64(o.MaxRequestRows), int64(o.MaxSteps), int64(net.Input)})
			if err != nil {
				return nil, err
			}
			if t.Shape[2] != int64(net.Input) {
				return nil, badRequest(`input "features": last dimension %d, want the model's input size %d`, t.Shape[2], net.Input)
			}
			if r.features, err = decodeFloat32s(t, n); err != nil {
				return nil, err
			}
		default:
			return nil, badRequest("unknown input %q (want %q)", t.Name, map[bool]string{true: "tokens", false: "features"}[net.Vocab > 0])
		}
		if seen != "" {
			return nil, badRequest("more than one input (%q and %q)", seen, t.Name)
		}
		seen = t.Name
		r.B, r.T = int(t.Shape[0]), int(t.Shape[1])
	}
	if seen == "" {
		return nil, badRequest("no input: send %q", map[bool]string{true: "tokens", false: "features"}[net.Vocab > 0])
	}
	if err := decodeOutputs(r, req.Outputs, net); err != nil {
		return nil, err
	}
	if err := decodeSequence(&r.seq, req.Parameters); err != nil {
		return nil, err
	}
	if r.seq.id != "" && r.B != 1 {
		return nil, badRequest("a sequence request must have batch size 1, got %d", r.B)
	}
	return r, nil
}

func decodeOutputs(r *request, outs []api.RequestedOutput, net *rnn.Network) error {
	if len(outs) == 0 {
		if net.HeadOut > 0 {
			outs = []api.RequestedOutput{{Name: "logits"}}
		} else {
			outs = []api.RequestedOutput{{Name: "output"}}
		}
	}
	for _, o := range outs {
		if _, ok := outputNames[o.Name]; !ok {
			return fmt.Errorf("%w %q (known: logits, probs, top_k, top_k_probs, output, hidden, cell)", ErrUnsupportedOutput, o.Name)
		}
		switch o.Name {
		case "logits", "probs", "top_k", "top_k_probs":
			if net.HeadOut == 0 {
				return fmt.Errorf("%w %q: the model has no head", ErrUnsupportedOutput, o.Name)
			}
		case "cell":
			if net.Cell != rnn.LSTM {
				return fmt.Errorf("%w %q: a GRU has no cell state", ErrUnsupportedOutput, o.Name)
			}
		}
		spec := outputSpec{name: o.Name, k: 5}
		for key, raw := range o.Parameters {
			switch key {
			case "last_step":
				if err := json.Unmarshal(raw, &spec.last); err != nil {
					return badRequest("output %q: parameter last_step must be a boolean", o.Name)
				}
			case "k":
				if err := json.Unmarshal(raw, &spec.k); err != nil || spec.k < 1 || spec.k > net.HeadOut {
					return badRequest("output %q: parameter k must be an integer in 1..%d", o.Name, net.HeadOut)
				}
			default:
				return badRequest("output %q: unknown parameter %q", o.Name, key)
			}
		}
		for _, prev := range r.outputs {
			if prev.name == o.Name {
				return badRequest("output %q asked for twice", o.Name)
			}
		}
		r.outputs = append(r.outputs, spec)
	}
	return nil
}

func decodeSequence(s *sequenceParams, params api.Parameters) error {
	for key, raw := range params {
		switch key {
		case "sequence_id":
			var id any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&id); err != nil {
				return badRequest("parameter sequence_id: %v", err)
			}
			switch v := id.(type) {
			case string:
				s.id = v
			case json.Number:
				if _, err := strconv.ParseUint(string(v), 10, 64); err != nil {
					return badRequest("parameter sequence_id: %s is not an unsigned integer", v)
				}
				s.id = string(v)
			default:
				return badRequest("parameter sequence_id must be a string or an unsigned integer")
			}
			if s.id == "" || s.id == "0" {
				return badRequest("parameter sequence_id must not be empty or 0")
			}
			if len(s.id) > 256 {
				return badRequest("parameter sequence_id longer than 256 bytes")
			}
		case "sequence_start", "sequence_end":
			var b bool
			if err := json.Unmarshal(raw, &b); err != nil {
				return badRequest("parameter %s must be a boolean", key)
			}
			if key == "sequence_start" {
				s.start = b
			} else {
				s.end = b
			}
		}
		// Other request parameters are ignored, as KServe v2 allows.
	}
	if (s.start || s.end) && s.id == "" {
		return badRequest("sequence_start or sequence_end without sequence_id")
	}
	return nil
}

var errBodyTooLarge = errors.New("http: request body too large")
