package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/limits"
)

// The REST codec: request bodies become Requests and Responses become
// bodies, in KServe v2 JSON or with Triton's binary tensor data extension.
// Bodies are read as a stream from a size-limited (and, for gzip or
// deflate, inflated and again size-limited) reader: the JSON is decoded
// from the stream, each tensor's data is converted to typed values before
// the decoder reads on, and binary tensor data is read straight from the
// stream tensor by tensor, so no second copy of the whole body is made.
// The JSON writer is hand-written: encoding/json's reflection over a few
// thousand floats was most of the server's overhead on a large output.

// headerLength is Triton's header giving the length of the JSON object
// that starts a body carrying binary tensor data.
const headerLength = "Inference-Header-Content-Length"

// maxNesting bounds the depth of nested JSON arrays in tensor data.
const maxNesting = 8

// body returns a reader of the request's body, inflated when the client
// compressed it (Content-Encoding gzip or deflate), that fails with
// ErrTooLarge past the body limit (inflated bytes count): a compression
// bomb gets 413 without being inflated past the limit. A Content-Length
// over the limit fails at once, before any byte is read. The body's bytes
// are charged to the memory budget as they arrive (budget.go): the wire
// bytes, and for a compressed body its inflated bytes and the inflater's
// state beside them. A body that arrives slower than Options.MinBodyRate
// fails with ErrSlowBody (see stallGuard), giving its share back. The
// reservation's release gives the bytes back (and closes the inflater);
// call it, even after an error, once the request no longer holds what was
// decoded.
func (s *Server) body(c *gin.Context) (rd io.Reader, res *limits.Reservation, err error) {
	r, limit := c.Request, s.opts.MaxBodyBytes
	res = s.budget.Reserve(r.Context())
	if r.ContentLength > limit {
		return nil, res, fmt.Errorf("%w: body of %d bytes, over %d", ErrTooLarge, r.ContentLength, limit)
	}
	res.Small = r.ContentLength >= 0 && r.ContentLength <= limits.SmallRequest
	// The body itself is limited and guarded, so that fail drains at most
	// the limit, at the minimum rate.
	r.Body = newStallGuard(http.MaxBytesReader(c.Writer, r.Body, limit), http.NewResponseController(c.Writer), s.opts.MinBodyRate)
	raw := limits.NewReader(&limited{r: r.Body, n: limit}, res, r.ContentLength)
	var zr io.ReadCloser
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if enc != "" && enc != "identity" {
		res.Small = false // what it inflates to is not known
	}
	switch enc {
	case "", "identity":
		return raw, res, nil
	case "gzip", "x-gzip":
		if err := res.Grow(inflaterBytes); err != nil {
			return nil, res, err
		}
		g, err := gzip.NewReader(raw)
		if err != nil {
			return nil, res, readError("gzip body", err, limit)
		}
		zr = g
	case "deflate":
		if err := res.Grow(inflaterBytes); err != nil {
			return nil, res, err
		}
		z, err := zlib.NewReader(raw)
		if err != nil {
			return nil, res, readError("deflate (zlib) body", err, limit)
		}
		zr = z
	default:
		return nil, res, fmt.Errorf("%w %q (want gzip, deflate or none)", ErrUnsupportedMedia, infer.Clip(enc))
	}
	res.Close(zr)
	// The inflated bytes are what the decoder holds: they are charged
	// beside the compressed ones, which the inflater has read.
	return limits.NewReader(&limited{r: zr, n: limit}, res, -1), res, nil
}

// inflaterBytes is what an inflater holds besides the bytes it passes on:
// compress/flate's decompressor (its 32 KiB window, Huffman tables) and
// the reader buffer in front of it, as allocated (TestInflaterBytes).
const inflaterBytes = 48 << 10

// stallGuard fails a body that does not keep arriving: counting only the
// time the server spends waiting in its reads (not the time it takes to
// decode what it read, or to wait for room in the budget), the n-th byte
// must arrive within (n + limits.Chunk)/rate (so the first 64 KiB get a
// second at the default 64 KiB/s, and 8 MiB get 129 s, which the server's
// read timeout cuts shorter). A read that waits past that is ended by
// moving the connection's read deadline to now, and fails with
// ErrSlowBody; the request then answers 408 and gives its budget back.
// Without the deadline (a writer that cannot set one) the stall is still
// reported once the read returns.
type stallGuard struct {
	io.ReadCloser
	rc     *http.ResponseController
	rate   int64
	read   int64
	waited time.Duration // in reads
	timer  *time.Timer
	fired  atomic.Bool
}

