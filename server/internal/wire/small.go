package wire

import (
	"io"
	"sync"
	"unicode/utf8"

	"rnnserve/server/internal/infer"
)

// The fast path of DecodeInfer for a small JSON body (no binary tensor
// data): the body is read whole into a pooled buffer and parsed in one
// pass by a hand-written parser of the plain JSON real clients send
// (known keys, strings without escapes, integer parameters, number or
// string data). It builds the Request only when it is sure the full
// decoder would build the same one; for anything else, valid or not, it
// says "not mine" and the full decoder reads the same bytes, so errors,
// status codes and strictness are those of the full decoder. The data
// arrays are converted by the full decoder's own jsonData. The
// differential fuzz target FuzzDecodeSmall holds it to that.

// smallBody is the largest body the fast path reads.
const smallBody = 4 << 10

var smallBufs = sync.Pool{New: func() any { return new([smallBody]byte) }}

// replay gives back the bytes read into buf, then err (when not nil,
// as the reader gave it: a textChecker stops at the first error anyway),
// then the rest of the body.
type replay struct {
	buf  []byte
	err  error
	rest io.Reader
}

func (p *replay) Read(b []byte) (int, error) {
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		return n, nil
	}
	if p.err != nil {
		return 0, p.err
	}
	return p.rest.Read(b)
}

// readSmall reads rd into buf until it ends, fails or fills buf; the
// whole body is in buf when err is io.EOF.
func readSmall(rd io.Reader, buf []byte) replay {
	n := 0
	var err error
	for n < len(buf) && err == nil {
		var m int
		m, err = rd.Read(buf[n:])
		n += m
	}
	return replay{buf: buf[:n], err: err, rest: rd}
}

// scanner reads plain JSON from b[i:]; each method reports whether what
// it wanted was there (false: not mine).
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// eat skips white space and then c, if c is next.
func (s *scanner) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string of valid UTF-8 without escapes or control
// characters, returning its bytes.
func (s *scanner) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	for start := s.i; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// string is str's string.
func (s *scanner) string() (string, bool) {
	b, ok := s.str()
	return string(b), ok
}

// word reads the literal w.
func (s *scanner) word(w string) bool {
	s.ws()
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// int reads an integer of at most 18 digits written as JSON writes one,
// with no fraction or exponent: what strconv.ParseInt reads the same.
func (s *scanner) int() (int64, bool) {
	s.ws()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var v int64
	for s.i < len(s.b) && s.b[s.i]-'0' <= 9 {
		v = v*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	if n := s.i - start; n == 0 || n > 18 || n > 1 && s.b[start] == '0' {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// digits skips decimal digits, reporting whether there was one.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i]-'0' <= 9 {
		s.i++
	}
	return s.i > start
}

// number skips a JSON number.
func (s *scanner) number() bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !s.digits():
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		return s.digits()
	}
	return true
}

// object reads an object, calling member with each key and the scanner
// before its value.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.eat(':') || !member(k) {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// array reads an array, calling elem before each element.
func (s *scanner) array(elem func() bool) bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.eat(']') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// data skips tensor data: arrays, nested at most maxNesting deep (the
// full decoder refuses deeper ones), of numbers and strings.
func (s *scanner) data(depth int) bool {
	if depth > maxNesting {
		return false
	}
	return s.array(func() bool {
		s.ws()
		switch {
		case s.i < len(s.b) && s.b[s.i] == '[':
			return s.data(depth + 1)
		case s.i < len(s.b) && s.b[s.i] == '"':
			_, ok := s.str()
			return ok
		}
		return s.number()
	})
}

// params reads a parameters object whose values are booleans, strings
// and integers, as ParamsOf decodes them.
func (s *scanner) params() (infer.Params, bool) {
	p := infer.Params{}
	return p, s.object(func(k []byte) bool {
		if _, dup := p[string(k)]; dup {
			return false
		}
		var v any
		ok := true
		s.ws()
		switch {
		case s.i < len(s.b) && s.b[s.i] == '"':
			v, ok = s.string()
		case s.i < len(s.b) && s.b[s.i] == 't':
			v, ok = true, s.word("true")
		case s.i < len(s.b) && s.b[s.i] == 'f':
			v, ok = false, s.word("false")
		default:
			v, ok = s.int()
		}
		p[string(k)] = v
		return ok
	})
}

// fields reads an object of known keys, each at most once: field reads
// the value of key k, returning the key's bit (0: not a known key).
func (s *scanner) fields(field func(k []byte) (uint8, bool)) bool {
	var seen uint8
	return s.object(func(k []byte) bool {
		bit, ok := field(k)
		dup := seen&bit != 0
		seen |= bit
		return ok && bit != 0 && !dup
	})
}

