package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"rnnserve/internal/fuzzbound"
	"rnnserve/server/internal/infer"
)

// loadgenBody is the body cmd/loadgen sends to bytelm (requestBody).
const loadgenBody = `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 32], "data": [12,200,3,77,0,255,31,9,100,101,102,65,66,67,68,10,13,32,33,250,251,252,1,2,3,4,5,6,7,8,9,10]}], "outputs": [{"name": "hidden", "parameters": {"binary_data": false}}]}`

// tritonBody is what Triton's Python client (tritonclient.http) sends:
// json.dumps of its inputs and requested outputs, keys in its order,
// with an id and sequence parameters.
const tritonBody = `{"id": "42", "parameters": {"sequence_id": 7, "sequence_start": true, "sequence_end": false}, "inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [[[0.5, -1.25, 3e-2], [1e+2, 0, -0.0]]]}, {"name": "len", "shape": [1], "datatype": "INT32", "parameters": {}, "data": [3]}], "outputs": [{"name": "y", "parameters": {"binary_data": true}}, {"name": "top", "parameters": {"binary_data": false, "classification": 3}}]}`

// bothWays decodes body with DecodeInfer (the fast path first) and with
// the full decoder alone, for a request to model m (version v), each
// charging its own count.
func bothWays(body []byte, v string) (fast, slow *infer.Request, ferr, serr error, fc, sc int64) {
	const limit = 1 << 16
	fast, slow = &infer.Request{Model: "m", Version: v}, &infer.Request{Model: "m", Version: v}
	ferr = DecodeInfer(bytes.NewReader(body), -1, limit, func(n int64) error { fc += n; return nil }, fast)
	serr = decodeInfer(bytes.NewReader(body), -1, limit, &TensorMemory{Limit: 2 * limit, Charge: func(n int64) error { sc += n; return nil }}, slow)
	return
}

// sameAsFull fails t unless DecodeInfer gives body what the full decoder
// gives it: the same Request, or the same error, and the same charge.
func sameAsFull(t *testing.T, body []byte) {
	t.Helper()
	for _, v := range []string{"", "1"} {
		fast, slow, ferr, serr, fc, sc := bothWays(body, v)
		if fmt.Sprint(ferr) != fmt.Sprint(serr) || infer.StatusOf(ferr) != infer.StatusOf(serr) {
			t.Errorf("%q: error %v, the full decoder's %v", body, ferr, serr)
		} else if ferr == nil && !reflect.DeepEqual(fast, slow) {
			t.Errorf("%q:\n%+v\nthe full decoder's:\n%+v", body, fast, slow)
		}
		if fc != sc {
			t.Errorf("%q: charged %d, the full decoder %d", body, fc, sc)
		}
	}
}

// TestDecodeSmallTakes: the fast path takes what real clients send, and
// decodes it as the full decoder does.
func TestDecodeSmallTakes(t *testing.T) {
	for _, body := range []string{loadgenBody, tritonBody,
		`{"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2], "data": ["héllo", ""]}], "model_name": "m", "model_version": "1"}`,
		` {"parameters": {"binary_data_output": true, "executor": "batched"}, "inputs": [{"data": [1, 2], "shape": [2], "datatype": "UINT8", "name": "a"}]}` + "\n",
	} {
		r := &infer.Request{Model: "m"}
		if ok, err := decodeSmall([]byte(body), r, nil); !ok || err != nil {
			t.Errorf("%s: fast path %v, %v; want it taken", body, ok, err)
		}
		sameAsFull(t, []byte(body))
	}
}

// trickyBodies are bodies at the edges of what the fast path takes; each
// must decode, or fail, as the full decoder has it.
var trickyBodies = []string{
	``, ` `, `null`, `[]`, `{}`, `{} {}`, `{}x`, `{"inputs": [`, `{"inputs": []}`, `{"inputs": null}`,
	`{"id": "a", "id": "b"}`, `{"id": "\u0061"}`, `{"id": "a\"b"}`, `{"id": "\ud800"}`, "{\"id\": \"\xff\"}", "{\"id\": \"a\tb\"}",
	`{"ID": "x"}`, `{"Inputs": []}`, `{"inputz": []}`, `{"id": 1}`, `{"id": null}`,
	`{"model_name": "other"}`, `{"model_name": "m", "model_version": "2"}`, `{"model_version": ""}`,
	`{"parameters": {"p": null}}`, `{"parameters": {"p": 1.5}}`, `{"parameters": {"p": 1, "p": 2}}`, `{"parameters": {"p": -0}}`, `{"parameters": {"p": 00}}`, `{"parameters": {"p": 01}}`,
	`{"parameters": {"p": 123456789012345678901234}}`, `{"parameters": {"sequence_end": true}}`, `{"parameters": {"sequence_id": 0}}`,
	`{"parameters": {"binary_data_output": "yes"}}`, `{"parameters": {"binary_data_output": false}}`, `{"parameters": {"p": tru}}`,
	`{"parameters": {"p": "\u00e9"}}`, `{"parameters": {"sequence_id": "s", "sequence_start": true}}`,
	`{"outputs": [{"name": "y", "parameters": {"classification": -1}}]}`, `{"outputs": [{"name": "y", "parameters": {"classification": 70000}}]}`,
	`{"outputs": [{"name": "y", "parameters": {"binary_data": 1}}]}`, `{"outputs": [{"name": "y", "parameters": {"shared_memory_region": "r"}}]}`,
	`{"outputs": [{"name": "y", "name": "z"}]}`, `{"outputs": [{"name": "y", "k": 1}]}`, `{"outputs": [{"name": "y", "parameters": {"k": 5, "last_step": true}}]}`,
	`{"outputs": [{}]}`, `{"outputs": []}`,
}

