package infer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
	"rnnserve/schedule"
)

// FuzzBinarySplit feeds Triton binary tensor data to the splitter of BYTES
// elements and the fixed-size decoder: any input either decodes to the
// element count its shape asks for, re-encoding to the same bytes, or
// fails with a 400; nothing panics.
func FuzzBinarySplit(f *testing.F) {
	elem := func(parts ...string) []byte {
		var b []byte
		for _, p := range parts {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
			b = append(b, p...)
		}
		return b
	}
	f.Add("BYTES", int64(2), elem("(1 a)", "(2 b)"))
	f.Add("BYTES", int64(1), []byte{0xff, 0xff, 0xff, 0x7f, 'x'})
	f.Add("BYTES", int64(3), elem("", "", ""))
	f.Add("FP32", int64(2), []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40})
	f.Add("INT64", int64(1), []byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add("UINT64", int64(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add("INT32", int64(-1), []byte{})
	f.Fuzz(func(t *testing.T, dt string, n int64, raw []byte) {
		fuzzbound.Run(t, len(dt)+len(raw), func() {
			tn := Tensor{Name: "x", Datatype: dt, Shape: []int64{n}}
			err := tn.DecodeRaw(raw)
			if err != nil {
				if StatusOf(err) != http.StatusBadRequest {
					t.Fatalf("error %v maps to %d", err, StatusOf(err))
				}
				return
			}
			if err := tn.Check(); err != nil {
				t.Fatalf("decoded %d bytes as %s [%d] but check fails: %v", len(raw), dt, n, err)
			}
			out := OutputTensor{Datatype: dt, Float32: tn.Float32, Int64: tn.Int64, Bytes: tn.Bytes}
			if got := out.AppendRaw(nil); !bytes.Equal(got, raw) || out.RawSize() != len(raw) {
				t.Fatalf("%s [%d]: %x re-encodes as %x", dt, n, raw, got)
			}
		})
	})
}

func TestStatusOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("model %q: %w", "m", err) }
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{BadRequest("shape %v", []int64{-1}), http.StatusBadRequest},
		{wrap(schedule.ErrInput), http.StatusBadRequest},
		{wrap(ErrNotLanguageModel), http.StatusBadRequest},
		{wrap(ErrUnsupportedOutput), http.StatusBadRequest},
		{wrap(ErrResponseTooLarge), http.StatusBadRequest},
		{wrap(ErrNoRepository), http.StatusBadRequest},
		{fmt.Errorf("%w: files do not load", ErrLoad), http.StatusBadRequest},
		{fmt.Errorf("%w: %w", ErrLoad, ErrNotInRepository), http.StatusNotFound},
		{fmt.Errorf("%w: %w", ErrLoad, ErrUnknownModel), http.StatusNotFound},
		{wrap(ErrUnauthenticated), http.StatusUnauthorized},
		{wrap(ErrForbidden), http.StatusForbidden},
		{wrap(ErrTooLarge), http.StatusRequestEntityTooLarge},
		{wrap(ErrUnsupportedMedia), http.StatusUnsupportedMediaType},
		{wrap(ErrSlowBody), http.StatusRequestTimeout},
		{wrap(ErrUnknownModel), http.StatusNotFound},
		{wrap(ErrUnknownVersion), http.StatusNotFound},
		{wrap(ErrUnknownSequence), http.StatusNotFound},
		{wrap(ErrSequenceEnded), http.StatusGone},
		{wrap(ErrSequenceExpired), http.StatusGone},
		{wrap(ErrSequenceBusy), http.StatusConflict},
		{wrap(ErrTooManySequences), http.StatusTooManyRequests},
		{wrap(ErrBusy), http.StatusServiceUnavailable},
		{wrap(ErrDraining), http.StatusServiceUnavailable},
		{wrap(ErrOverBudget), http.StatusServiceUnavailable},
		{wrap(context.Canceled), 499},
		{wrap(context.DeadlineExceeded), 499},
		{wrap(ErrInternal), http.StatusInternalServerError},
		{errors.New("something else"), http.StatusInternalServerError},
	} {
		if got := StatusOf(c.err); got != c.want {
			t.Errorf("StatusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestSetParameters(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Params
		want SequenceControl
		rest Params
		err  string
	}{
		{"none", Params{}, SequenceControl{}, Params{}, ""},
		{"string id", Params{"sequence_id": "s", "sequence_start": true, "k": int64(3)}, SequenceControl{ID: "s", Start: true}, Params{"k": int64(3)}, ""},
		{"int id", Params{"sequence_id": int64(12), "sequence_end": true}, SequenceControl{ID: "12", End: true}, Params{}, ""},
		{"uint id", Params{"sequence_id": uint64(math.MaxUint64)}, SequenceControl{ID: "18446744073709551615"}, Params{}, ""},
		{"negative id", Params{"sequence_id": int64(-1)}, SequenceControl{}, nil, "-1 is not an unsigned integer"},
		{"float id", Params{"sequence_id": 1.5}, SequenceControl{}, nil, "1.5 is not an unsigned integer"},
		{"bool id", Params{"sequence_id": true}, SequenceControl{}, nil, "must be a string or an unsigned integer"},
		{"zero id", Params{"sequence_id": int64(0)}, SequenceControl{}, nil, "must not be empty or 0"},
		{"empty id", Params{"sequence_id": ""}, SequenceControl{}, nil, "must not be empty or 0"},
		{"long id", Params{"sequence_id": strings.Repeat("x", MaxSequenceID+1)}, SequenceControl{}, nil, "longer than 256 bytes"},
		{"start not bool", Params{"sequence_id": "s", "sequence_start": "yes"}, SequenceControl{}, nil, "sequence_start must be a boolean"},
		{"end without id", Params{"sequence_end": true}, SequenceControl{}, nil, "without sequence_id"},
	} {
		var r Request
		err := r.SetParameters(c.p)
		if c.err != "" {
			if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want a bad request with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || r.Sequence != c.want || !reflect.DeepEqual(r.Parameters, c.rest) {
			t.Errorf("%s: %+v %v (%v), want %+v %v", c.name, r.Sequence, r.Parameters, err, c.want, c.rest)
		}
	}
}

func TestParams(t *testing.T) {
	p := Params{"b": true, "i": int64(5), "u": uint64(math.MaxUint64), "f": 0.5, "s": "x"}
	if v, ok, err := p.Bool("b"); !v || !ok || err != nil {
		t.Errorf("Bool(b) = %v %v %v", v, ok, err)
	}
	if _, ok, err := p.Bool("i"); !ok || !errors.Is(err, ErrBadRequest) {
		t.Errorf("Bool(i) = %v %v, want a bad request", ok, err)
	}
	if v, ok, err := p.Int("i", 1, 5); v != 5 || !ok || err != nil {
		t.Errorf("Int(i, 1, 5) = %v %v %v", v, ok, err)
	}
	if _, _, err := p.Int("i", 1, 4); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Int(i, 1, 4) = %v, want out of range", err)
	}
	if _, _, err := p.Int("u", 0, math.MaxInt64-1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Int(u) = %v, want out of range", err)
	}
	if _, _, err := p.Int("f", 0, 1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Int(f) = %v, want not an integer", err)
	}
	for key, want := range map[string]float64{"i": 5, "u": math.MaxUint64, "f": 0.5} {
		if v, ok, err := p.Float(key); v != want || !ok || err != nil {
			t.Errorf("Float(%s) = %v %v %v, want %v", key, v, ok, err, want)
		}
	}
	if _, _, err := p.Float("s"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Float(s) = %v, want not a number", err)
	}
	if v, ok, err := p.String("s"); v != "x" || !ok || err != nil {
		t.Errorf("String(s) = %v %v %v", v, ok, err)
	}
	if _, _, err := p.String("b"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("String(b) = %v, want not a string", err)
	}
	for _, get := range []func() (bool, error){
		func() (bool, error) { _, ok, err := p.Bool("absent"); return ok, err },
		func() (bool, error) { _, ok, err := p.Int("absent", 0, 1); return ok, err },
		func() (bool, error) { _, ok, err := p.Float("absent"); return ok, err },
		func() (bool, error) { _, ok, err := p.String("absent"); return ok, err },
	} {
		if ok, err := get(); ok || err != nil {
			t.Errorf("an absent parameter reads as present (%v) or fails (%v)", ok, err)
		}
	}
	if err := p.Only("output", "b", "i", "u", "f", "s"); err != nil {
		t.Errorf("Only with every key: %v", err)
	}
	if err := p.Only("output", "b", "i", "u", "f"); err == nil || !strings.Contains(err.Error(), `output: unknown parameter "s"`) {
		t.Errorf("Only without s: %v", err)
	}
	if err := (Params{"x": true}).Only("input"); err == nil || !strings.Contains(err.Error(), "none are taken") {
		t.Errorf("Only with no known keys: %v", err)
	}
}

func TestElements(t *testing.T) {
	for _, c := range []struct {
		shape []int64
		n     int
		err   string
	}{
		{nil, 1, ""},
		{[]int64{2, 3, 4}, 24, ""},
		{[]int64{0, 1 << 40}, 0, ""},
		{[]int64{2, -1}, 0, "negative dimension"},
		{[]int64{1 << 16, 1 << 16}, 0, "more than 2147483647 elements"},
		{[]int64{math.MaxInt64, 2}, 0, "more than 2147483647 elements"},
	} {
		n, err := Elements(c.shape)
		if c.err != "" {
			if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Elements(%v) = %d, %v, want %q", c.shape, n, err, c.err)
			}
			continue
		}
		if n != c.n || err != nil {
			t.Errorf("Elements(%v) = %d, %v, want %d", c.shape, n, err, c.n)
		}
	}
}

