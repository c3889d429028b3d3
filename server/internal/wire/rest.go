package wire

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
)

// The REST codec: request bodies become infer.Requests and
// infer.Responses become bodies, in KServe v2 JSON or with Triton's binary tensor data extension.
// Bodies are read as a stream from a size-limited (and, for gzip or
// deflate, inflated and again size-limited) reader: the JSON is decoded
// from the stream, each tensor's data is converted to typed values before
// the decoder reads on, and binary tensor data is read straight from the
// stream tensor by tensor, so no second copy of the whole body is made.
// The JSON writer is hand-written: encoding/json's reflection over a few
// thousand floats was most of the server's overhead on a large output.

// HeaderLength is Triton's header giving the length of the JSON object
// that starts a body carrying binary tensor data.
const HeaderLength = "Inference-Header-Content-Length"

// maxNesting bounds the depth of nested JSON arrays in tensor data.
const maxNesting = 8

// DecodeInfer reads an infer request body: a JSON object, or with
// hdrLen >= 0 (Inference-Header-Content-Length) a JSON object of that
// length followed by the binary data of the inputs that have
// binary_data_size, in order. charge (nil: none) takes the decoded
// tensors' memory from the budget (see TensorMemory).
func DecodeInfer(rd io.Reader, hdrLen, limit int64, charge func(int64) error, r *infer.Request) error {
	mem := &TensorMemory{Limit: 2 * limit, Charge: charge}
	if hdrLen < 0 {
		// A small JSON body goes to the fast path (small.go) first.
		bp := smallBufs.Get().(*[smallBody]byte)
		defer smallBufs.Put(bp)
		body := readSmall(rd, bp[:])
		if body.err == io.EOF {
			if ok, err := decodeSmall(body.buf, r, mem); ok {
				return err
			}
		}
		rest := body // on the heap only when the full decoder needs it
		rd = &rest
	}
	return decodeInfer(rd, hdrLen, limit, mem, r)
}

// decodeInfer is DecodeInfer without the fast path.
func decodeInfer(rd io.Reader, hdrLen, limit int64, mem *TensorMemory, r *infer.Request) error {
	var w api.InferRequest
	jsonPart := rd
	var header *io.LimitedReader // the JSON object's hdrLen bytes
	if hdrLen >= 0 {
		if hdrLen > limit {
			return fmt.Errorf("%w: %s %d, over the %d-byte body limit", infer.ErrTooLarge, HeaderLength, hdrLen, limit)
		}
		header = &io.LimitedReader{R: rd, N: hdrLen}
		jsonPart = header
	}
	var binary []binaryInput // inputs whose data follows the JSON, in order
	err := DecodeJSON(jsonPart, &w, limit, func() (err error) {
		binary, err = fromWire(&w, r, mem)
		return err
	})
	if err != nil {
		switch {
		case hdrLen >= 0 && (errors.Is(err, errTruncated) || errors.Is(err, ErrEmptyBody)):
			return infer.BadRequest("%s %d is longer than the body, or the JSON object is cut short", HeaderLength, hdrLen)
		case hdrLen >= 0 && errors.Is(err, errTrailing):
			return infer.BadRequest("%s %d does not match the JSON object: other data follows it within those bytes", HeaderLength, hdrLen)
		}
		return err
	}
	if hdrLen >= 0 && header.N > 0 {
		// The JSON object was read whole, and the body ended before the
		// header's length.
		return infer.BadRequest("%s %d is longer than the body, or the JSON object is cut short", HeaderLength, hdrLen)
	}
	if hdrLen < 0 {
		if len(binary) > 0 {
			return infer.BadRequest("input %q has binary_data_size but the request has no %s header", infer.Clip(r.Inputs[binary[0].index].Name), HeaderLength)
		}
		return nil
	}
	budget := limit - hdrLen
	for _, b := range binary {
		if err := readBinary(rd, &r.Inputs[b.index], b.size, &budget, limit, mem); err != nil {
			return err
		}
	}
	var one [1]byte
	if n, err := io.ReadFull(rd, one[:]); n > 0 {
		return infer.BadRequest("data after the binary tensor data of the inputs")
	} else if err != nil && err != io.EOF {
		return readError("body", err, limit)
	}
	return nil
}