func newStallGuard(r io.ReadCloser, rc *http.ResponseController, rate int64) io.ReadCloser {
	if rate <= 0 {
		return r
	}
	return &stallGuard{ReadCloser: r, rc: rc, rate: rate}
}

func (g *stallGuard) Read(p []byte) (int, error) {
	if g.fired.Load() {
		return 0, g.slow()
	}
	if g.timer == nil {
		g.timer = time.AfterFunc(time.Hour, func() {
			g.fired.Store(true)
			g.rc.SetReadDeadline(time.Now())
		})
	}
	allowed := time.Duration(float64(g.read+limits.Chunk) / float64(g.rate) * float64(time.Second))
	start := time.Now()
	g.timer.Reset(allowed - g.waited)
	n, err := g.ReadCloser.Read(p)
	g.timer.Stop()
	g.waited += time.Since(start)
	g.read += int64(n)
	if g.fired.Load() && err != nil {
		return n, g.slow()
	}
	return n, err
}

func (g *stallGuard) slow() error {
	return fmt.Errorf("%w: %d bytes in %v, under the minimum of %d bytes a second (min_body_rate)",
		ErrSlowBody, g.read, g.waited.Round(time.Millisecond), g.rate)
}

// limited fails with ErrTooLarge once more than n bytes have been read.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	if l.n -= int64(n); l.n < 0 {
		return n, ErrTooLarge
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		err = ErrTooLarge
	}
	return n, err
}

// settled reports whether an error met reading a body says already what
// went wrong: bad text (the text checker), no room in the budget, the
// request cut or canceled.
func settled(err error) bool {
	return errors.Is(err, ErrBadRequest) || errors.Is(err, ErrOverBudget) || errors.Is(err, ErrDraining) || errors.Is(err, ErrSlowBody) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// readError wraps an error met reading a body: too large, or malformed.
func readError(what string, err error, limit int64) error {
	if errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%w: body over %d bytes", ErrTooLarge, limit)
	}
	if settled(err) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return infer.BadRequest("%s: the body ended early", what)
	}
	return infer.BadRequest("%s: %v", what, err)
}

// Errors of a body that is not one JSON object; each wraps ErrBadRequest.
var (
	errEmptyBody = errors.New("empty body: want a JSON object")
	errTruncated = errors.New("the body ended inside the JSON object")
	errTrailing  = errors.New("data after the request object")
)

// decodeJSON decodes one JSON object from rd into v, rejecting unknown
// fields, text that is not UTF-8 or has a lone surrogate escape (see
// textChecker), and anything but white space after it. then runs before the
// decoder reads past the object (values of api.RawData point into its
// buffer).
func decodeJSON(rd io.Reader, v any, limit int64, then func() error) error {
	rd = newTextChecker(rd)
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, ErrTooLarge) || settled(err) {
			return readError("", err, limit)
		}
		if err == io.EOF {
			return fmt.Errorf("%w: %w", ErrBadRequest, errEmptyBody)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: malformed JSON: %w", ErrBadRequest, errTruncated)
		}
		var unmarshal *json.UnmarshalTypeError
		if errors.As(err, &unmarshal) {
			return infer.BadRequest("malformed JSON: field %s: want %s", infer.Clip(unmarshal.Field), unmarshal.Type)
		}
		return infer.BadRequest("malformed JSON: %s", infer.Clip(err.Error()))
	}
	if then != nil {
		if err := then(); err != nil {
			return err
		}
	}
	return onlySpace(io.MultiReader(dec.Buffered(), rd), limit)
}

// onlySpace reads rd to its end, refusing anything but JSON white space.
func onlySpace(rd io.Reader, limit int64) error {
	var buf [512]byte
	for {
		n, err := rd.Read(buf[:])
		for _, c := range buf[:n] {
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return fmt.Errorf("%w: malformed JSON: %w", ErrBadRequest, errTrailing)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError("body", err, limit)
		}
	}
}

// tensorMemory bounds and charges the memory one request's decoded
// tensors take. Decoded data can be larger than its text or raw bytes
// (the JSON "1," is an 8-byte int64; an INT8 takes 8 bytes as int64; an
// empty BYTES element is a 24-byte slice header), so a request's tensors
// may hold at most limit bytes (413 beyond; twice the body limit, which
// any request within the model limits meets), and charge takes them from
// the memory budget beside the body's bytes.
type tensorMemory struct {
	limit  int64
	used   int64
	charge func(n int64) error // nil: not charged (tests)
}