// TestRawIntegerWidths decodes each integer width, signed and unsigned,
// and writes it back: the values are sign- or zero-extended as the
// datatype says, and UINT64 above the int64 range is refused.
func TestRawIntegerWidths(t *testing.T) {
	ones := func(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }
	for _, c := range []struct {
		dt   string
		raw  []byte
		want int64
	}{
		{"INT8", ones(1), -1},
		{"UINT8", ones(1), 255},
		{"INT16", ones(2), -1},
		{"UINT16", ones(2), 65535},
		{"INT32", ones(4), -1},
		{"UINT32", ones(4), math.MaxUint32},
		{"INT64", ones(8), -1},
		{"UINT64", binary.LittleEndian.AppendUint64(nil, math.MaxInt64), math.MaxInt64},
	} {
		tn := Tensor{Name: "x", Datatype: c.dt, Shape: []int64{1}}
		if err := tn.DecodeRaw(c.raw); err != nil || len(tn.Int64) != 1 || tn.Int64[0] != c.want {
			t.Errorf("%s %x: %v (%v), want %d", c.dt, c.raw, tn.Int64, err, c.want)
			continue
		}
		out := OutputTensor{Datatype: c.dt, Int64: tn.Int64}
		if got := out.AppendRaw(nil); !bytes.Equal(got, c.raw) {
			t.Errorf("%s %d writes as %x, want %x", c.dt, c.want, got, c.raw)
		}
	}
	tn := Tensor{Name: "x", Datatype: "UINT64", Shape: []int64{1}}
	if err := tn.DecodeRaw(ones(8)); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("UINT64 max: %v, want out of range", err)
	}
	tn = Tensor{Name: "x", Datatype: "FP16", Shape: []int64{1}}
	if err := tn.DecodeRaw(ones(2)); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("FP16: %v, want not supported", err)
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		t   Tensor
		err string
	}{
		{Tensor{Name: "x", Datatype: "FP32", Shape: []int64{2}, Float32: []float32{1, 2}}, ""},
		{Tensor{Name: "x", Datatype: "INT32", Shape: []int64{1, 2}, Int64: []int64{1, 2}}, ""},
		{Tensor{Name: "x", Datatype: "BYTES", Shape: []int64{0}}, ""},
		{Tensor{Name: "x", Datatype: "FP32", Shape: []int64{3}, Float32: []float32{1, 2}}, "2 values, want 3"},
		{Tensor{Name: "x", Datatype: "INT64", Shape: []int64{2}, Float32: []float32{1, 2}}, "0 values, want 2"},
		{Tensor{Name: "x", Datatype: "BOOL", Shape: []int64{1}}, `datatype "BOOL" is not supported`},
		{Tensor{Name: "x", Datatype: "FP32", Shape: []int64{-2}}, "negative dimension"},
	} {
		err := c.t.Check()
		if (c.err == "") != (err == nil) || err != nil && (!errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s %v: %v, want %q", c.t.Datatype, c.t.Shape, err, c.err)
		}
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("a", maxEcho+1)
	if got := Clip(long); got != long[:maxEcho]+"..." {
		t.Errorf("Clip of %d bytes = %q", len(long), got)
	}
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	shape := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := ClipShape(shape); len(got) != 8 {
		t.Errorf("ClipShape of 10 dimensions keeps %d", len(got))
	}
	err := BadRequest("input %q", Clip(long))
	if !errors.Is(err, ErrBadRequest) || strings.Contains(err.Error(), long) {
		t.Errorf("BadRequest = %v", err)
	}
}

func TestExpectOutputs(t *testing.T) {
	outs := []PlannedOutput{{Name: "y", Datatype: "FP32", Shape: []int64{2, 3}}}
	var r Request
	if err := r.ExpectOutputs(outs); err != nil {
		t.Fatalf("without a plan: %v", err)
	}
	var got []PlannedOutput
	r.Plan = func(p []PlannedOutput) error { got = p; return ErrResponseTooLarge }
	if err := r.ExpectOutputs(outs); err != ErrResponseTooLarge || !reflect.DeepEqual(got, outs) {
		t.Errorf("with a plan: %v, saw %v", err, got)
	}
}