// readBinary reads one input's binary data from rd.
func readBinary(rd io.Reader, t *infer.Tensor, size int64, budget *int64, limit int64, mem *TensorMemory) error {
	kind, elem := infer.DatatypeKind(t.Datatype)
	n, err := infer.Elements(t.Shape)
	if err != nil {
		return fmt.Errorf("input %q: %w", infer.Clip(t.Name), err)
	}
	switch {
	case kind == infer.KindUnsupported:
		return infer.DatatypeError(t.Name, t.Datatype)
	case kind != infer.KindBytes && size != int64(n)*int64(elem):
		return infer.BadRequest("input %q: binary_data_size %d, want %d (shape %v x %d-byte %s)", infer.Clip(t.Name), size, int64(n)*int64(elem), infer.ClipShape(t.Shape), elem, t.Datatype)
	case size > *budget:
		return fmt.Errorf("%w: input %q: binary_data_size %d is more than the %d bytes the body limit leaves", infer.ErrTooLarge, infer.Clip(t.Name), size, *budget)
	}
	*budget -= size
	dec := int64(n)
	if kind == infer.KindBytes {
		dec = min(dec, size/4) // each element has a 4-byte length; the bytes stay in raw
	}
	if err := mem.take(t.Name, decodedSize(kind, dec, 0)); err != nil {
		return err
	}
	raw := make([]byte, size)
	if got, err := io.ReadFull(rd, raw); err != nil {
		if errors.Is(err, infer.ErrTooLarge) || settled(err) {
			return readError("body", err, limit)
		}
		return infer.BadRequest("input %q: the body ends after %d of its %d bytes of binary data", infer.Clip(t.Name), got, size)
	}
	return t.DecodeRaw(raw)
}

// binaryInput is an input whose binary data follows the JSON.
type binaryInput struct {
	index int
	size  int64
}

// fromWire converts a decoded JSON request into r, converting JSON tensor
// data to typed values, and returns the inputs whose data is binary (set
// to come after the JSON), in order.
func fromWire(w *api.InferRequest, r *infer.Request, mem *TensorMemory) (binary []binaryInput, err error) {
	if w.ModelName != "" && w.ModelName != r.Model {
		return nil, infer.BadRequest("model_name %q in the body, but the URL names %q", infer.Clip(w.ModelName), infer.Clip(r.Model))
	}
	if w.ModelVersion != "" && r.Version != "" && w.ModelVersion != r.Version {
		return nil, infer.BadRequest("model_version %q in the body, but the URL names %q", infer.Clip(w.ModelVersion), infer.Clip(r.Version))
	}
	if r.Version == "" {
		r.Version = w.ModelVersion
	}
	r.ID = w.ID
	params, err := ParamsOf(w.Parameters)
	if err != nil {
		return nil, err
	}
	if v, ok, err := params.Bool("binary_data_output"); err != nil {
		return nil, err
	} else if ok {
		r.BinaryOutput = v
		delete(params, "binary_data_output")
	}
	if err := r.SetParameters(params); err != nil {
		return nil, err
	}
	r.Inputs = make([]infer.Tensor, len(w.Inputs))
	for i := range w.Inputs {
		in := &w.Inputs[i]
		t := &r.Inputs[i]
		t.Name, t.Datatype, t.Shape = in.Name, in.Datatype, in.Shape
		p, err := ParamsOf(in.Parameters)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", infer.Clip(in.Name), err)
		}
		if _, ok := p["shared_memory_region"]; ok {
			return nil, infer.BadRequest("input %q: shared memory is not supported", infer.Clip(in.Name))
		}
		size, ok, err := p.Int("binary_data_size", 0, math.MaxInt64)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", infer.Clip(in.Name), err)
		}
		if err := p.Only(fmt.Sprintf("input %q", infer.Clip(in.Name)), "binary_data_size"); err != nil {
			return nil, err
		}
		if ok {
			if in.Data != nil {
				return nil, infer.BadRequest("input %q has both data and binary_data_size", infer.Clip(in.Name))
			}
			binary = append(binary, binaryInput{index: i, size: size})
			continue
		}
		if err := jsonData(t, in.Data, mem); err != nil {
			return nil, err
		}
	}
	r.Outputs = make([]infer.RequestedOutput, len(w.Outputs))
	for i, o := range w.Outputs {
		p, err := ParamsOf(o.Parameters)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", infer.Clip(o.Name), err)
		}
		ro := &r.Outputs[i]
		ro.Name = o.Name
		if err := takeOutputParams(ro, p); err != nil {
			return nil, err
		}
	}
	return binary, nil
}