// datatype is dt as a string, without allocating for the usual ones.
func datatype(dt []byte) string {
	switch string(dt) {
	case "INT64":
		return "INT64"
	case "INT32":
		return "INT32"
	case "FP32":
		return "FP32"
	case "BYTES":
		return "BYTES"
	}
	return string(dt)
}

// input reads an input tensor's object, its data as text.
func (s *scanner) input() (t infer.Tensor, raw []byte, ok bool) {
	ok = s.fields(func(k []byte) (uint8, bool) {
		switch string(k) {
		case "name":
			t.Name, ok = s.string()
			return 1, ok
		case "datatype":
			b, ok := s.str()
			t.Datatype = datatype(b)
			return 2, ok
		case "shape":
			t.Shape = make([]int64, 0, 4)
			return 4, s.array(func() bool {
				d, ok := s.int()
				t.Shape = append(t.Shape, d)
				return ok
			})
		case "parameters": // any is refused without binary data
			return 8, s.object(func([]byte) bool { return false })
		case "data":
			s.ws()
			start := s.i
			ok = s.data(1)
			raw = s.b[start:s.i]
			return 16, ok
		}
		return 0, false
	})
	return t, raw, ok
}

// output reads a requested output's object.
func (s *scanner) output() (o infer.RequestedOutput, ok bool) {
	ok = s.fields(func(k []byte) (uint8, bool) {
		switch string(k) {
		case "name":
			o.Name, ok = s.string()
			return 1, ok
		case "parameters":
			o.Parameters, ok = s.params()
			return 2, ok
		}
		return 0, false
	})
	return o, ok
}

// decodeSmall decodes a whole JSON infer body into r as fromWire does,
// charging mem as it does. With ok false it has not touched r or mem:
// the body is for the full decoder. With ok true, err is nil or the
// error of a charge, which the full decoder would have met at the same
// charge (everything before it being equal).
func decodeSmall(body []byte, r *infer.Request, mem *TensorMemory) (ok bool, err error) {
	s := scanner{b: body}
	var id, modelName, modelVersion []byte
	var params infer.Params
	var ins []infer.Tensor
	var raws [][]byte // each input's data text
	var outs []infer.RequestedOutput
	ok = s.fields(func(k []byte) (uint8, bool) {
		switch string(k) {
		case "id":
			id, ok = s.str()
			return 1, ok
		case "model_name":
			modelName, ok = s.str()
			return 2, ok
		case "model_version":
			modelVersion, ok = s.str()
			return 4, ok
		case "parameters":
			params, ok = s.params()
			return 8, ok
		case "inputs":
			return 16, s.array(func() bool {
				t, raw, ok := s.input()
				ins, raws = append(ins, t), append(raws, raw)
				return ok
			})
		case "outputs":
			return 32, s.array(func() bool {
				o, ok := s.output()
				outs = append(outs, o)
				return ok
			})
		}
		return 0, false
	})
	if s.ws(); !ok || s.i != len(s.b) {
		return false, nil
	}

	// What fromWire checks and takes out, in its order.
	if len(modelName) > 0 && string(modelName) != r.Model ||
		len(modelVersion) > 0 && r.Version != "" && string(modelVersion) != r.Version {
		return false, nil
	}
	if params == nil {
		params = infer.Params{}
	}
	binaryOut, hasBinaryOut, err := params.Bool("binary_data_output")
	if err != nil {
		return false, nil
	}
	delete(params, "binary_data_output")
	p := infer.Request{Sequence: r.Sequence}
	if p.SetParameters(params) != nil {
		return false, nil
	}
	if ins == nil {
		ins = []infer.Tensor{}
	}
	for i := range ins {
		if jsonData(&ins[i], raws[i], nil) != nil {
			return false, nil
		}
	}
	if outs == nil {
		outs = []infer.RequestedOutput{}
	}
	for i := range outs {
		p := outs[i].Parameters
		if p == nil {
			p = infer.Params{}
		}
		if takeOutputParams(&outs[i], p) != nil {
			return false, nil
		}
	}

	if r.Version == "" {
		r.Version = string(modelVersion)
	}
	r.ID = string(id)
	if hasBinaryOut {
		r.BinaryOutput = binaryOut
	}
	r.Sequence, r.Parameters = p.Sequence, p.Parameters
	r.Inputs, r.Outputs = ins, outs
	for i := range ins {
		t, raw := &ins[i], raws[i]
		kind, _ := infer.DatatypeKind(t.Datatype)
		n, _ := infer.Elements(t.Shape)
		if err := mem.take(t.Name, textSize(kind, n, raw)); err != nil {
			return true, err
		}
	}
	return true, nil
}
