package wire

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/limits"
)

// Reading a REST body: size-limited (and, for gzip or deflate, inflated
// and again size-limited), charged to the memory budget as its bytes
// arrive, failed when it arrives too slowly; and the strict JSON reading
// every REST body goes through.

// Body returns a reader of the request's body, inflated when the client
// compressed it (Content-Encoding gzip or deflate), that fails with
// infer.ErrTooLarge past the body limit (inflated bytes count): a compression
// bomb gets 413 without being inflated past the limit. A Content-Length
// over the limit fails at once, before any byte is read. The body's bytes
// are charged to budget as they arrive: the wire bytes, and for a
// compressed body its inflated bytes and the inflater's state beside
// them. A body that arrives slower than minRate bytes a second (0: any
// rate) fails with infer.ErrSlowBody (see stallGuard), giving its share
// back. The
// reservation's release gives the bytes back (and closes the inflater);
// call it, even after an error, once the request no longer holds what was
// decoded.
func Body(w http.ResponseWriter, r *http.Request, budget *limits.Budget, limit, minRate int64) (rd io.Reader, res *limits.Reservation, err error) {
	res = budget.Reserve(r.Context())
	if r.ContentLength > limit {
		return nil, res, fmt.Errorf("%w: body of %d bytes, over %d", infer.ErrTooLarge, r.ContentLength, limit)
	}
	res.Small = r.ContentLength >= 0 && r.ContentLength <= limits.SmallRequest
	// The body itself is limited and guarded, so that fail drains at most
	// the limit, at the minimum rate.
	r.Body = newStallGuard(http.MaxBytesReader(w, r.Body, limit), http.NewResponseController(w), minRate)
	raw := limits.NewReader(&limited{r: r.Body, n: limit}, res, r.ContentLength)
	// Several field lines are one comma-separated list (RFC 9110 section
	// 5.3): stacked codings are refused whichever way they are written.
	enc := strings.ToLower(strings.TrimSpace(strings.Join(r.Header.Values("Content-Encoding"), ", ")))
	if enc != "" && enc != "identity" {
		res.Small = false // what it inflates to is not known
	}
	var inflater func(io.Reader) (io.ReadCloser, error)
	what := "gzip body"
	switch enc {
	case "", "identity":
		return raw, res, nil
	case "gzip", "x-gzip":
		inflater = func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }
	case "deflate":
		inflater, what = zlib.NewReader, "deflate (zlib) body"
	default:
		return nil, res, fmt.Errorf("%w %q (want gzip, deflate or none)", infer.ErrUnsupportedMedia, infer.Clip(enc))
	}
	if err := res.Grow(inflaterBytes); err != nil {
		return nil, res, err
	}
	zr, err := inflater(raw)
	if err != nil {
		return nil, res, readError(what, err, limit)
	}
	res.Close(zr)
	// The inflated bytes are what the decoder holds: they are charged
	// beside the compressed ones, which the inflater has read.
	return limits.NewReader(&limited{r: zr, n: limit}, res, -1), res, nil
}

// inflaterBytes is what an inflater holds besides the bytes it passes on:
// compress/flate's decompressor (its 32 KiB window, Huffman tables) and
// the reader buffer in front of it, as allocated (TestinflaterBytes).
const inflaterBytes = 48 << 10

// stallGuard fails a body that does not keep arriving: counting only the
// time the server spends waiting in its reads (not the time it takes to
// decode what it read, or to wait for room in the budget), the n-th byte
// must arrive within (n + limits.Chunk)/rate (so the first 64 KiB get a
// second at the default 64 KiB/s, and 8 MiB get 129 s, which the server's
// read timeout cuts shorter). A read that waits past that is ended by
// moving the connection's read deadline to now, and fails with
// infer.ErrSlowBody; the request then answers 408 and gives its budget back.
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
		infer.ErrSlowBody, g.read, g.waited.Round(time.Millisecond), g.rate)
}

// limited fails with infer.ErrTooLarge once more than n bytes have been read.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, infer.ErrTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	if l.n -= int64(n); l.n < 0 {
		return n, infer.ErrTooLarge
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		err = infer.ErrTooLarge
	}
	return n, err
}

// settled reports whether an error met reading a body says already what
// went wrong: bad text (the text checker), no room in the budget, the
// request cut or canceled.
func settled(err error) bool {
	return errors.Is(err, infer.ErrBadRequest) || errors.Is(err, infer.ErrOverBudget) || errors.Is(err, infer.ErrDraining) || errors.Is(err, infer.ErrSlowBody) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// readError wraps an error met reading a body: too large, or malformed.
func readError(what string, err error, limit int64) error {
	if errors.Is(err, infer.ErrTooLarge) {
		return fmt.Errorf("%w: body over %d bytes", infer.ErrTooLarge, limit)
	}
	if settled(err) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return infer.BadRequest("%s: the body ended early", what)
	}
	return infer.BadRequest("%s: %v", what, err)
}

// Errors of a body that is not one JSON object; each wraps infer.ErrBadRequest.
var (
	ErrEmptyBody = errors.New("empty body: want a JSON object")
	errTruncated = errors.New("the body ended inside the JSON object")
	errTrailing  = errors.New("data after the request object")
)

// DecodeJSON decodes one JSON object from rd into v, rejecting unknown
// fields, text that is not UTF-8 or has a lone surrogate escape (see
// textChecker), and anything but white space after it. then runs before the
// decoder reads past the object (values of api.RawData point into its
// buffer).
func DecodeJSON(rd io.Reader, v any, limit int64, then func() error) error {
	tc := newTextChecker(rd)
	defer tc.release()
	rd = tc
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, infer.ErrTooLarge) || settled(err) {
			return readError("", err, limit)
		}
		if err == io.EOF {
			return fmt.Errorf("%w: %w", infer.ErrBadRequest, ErrEmptyBody)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: malformed JSON: %w", infer.ErrBadRequest, errTruncated)
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
				return fmt.Errorf("%w: malformed JSON: %w", infer.ErrBadRequest, errTrailing)
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