// takeOutputParams takes binary_data and classification out of a
// requested output's parameters p into o, and leaves the rest in
// o.Parameters; shared memory is refused.
func takeOutputParams(o *infer.RequestedOutput, p infer.Params) error {
	if v, ok, err := p.Bool("binary_data"); err != nil {
		return fmt.Errorf("output %q: %w", infer.Clip(o.Name), err)
	} else if ok {
		o.Binary = &v
		delete(p, "binary_data")
	}
	if k, ok, err := p.Int("classification", 0, infer.MaxClassification); err != nil {
		return fmt.Errorf("output %q: %w", infer.Clip(o.Name), err)
	} else if ok {
		o.Classification = int(k)
		delete(p, "classification")
	}
	if _, ok := p["shared_memory_region"]; ok {
		return infer.BadRequest("output %q: shared memory is not supported", infer.Clip(o.Name))
	}
	o.Parameters = p
	return nil
}

// ParamsOf decodes wire parameters: each a string, number or boolean.
func ParamsOf(wp api.Parameters) (infer.Params, error) {
	p := make(infer.Params, len(wp))
	for key, raw := range wp {
		v, err := paramValue(raw)
		if err != nil {
			return nil, infer.BadRequest("parameter %q: %v", infer.Clip(key), err)
		}
		p[key] = v
	}
	return p, nil
}

func paramValue(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("empty value")
	}
	switch c := raw[0]; {
	case c == 't' || c == 'f':
		var b bool
		err := json.Unmarshal(raw, &b)
		return b, err
	case c == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case c == '-' || c >= '0' && c <= '9':
		if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(string(raw), 10, 64); err == nil {
			return u, nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return nil, errors.New("number out of range")
		}
		return f, nil
	}
	return nil, errors.New("want a string, number or boolean")
}

// textSize is what the n elements of kind in JSON text raw are charged:
// at most one value per two bytes of text ("1,") is allocated.
func textSize(kind infer.Kind, n int, raw []byte) int64 {
	return decodedSize(kind, int64(min(n, len(raw)/2+1)), int64(len(raw)))
}

// jsonData converts a tensor's JSON data to typed values by its datatype,
// taking their memory from mem.
func jsonData(t *infer.Tensor, raw api.RawData, mem *TensorMemory) error {
	if len(raw) == 0 {
		return infer.BadRequest("input %q: missing data", infer.Clip(t.Name))
	}
	kind, size := infer.DatatypeKind(t.Datatype)
	n, err := infer.Elements(t.Shape)
	if err != nil {
		return fmt.Errorf("input %q: %w", infer.Clip(t.Name), err)
	}
	if err := mem.take(t.Name, textSize(kind, n, raw)); err != nil {
		return err
	}
	switch kind {
	case infer.KindInt:
		t.Int64 = make([]int64, 0, min(n, len(raw)/2+1))
		bits, unsigned := 8*size, t.Datatype[0] == 'U'
		return scanNumbers(t.Name, t.Shape, raw, n, func(i int, tok []byte) error {
			var v int64
			var err error
			if unsigned {
				var u uint64
				if u, err = strconv.ParseUint(string(tok), 10, bits); err == nil && u > math.MaxInt64 {
					err = strconv.ErrRange
				}
				v = int64(u)
			} else {
				v, err = strconv.ParseInt(string(tok), 10, bits)
			}
			if err != nil {
				sign := map[bool]string{true: "unsigned ", false: ""}[unsigned]
				return infer.BadRequest("input %q: value %s at index %d is not a %d-bit %sinteger", infer.Clip(t.Name), infer.Clip(string(tok)), i, bits, sign)
			}
			t.Int64 = append(t.Int64, v)
			return nil
		})
	case infer.KindFloat:
		t.Float32 = make([]float32, 0, min(n, len(raw)/2+1))
		return scanNumbers(t.Name, t.Shape, raw, n, func(i int, tok []byte) error {
			x, err := strconv.ParseFloat(string(tok), 32)
			if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
				return infer.BadRequest("input %q: value %s at index %d is not a finite float32", infer.Clip(t.Name), infer.Clip(string(tok)), i)
			}
			t.Float32 = append(t.Float32, float32(x))
			return nil
		})
	case infer.KindBytes:
		return jsonStrings(t, raw, n)
	}
	return infer.DatatypeError(t.Name, t.Datatype)
}

// nesting checks the arrays of a tensor's JSON data as they open and
// close: the data is either one flat array of values or arrays nested
// exactly as the shape says (Triton's two forms); anything in between,
// such as [[1,2,3],[4]] for shape [2,2], is refused rather than read as
// flat.
type nesting struct {
	name   string
	shape  []int64
	depth  int
	counts []int64 // elements so far of each open array
	inner  bool    // an array inside the outer one was seen
	flat   bool    // a value sat directly in the outer array
}