// trickyInputs are inputs, each tried as a body's only input.
var trickyInputs = []string{
	`{"name": "x", "datatype": "INT64", "shape": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "data": [2]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"binary_data_size": 8}}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"shared_memory_region": "r"}}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {}}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1.0]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1e0]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [-0]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [01]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [+1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [9223372036854775807]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [9223372036854775808]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": ["1"]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [true]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": 1}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": null}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1,]}`,
	`{"name": "x", "datatype": "INT8", "shape": [1], "data": [128]}`,
	`{"name": "x", "datatype": "INT8", "shape": [1], "data": [-128]}`,
	`{"name": "x", "datatype": "UINT8", "shape": [1], "data": [-0]}`,
	`{"name": "x", "datatype": "UINT64", "shape": [1], "data": [9223372036854775808]}`,
	`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1e39]}`,
	`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1e400]}`,
	`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.]}`,
	`{"name": "x", "datatype": "FP32", "shape": [1], "data": [.5]}`,
	`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1e-50]}`,
	`{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}`,
	`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1, 2]}`,
	`{"name": "x", "datatype": "FP64", "shape": [1], "data": [1]}`,
	`{"name": "x", "shape": [1], "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [], "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [0], "data": []}`,
	`{"name": "x", "datatype": "INT64", "shape": [-1], "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1.0], "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [01], "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [-0], "data": []}`,
	`{"name": "x", "datatype": "INT64", "shape": [99999999999999999999], "data": [1]}`,
	`{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], [3, 4]]}`,
	`{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2, 3], [4]]}`,
	`{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], 3, 4]}`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [[[[[[[[[1]]]]]]]]]}`,
	`{"name": "x", "datatype": "BYTES", "shape": [1], "data": [1]}`,
	`{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["a\nb"]}`,
	`{"name": "x", "datatype": "BYTES", "shape": [2], "data": [["a"], ["b"]]}`,
	`{"name": "x", "datatype": "BYTES", "shape": [2, 1], "data": [["a"], ["b"]]}`,
	`{"name": "x", "datatype": "BYTES", "shape": [2], "data": [ "a" ,	"b"
	]  }`,
	`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "extra": 0}`,
	`{"name": "x", "Name": "y", "datatype": "INT64", "shape": [1], "data": [1]}`,
	"{\"name\": \"\xc3\", \"datatype\": \"INT64\", \"shape\": [1], \"data\": [1]}",
}

// TestDecodeSmallSame: each tricky body decodes, or fails, as the full
// decoder has it.
func TestDecodeSmallSame(t *testing.T) {
	for _, body := range trickyBodies {
		sameAsFull(t, []byte(body))
	}
	for _, in := range trickyInputs {
		sameAsFull(t, []byte(`{"inputs": [`+in+`]}`))
		sameAsFull(t, []byte(`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": [2.5]}, `+in+`], "outputs": [{"name": "a"}]}`))
	}
	// Longer than the fast path's buffer (a whole one, and more).
	ints := strings.TrimSuffix(strings.Repeat("7,", 3000), ",")
	sameAsFull(t, []byte(`{"inputs": [{"name": "x", "datatype": "INT64", "shape": [3000], "data": [`+ints+`]}]}`))
	exact := `{"id": "` + strings.Repeat("a", smallBody-10) + `"}`
	sameAsFull(t, []byte(exact[:smallBody]+"  "))
	sameAsFull(t, []byte(exact))
	sameAsFull(t, []byte(exact[:smallBody-2]+`"}`))
}

// TestDecodeSmallReadError: a body whose reading fails is refused with
// the reader's error, the fast path's buffer replayed before it.
func TestDecodeSmallReadError(t *testing.T) {
	for _, n := range []int{0, 10, len(loadgenBody), smallBody + 100} {
		body := (`{"id": "` + strings.Repeat("a", n))[:n]
		rd := func() io.Reader {
			return io.MultiReader(strings.NewReader(body), iotest.ErrReader(infer.ErrTooLarge))
		}
		fast, slow := &infer.Request{Model: "m"}, &infer.Request{Model: "m"}
		ferr := DecodeInfer(rd(), -1, 1<<16, nil, fast)
		serr := decodeInfer(rd(), -1, 1<<16, nil, slow)
		if !errors.Is(ferr, infer.ErrTooLarge) || ferr.Error() != serr.Error() {
			t.Errorf("%d bytes, then a failed read: %v, the full decoder %v", n, ferr, serr)
		}
	}
}