// take counts n more bytes of input name's decoded data.
func (m *tensorMemory) take(name string, n int64) error {
	if m == nil {
		return nil // not bounded (tests)
	}
	if m.used+n > m.limit {
		return fmt.Errorf("%w: input %q: the decoded tensors would take %d bytes, over the %d-byte limit", ErrTooLarge, infer.Clip(name), m.used+n, m.limit)
	}
	m.used += n
	if m.charge != nil {
		return m.charge(n)
	}
	return nil
}

// decodedSize is the memory n decoded elements of kind take, holding
// text bytes of BYTES data at most.
func decodedSize(kind Kind, n, text int64) int64 {
	switch kind {
	case KindInt:
		return 8 * n
	case KindFloat:
		return 4 * n
	case KindBytes:
		return 24*n + text // a slice header each, and the bytes
	}
	return 0
}

// decodeInfer reads an infer request body: a JSON object, or with
// hdrLen >= 0 (Inference-Header-Content-Length) a JSON object of that
// length followed by the binary data of the inputs that have
// binary_data_size, in order. charge (nil: none) takes the decoded
// tensors' memory from the budget (see tensorMemory).
func decodeInfer(rd io.Reader, hdrLen, limit int64, charge func(int64) error, r *Request) error {
	mem := &tensorMemory{limit: 2 * limit, charge: charge}
	var w api.InferRequest
	jsonPart := rd
	if hdrLen >= 0 {
		if hdrLen > limit {
			return fmt.Errorf("%w: %s %d, over the %d-byte body limit", ErrTooLarge, headerLength, hdrLen, limit)
		}
		jsonPart = io.LimitReader(rd, hdrLen)
	}
	var binary []binaryInput // inputs whose data follows the JSON, in order
	err := decodeJSON(jsonPart, &w, limit, func() (err error) {
		binary, err = fromWire(&w, r, mem)
		return err
	})
	if err != nil {
		switch {
		case hdrLen >= 0 && (errors.Is(err, errTruncated) || errors.Is(err, errEmptyBody)):
			return infer.BadRequest("%s %d is longer than the body, or the JSON object is cut short", headerLength, hdrLen)
		case hdrLen >= 0 && errors.Is(err, errTrailing):
			return infer.BadRequest("%s %d does not match the JSON object: other data follows it within those bytes", headerLength, hdrLen)
		}
		return err
	}
	if hdrLen < 0 {
		if len(binary) > 0 {
			return infer.BadRequest("input %q has binary_data_size but the request has no %s header", infer.Clip(r.Inputs[binary[0].index].Name), headerLength)
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
func readBinary(rd io.Reader, t *Tensor, size int64, budget *int64, limit int64, mem *tensorMemory) error {
	kind, elem := DatatypeKind(t.Datatype)
	n, err := Elements(t.Shape)
	if err != nil {
		return fmt.Errorf("input %q: %w", infer.Clip(t.Name), err)
	}
	switch {
	case kind == KindUnsupported:
		return infer.DatatypeError(t.Name, t.Datatype)
	case kind != KindBytes && size != int64(n)*int64(elem):
		return infer.BadRequest("input %q: binary_data_size %d, want %d (shape %v x %d-byte %s)", infer.Clip(t.Name), size, int64(n)*int64(elem), infer.ClipShape(t.Shape), elem, t.Datatype)
	case size > *budget:
		return fmt.Errorf("%w: input %q: binary_data_size %d is more than the %d bytes the body limit leaves", ErrTooLarge, infer.Clip(t.Name), size, *budget)
	}
	*budget -= size
	dec := int64(n)
	if kind == KindBytes {
		dec = min(dec, size/4) // each element has a 4-byte length; the bytes stay in raw
	}
	if err := mem.take(t.Name, decodedSize(kind, dec, 0)); err != nil {
		return err
	}
	raw := make([]byte, size)
	if got, err := io.ReadFull(rd, raw); err != nil {
		if errors.Is(err, ErrTooLarge) || settled(err) {
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
func fromWire(w *api.InferRequest, r *Request, mem *tensorMemory) (binary []binaryInput, err error) {
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
	params, err := paramsOf(w.Parameters)
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
	r.Inputs = make([]Tensor, len(w.Inputs))
	for i := range w.Inputs {
		in := &w.Inputs[i]
		t := &r.Inputs[i]
		t.Name, t.Datatype, t.Shape = in.Name, in.Datatype, in.Shape
		p, err := paramsOf(in.Parameters)
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
	r.Outputs = make([]RequestedOutput, len(w.Outputs))
	for i, o := range w.Outputs {
		p, err := paramsOf(o.Parameters)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", infer.Clip(o.Name), err)
		}
		ro := &r.Outputs[i]
		ro.Name = o.Name
		if v, ok, err := p.Bool("binary_data"); err != nil {
			return nil, fmt.Errorf("output %q: %w", infer.Clip(o.Name), err)
		} else if ok {
			ro.Binary = &v
			delete(p, "binary_data")
		}
		if k, ok, err := p.Int("classification", 0, maxClassification); err != nil {
			return nil, fmt.Errorf("output %q: %w", infer.Clip(o.Name), err)
		} else if ok {
			ro.Classification = int(k)
			delete(p, "classification")
		}
		if _, ok := p["shared_memory_region"]; ok {
			return nil, infer.BadRequest("output %q: shared memory is not supported", infer.Clip(o.Name))
		}
		ro.Parameters = p
	}
	return binary, nil
}

// paramsOf decodes wire parameters: each a string, number or boolean.
func paramsOf(wp api.Parameters) (Params, error) {
	p := make(Params, len(wp))
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

// jsonData converts a tensor's JSON data to typed values by its datatype,
// taking their memory from mem.
func jsonData(t *Tensor, raw api.RawData, mem *tensorMemory) error {
	if len(raw) == 0 {
		return infer.BadRequest("input %q: missing data", infer.Clip(t.Name))
	}
	kind, size := DatatypeKind(t.Datatype)
	n, err := Elements(t.Shape)
	if err != nil {
		return fmt.Errorf("input %q: %w", infer.Clip(t.Name), err)
	}
	// At most one value per two bytes of text ("1,"): what is allocated.
	if err := mem.take(t.Name, decodedSize(kind, int64(min(n, len(raw)/2+1)), int64(len(raw)))); err != nil {
		return err
	}
	switch kind {
	case KindInt:
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
	case KindFloat:
		t.Float32 = make([]float32, 0, min(n, len(raw)/2+1))
		return scanNumbers(t.Name, t.Shape, raw, n, func(i int, tok []byte) error {
			x, err := strconv.ParseFloat(string(tok), 32)
			if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
				return infer.BadRequest("input %q: value %s at index %d is not a finite float32", infer.Clip(t.Name), infer.Clip(string(tok)), i)
			}
			t.Float32 = append(t.Float32, float32(x))
			return nil
		})
	case KindBytes:
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
// text already checked by decodeJSON).
func jsonStrings(t *Tensor, raw []byte, want int) error {
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
func appendResponse(dst []byte, resp *Response) []byte {
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
	return strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
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

// responses writes REST response bodies, reusing its buffers and gzip
// writers across requests; the zero value is ready to use, and each
// Server has its own.
type responses struct {
	bufs  sync.Pool // *[]byte
	gzips sync.Pool // *gzip.Writer (BestSpeed)
}

// buffer is a response buffer to append to; give it back with putBuffer.
func (rs *responses) buffer() *[]byte {
	if bp, ok := rs.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 16<<10)
	return &b
}

// putBuffer keeps buf for another response unless it grew past 1 MiB.
func (rs *responses) putBuffer(bp *[]byte, buf []byte) {
	if cap(buf) <= 1<<20 {
		*bp = buf[:0]
		rs.bufs.Put(bp)
	}
}

// gzipWriter is a gzip writer (BestSpeed) writing to w.
func (rs *responses) gzipWriter(w io.Writer) *gzip.Writer {
	if zw, ok := rs.gzips.Get().(*gzip.Writer); ok {
		zw.Reset(w)
		return zw
	}
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return zw
}

// acceptsGzip reports whether the client accepts gzip responses.
func acceptsGzip(r *http.Request) bool {
	return acceptsCoding(r.Header.Values("Accept-Encoding"), "gzip")
}

// writeBody writes a response body, gzip-compressed when the client
// accepts it and the body is large enough to gain.
func (rs *responses) writeBody(w http.ResponseWriter, r *http.Request, code int, parts ...[]byte) {
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

// writeInfer writes an infer response: JSON, or, when an output is
// binary, the JSON header followed by the binary outputs' raw data (with
// Inference-Header-Content-Length).
func (rs *responses) writeInfer(w http.ResponseWriter, r *http.Request, resp *Response) {
	bp := rs.buffer()
	buf := appendResponse((*bp)[:0], resp)
	hdr := len(buf)
	for i := range resp.Outputs {
		if o := &resp.Outputs[i]; o.Binary {
			buf = o.AppendRaw(buf)
		}
	}
	if len(buf) > hdr {
		w.Header().Set(headerLength, strconv.Itoa(hdr))
		w.Header().Set("Content-Type", "application/octet-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	rs.writeBody(w, r, http.StatusOK, buf)
	rs.putBuffer(bp, buf)
}

// writeJSON writes v as a JSON response.
func (rs *responses) writeJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	rs.writeBody(w, r, code, data)
}