func (w *nesting) open() error {
	if w.depth > 0 {
		w.counts[w.depth-1]++
		w.inner = true
		if w.flat {
			return w.mismatch()
		}
		if w.depth >= len(w.shape) {
			return infer.BadRequest("input %q: data nested deeper than its shape %v", infer.Clip(w.name), infer.ClipShape(w.shape))
		}
	}
	if w.depth++; w.depth > maxNesting {
		return infer.BadRequest("input %q: data nested deeper than %d", infer.Clip(w.name), maxNesting)
	}
	if len(w.counts) < w.depth {
		w.counts = append(w.counts, 0)
	}
	w.counts[w.depth-1] = 0
	return nil
}

func (w *nesting) close() error {
	d := w.depth
	// A flat outer array's count is checked against the shape's size.
	if !w.flat && (d > 1 || w.inner) && w.counts[d-1] != w.shape[d-1] {
		return infer.BadRequest("input %q: an array at depth %d holds %d elements, but dimension %d of shape %v is %d", infer.Clip(w.name), d, w.counts[d-1], d-1, infer.ClipShape(w.shape), w.shape[d-1])
	}
	w.depth--
	return nil
}

// value checks where a value sits: in the outer array (flat data) or at
// the depth of the shape's last dimension.
func (w *nesting) value() error {
	switch {
	case w.depth == 0:
		return infer.BadRequest("input %q: data must be an array", infer.Clip(w.name))
	case w.depth == 1 && !w.inner:
		w.flat = true
	case w.depth != len(w.shape) || w.flat:
		return w.mismatch()
	}
	w.counts[w.depth-1]++
	return nil
}

func (w *nesting) mismatch() error {
	return infer.BadRequest("input %q: data must be one flat array or arrays nested as shape %v", infer.Clip(w.name), infer.ClipShape(w.shape))
}

// scanNumbers walks a flat or shape-nested JSON array of numbers (already
// checked to be valid JSON by the decoder) in row-major order, calling
// each for every number, and checks that it holds exactly want of them.
func scanNumbers(name string, shape []int64, raw []byte, want int, each func(i int, tok []byte) error) error {
	w := nesting{name: name, shape: shape}
	i := 0
	for p := 0; p < len(raw); {
		switch c := raw[p]; {
		case c == '[':
			if err := w.open(); err != nil {
				return err
			}
			p++
		case c == ']':
			if err := w.close(); err != nil {
				return err
			}
			p++
		case c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p++
		case c == '-' || c >= '0' && c <= '9':
			if err := w.value(); err != nil {
				return err
			}
			end := p + 1
			for end < len(raw) && (raw[end] >= '0' && raw[end] <= '9' || raw[end] == '.' || raw[end] == 'e' || raw[end] == 'E' || raw[end] == '+' || raw[end] == '-') {
				end++
			}
			if i >= want {
				return infer.BadRequest("input %q: more than %d values for its shape", infer.Clip(name), want)
			}
			if err := each(i, raw[p:end]); err != nil {
				return err
			}
			i++
			p = end
		default:
			if w.depth == 0 {
				return infer.BadRequest("input %q: data must be an array", infer.Clip(name))
			}
			return infer.BadRequest("input %q: data must hold only numbers, found %q", infer.Clip(name), infer.Clip(string(raw[p:min(p+16, len(raw))])))
		}
	}
	if i != want {
		return infer.BadRequest("input %q: %d values, want %d for its shape", infer.Clip(name), i, want)
	}
	return nil
}

// jsonStrings reads BYTES data: a flat or nested array of strings (the
// text already checked by DecodeJSON).
func jsonStrings(t *infer.Tensor, raw []byte, want int) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	w := nesting{name: t.Name, shape: t.Shape}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return infer.BadRequest("input %q: data: %v", infer.Clip(t.Name), err)
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '[':
				if err := w.open(); err != nil {
					return err
				}
			case ']':
				if err := w.close(); err != nil {
					return err
				}
			default:
				return infer.BadRequest("input %q: BYTES data must be an array of strings", infer.Clip(t.Name))
			}
		case string:
			if err := w.value(); err != nil {
				return err
			}
			if len(t.Bytes) >= want {
				return infer.BadRequest("input %q: more than %d values for its shape", infer.Clip(t.Name), want)
			}
			t.Bytes = append(t.Bytes, []byte(v))
		default:
			return infer.BadRequest("input %q: BYTES data must hold only strings", infer.Clip(t.Name))
		}
	}
	if len(t.Bytes) != want {
		return infer.BadRequest("input %q: %d values, want %d for its shape", infer.Clip(t.Name), len(t.Bytes), want)
	}
	if t.Bytes == nil {
		t.Bytes = [][]byte{}
	}
	return nil
}