// TestDecodeSmallCharge: a charge the fast path makes fails as the full
// decoder's does, and it makes no other.
func TestDecodeSmallCharge(t *testing.T) {
	body := []byte(tritonBody)
	over := errors.New("no room")
	for fail := 0; fail < 3; fail++ {
		var errs [2]error
		var calls [2]int
		for k := range errs {
			charge := func(n int64) error {
				if calls[k]++; calls[k] > fail {
					return over
				}
				return nil
			}
			if k == 0 {
				errs[k] = DecodeInfer(bytes.NewReader(body), -1, 1<<16, charge, &infer.Request{Model: "m"})
			} else {
				errs[k] = decodeInfer(bytes.NewReader(body), -1, 1<<16, &TensorMemory{Limit: 2 << 16, Charge: charge}, &infer.Request{Model: "m"})
			}
		}
		if errs[0] != errs[1] || calls[0] != calls[1] {
			t.Errorf("charge %d fails: %v after %d charges, the full decoder %v after %d", fail, errs[0], calls[0], errs[1], calls[1])
		}
	}
	// Past the tensors' own limit (twice the body limit).
	fast, slow := &infer.Request{Model: "m"}, &infer.Request{Model: "m"}
	ferr := DecodeInfer(strings.NewReader(loadgenBody), -1, 100, nil, fast)
	serr := decodeInfer(strings.NewReader(loadgenBody), -1, 100, &TensorMemory{Limit: 200}, slow)
	if !errors.Is(ferr, infer.ErrTooLarge) || ferr.Error() != serr.Error() {
		t.Errorf("over the tensors' limit: %v, the full decoder %v", ferr, serr)
	}
}

// FuzzDecodeSmall holds the fast path to the full decoder: whatever body
// it takes, the full decoder takes too, with the same Request and the
// same charge; what it does not take it leaves untouched.
func FuzzDecodeSmall(f *testing.F) {
	for _, b := range append([]string{loadgenBody, tritonBody}, trickyBodies...) {
		f.Add([]byte(b))
	}
	for _, in := range trickyInputs {
		f.Add([]byte(`{"inputs": [` + in + `]}`))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzbound.Run(t, len(body), func() {
			const limit = 1 << 16
			for _, v := range []string{"", "1"} {
				var fc, sc int64
				fast, slow := &infer.Request{Model: "m", Version: v}, &infer.Request{Model: "m", Version: v}
				ok, err := decodeSmall(body, fast, &TensorMemory{Limit: 2 * limit, Charge: func(n int64) error { fc += n; return nil }})
				if !ok {
					if err != nil || fc != 0 || !reflect.DeepEqual(fast, &infer.Request{Model: "m", Version: v}) {
						t.Fatalf("not taken, yet %v, %d bytes charged, %+v", err, fc, fast)
					}
					return
				}
				serr := decodeInfer(bytes.NewReader(body), -1, limit, &TensorMemory{Limit: 2 * limit, Charge: func(n int64) error { sc += n; return nil }}, slow)
				switch {
				case err != nil || serr != nil:
					t.Fatalf("taken: %v; the full decoder: %v", err, serr)
				case !reflect.DeepEqual(fast, slow):
					t.Fatalf("taken as\n%+v\nthe full decoder has\n%+v", fast, slow)
				case fc != sc:
					t.Fatalf("taken with %d bytes charged, the full decoder %d", fc, sc)
				}
			}
		})
	})
}

// BenchmarkDecodeInferREST decodes the body cmd/loadgen sends to bytelm.
func BenchmarkDecodeInferREST(b *testing.B) { benchDecode(b, []byte(loadgenBody)) }

// BenchmarkDecodeInferRESTFallback decodes cmd/loadgen's body with an
// escape in a string, which the fast path leaves to the full decoder
// after parsing all of it: what a body it does not take costs.
func BenchmarkDecodeInferRESTFallback(b *testing.B) {
	benchDecode(b, []byte(strings.Replace(loadgenBody, `"name": "hidden"`, `"name": "hidde\u006e"`, 1)))
}

// benchDecode decodes body as a REST infer request, over and over.
func benchDecode(b *testing.B, body []byte) {
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		rd.Reset(body)
		r := infer.Request{Model: "bytelm"}
		if err := DecodeInfer(rd, -1, 1<<20, func(int64) error { return nil }, &r); err != nil {
			b.Fatal(err)
		}
	}
}