// appendResponse appends resp's JSON object to dst: outputs with Binary
// set get parameters.binary_data_size instead of data.
func appendResponse(dst []byte, resp *infer.Response) []byte {
	dst = append(dst, `{"model_name":`...)
	dst = appendString(dst, resp.Model)
	dst = append(dst, `,"model_version":`...)
	dst = appendString(dst, resp.Version)
	if resp.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = appendString(dst, resp.ID)
	}
	dst = append(dst, `,"outputs":[`...)
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendString(dst, o.Name)
		dst = append(dst, `,"datatype":`...)
		dst = appendString(dst, o.Datatype)
		dst = append(dst, `,"shape":[`...)
		for k, d := range o.Shape {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, d, 10)
		}
		dst = append(dst, ']')
		if o.Binary {
			dst = append(dst, `,"parameters":{"binary_data_size":`...)
			dst = strconv.AppendInt(dst, int64(o.RawSize()), 10)
			dst = append(dst, "}}"...)
			continue
		}
		dst = append(dst, `,"data":[`...)
		switch {
		case o.Bytes != nil:
			for k, b := range o.Bytes {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = appendString(dst, string(b))
			}
		case o.Float32 != nil:
			for k, f := range o.Float32 {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = appendFloat(dst, f)
			}
		default:
			for k, v := range o.Int64 {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendInt(dst, v, 10)
			}
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...)
}

// appendFloat appends f as the shortest JSON number that reads back as
// the same float32; NaN and infinities, which JSON cannot hold, as null.
func appendFloat(dst []byte, f float32) []byte {
	if x := float64(f); math.IsNaN(x) || math.IsInf(x, 0) {
		return append(dst, "null"...)
	}
	return appendFloat32(dst, f) // strconv's 'g', -1, 32, faster (float32.go)
}

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// minCompress is the smallest response worth compressing.
const minCompress = 1 << 10

// Responses writes REST response bodies, reusing its buffers and gzip
// writers across requests; the zero value is ready to use, and each
// Server has its own.
type Responses struct {
	bufs  sync.Pool // *[]byte
	gzips sync.Pool // *gzip.Writer (BestSpeed)
}

// buffer is a response buffer to append to; give it back with putBuffer.
func (rs *Responses) buffer() *[]byte {
	if bp, ok := rs.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 16<<10)
	return &b
}

// putBuffer keeps buf for another response unless it grew past 1 MiB.
func (rs *Responses) putBuffer(bp *[]byte, buf []byte) {
	if cap(buf) <= 1<<20 {
		*bp = buf[:0]
		rs.bufs.Put(bp)
	}
}

// gzipWriter is a gzip writer (BestSpeed) writing to w.
func (rs *Responses) gzipWriter(w io.Writer) *gzip.Writer {
	if zw, ok := rs.gzips.Get().(*gzip.Writer); ok {
		zw.Reset(w)
		return zw
	}
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return zw
}

// acceptsGzip reports whether the client accepts gzip Responses.
func acceptsGzip(r *http.Request) bool {
	return acceptsCoding(r.Header.Values("Accept-Encoding"), "gzip")
}

// writeBody writes a response body, gzip-compressed when the client
// accepts it and the body is large enough to gain.
func (rs *Responses) writeBody(w http.ResponseWriter, r *http.Request, code int, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h := w.Header()
	if n >= minCompress && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		w.WriteHeader(code)
		bw := bufio.NewWriterSize(w, 32<<10)
		zw := rs.gzipWriter(bw)
		for _, p := range parts {
			zw.Write(p)
		}
		zw.Close()
		bw.Flush()
		rs.gzips.Put(zw)
		return
	}
	h.Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(code)
	for _, p := range parts {
		w.Write(p)
	}
}

// WriteInfer writes an infer response: JSON, or, when an output is
// binary, the JSON header followed by the binary outputs' raw data (with
// Inference-Header-Content-Length).
func (rs *Responses) WriteInfer(w http.ResponseWriter, r *http.Request, resp *infer.Response) {
	bp := rs.buffer()
	buf := appendResponse((*bp)[:0], resp)
	hdr := len(buf)
	for i := range resp.Outputs {
		if o := &resp.Outputs[i]; o.Binary {
			buf = o.AppendRaw(buf)
		}
	}
	if len(buf) > hdr {
		w.Header().Set(HeaderLength, strconv.Itoa(hdr))
		w.Header().Set("Content-Type", "application/octet-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	rs.writeBody(w, r, http.StatusOK, buf)
	rs.putBuffer(bp, buf)
}

// WriteJSON writes v as a JSON response.
func (rs *Responses) WriteJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	rs.writeBody(w, r, code, data)
}
