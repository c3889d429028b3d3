package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"rnnserve/internal/fuzzbound"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/infer"
)

// sendWith sends a request with the given header lines (name, value, name,
// value...; a name may repeat) and returns the response and its body.
func sendWith(t testing.TB, method, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// postWith posts body to url with the given header lines and returns the
// status and body.
func postWith(t testing.TB, url, body string, header ...string) (int, string) {
	t.Helper()
	resp, b := sendWith(t, http.MethodPost, url, body, header...)
	return resp.StatusCode, b
}

// TestSequenceHeader runs a sequence whose id travels only in the
// X-Sequence-Id header, one whose id is in both, and checks the outputs
// against the whole input; then every way the header and the body can
// disagree, and malformed headers.
func TestSequenceHeader(t *testing.T) {
	s, hs := newTestServer(t, nil, true)
	url := hs.URL + "/v2/models/lm/infer"
	all := []int64{5, 6, 7, 8, 9, 10, 11}
	parts := [][]int64{all[:3], all[3:4], all[4:]}
	want := reference(t, s, "lm", [][]int64{all}, nil, nil)
	for _, c := range []struct {
		name, header, bodyID string
	}{
		{"header only", "seq-h", ""},
		{"header and an equal string id", "seq-b", `"seq-b"`},
		{"header and an equal integer id", "4711", `4711`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var last map[string][]float64
			for i, p := range parts {
				var params []string
				if c.bodyID != "" {
					params = append(params, `"sequence_id": `+c.bodyID)
				}
				if i == 0 {
					params = append(params, `"sequence_start": true`)
				}
				if i == len(parts)-1 {
					params = append(params, `"sequence_end": true`)
				}
				code, body := postWith(t, url, `{"parameters": {`+strings.Join(params, ", ")+`}, "inputs": [`+tokensJSON([][]int64{p})+`], "outputs": [{"name": "hidden"}]}`,
					SequenceHeader, c.header)
				if code != http.StatusOK {
					t.Fatalf("part %d: %d %s", i, code, body)
				}
				last = parseOutputs(t, []byte(body))
			}
			near(t, "hidden", last["hidden"], want.HN)
			// The sequence ended: the header alone says which.
			if code, body := postWith(t, url, `{"inputs": [`+tokensJSON([][]int64{{1}})+`]}`, SequenceHeader, c.header); code != http.StatusGone {
				t.Errorf("after the end: %d %s, want 410", code, body)
			}
		})
	}

	one := `{"inputs": [` + tokensJSON([][]int64{{1}}) + `]}`
	withID := func(id string) string {
		return `{"parameters": {"sequence_id": ` + id + `, "sequence_start": true}, "inputs": [` + tokensJSON([][]int64{{1}}) + `]}`
	}
	for _, c := range []struct {
		name   string
		body   string
		header []string
		code   int
		want   string
	}{
		{"unknown sequence by header", one, []string{SequenceHeader, "nobody"}, http.StatusNotFound, `unknown sequence: \"nobody\"`},
		{"body and header differ", withID(`"a"`), []string{SequenceHeader, "b"}, http.StatusBadRequest, `parameter sequence_id \"a\", but header X-Sequence-Id is \"b\"`},
		{"integer body, other header", withID(`12`), []string{SequenceHeader, "012"}, http.StatusBadRequest, `parameter sequence_id \"12\", but header X-Sequence-Id is \"012\"`},
		{"empty header", one, []string{SequenceHeader, ""}, http.StatusBadRequest, "header X-Sequence-Id is empty"},
		{"header twice", one, []string{SequenceHeader, "a", SequenceHeader, "a"}, http.StatusBadRequest, "given 2 times"},
		{"header with a space", one, []string{SequenceHeader, "a b"}, http.StatusBadRequest, "visible ASCII without commas"},
		{"header with a comma", one, []string{SequenceHeader, "a,b"}, http.StatusBadRequest, "visible ASCII without commas"},
		{"header not ASCII", one, []string{SequenceHeader, "s\xc3\xa9q"}, http.StatusBadRequest, "visible ASCII without commas"},
		{"header 0", one, []string{SequenceHeader, "0"}, http.StatusBadRequest, "X-Sequence-Id is 0"},
		{"header too long", one, []string{SequenceHeader, strings.Repeat("x", infer.MaxSequenceID+1)}, http.StatusBadRequest, "longer than 256 bytes"},
		{"header on generate", `{"prompt": "hi"}`, []string{SequenceHeader, "g"}, http.StatusBadRequest, "generation keeps no sequence state"},
	} {
		u := url
		if strings.Contains(c.body, "prompt") {
			u = hs.URL + "/v2/models/lm/generate"
		}
		code, body := postWith(t, u, c.body, c.header...)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, code, body, c.code, c.want)
		}
	}
}

// TestSequenceMetadata is TestSequenceHeader's gRPC half: the id in the
// x-sequence-id metadata, for unary calls and for every request of a
// stream, and the same refusals with gRPC codes.
func TestSequenceMetadata(t *testing.T) {
	g := newGRPCTest(t, nil)
	all := []int64{5, 6, 7, 8, 9, 10, 11}
	parts := [][]int64{all[:3], all[3:4], all[4:]}
	outs := []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden"}}
	whole, err := g.c.ModelInfer(t.Context(), &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{all})}, Outputs: outs})
	if err != nil {
		t.Fatal(err)
	}
	want := grpcOutputs(t, whole)
	part := func(i int, params map[string]*pb.InferParameter) *pb.ModelInferRequest {
		if params == nil {
			params = map[string]*pb.InferParameter{}
		}
		params["sequence_start"], params["sequence_end"] = boolParam(i == 0), boolParam(i == len(parts)-1)
		return &pb.ModelInferRequest{ModelName: "lm", Parameters: params, Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{parts[i]})}, Outputs: outs}
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), SequenceMetadata, "md-1")
	var last *pb.ModelInferResponse
	for i := range parts {
		if last, err = g.c.ModelInfer(ctx, part(i, nil)); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	sameOutputs(t, "unary, metadata only", want, grpcOutputs(t, last))

	// A stream whose metadata names the sequence of all its requests; the
	// last also names it in its parameters.
	stream, err := g.c.ModelStreamInfer(metadata.AppendToOutgoingContext(t.Context(), SequenceMetadata, "md-2"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		var params map[string]*pb.InferParameter
		if i == 2 {
			params = map[string]*pb.InferParameter{"sequence_id": strParam("md-2")}
		}
		if err := stream.Send(part(i, params)); err != nil {
			t.Fatal(err)
		}
	}
	stream.CloseSend()
	for i := 0; ; i++ {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if i != len(parts) {
				t.Errorf("%d responses, want %d", i, len(parts))
			}
			break
		}
		if err != nil || r.ErrorMessage != "" {
			t.Fatalf("stream response %d: %v %s", i, err, r.GetErrorMessage())
		}
		last = r.InferResponse
	}
	sameOutputs(t, "stream, metadata", want, grpcOutputs(t, last))

	for _, c := range []struct {
		name  string
		md    []string
		param *pb.InferParameter
		code  codes.Code
		want  string
	}{
		{"unknown sequence", []string{SequenceMetadata, "nobody"}, nil, codes.NotFound, "unknown sequence"},
		{"metadata and parameter differ", []string{SequenceMetadata, "a"}, strParam("b"), codes.InvalidArgument, `parameter sequence_id "b", but metadata x-sequence-id is "a"`},
		{"metadata twice", []string{SequenceMetadata, "a", SequenceMetadata, "a"}, nil, codes.InvalidArgument, "given 2 times"},
		{"metadata with a comma", []string{SequenceMetadata, "a,b"}, nil, codes.InvalidArgument, "visible ASCII without commas"},
		{"metadata empty", []string{SequenceMetadata, ""}, nil, codes.InvalidArgument, "is empty"},
	} {
		req := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})}}
		if c.param != nil {
			req.Parameters = map[string]*pb.InferParameter{"sequence_id": c.param, "sequence_start": boolParam(true)}
		}
		_, err := g.c.ModelInfer(metadata.AppendToOutgoingContext(t.Context(), c.md...), req)
		if codeOf(err) != c.code || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v with %q", c.name, err, c.code, c.want)
		}
	}
	gen := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1},
		Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("hi")}}}}}
	if _, err := g.c.ModelInfer(metadata.AppendToOutgoingContext(t.Context(), SequenceMetadata, "g"), gen); codeOf(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "generation keeps no sequence state") {
		t.Errorf("metadata on a generation: %v", err)
	}
}

// FuzzSequenceIDFrom: whatever the header holds, the reader answers an
// id it accepts (visible ASCII, no comma, at most infer.MaxSequenceID bytes,
// the header's very text) or an ErrBadRequest.
func FuzzSequenceIDFrom(f *testing.F) {
	for _, s := range []string{"abc", "", "0", "a,b", "a b", "s\xc3\xa9q", "4711", strings.Repeat("x", 300)} {
		f.Add(s, false)
	}
	f.Add("a", true)
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		fuzzbound.Run(t, len(v), func() {
			values := []string{v}
			if twice {
				values = append(values, v)
			}
			id, err := sequenceIDFrom(values, "header X")
			if err != nil {
				if !errors.Is(err, ErrBadRequest) || id != "" {
					t.Fatalf("%q: %q, %v", v, id, err)
				}
				return
			}
			if twice || id != v || id == "" || id == "0" || len(id) > infer.MaxSequenceID || strings.ContainsAny(id, ", ") {
				t.Fatalf("%q accepted as %q", v, id)
			}
			for i := range len(id) {
				if id[i] < '!' || id[i] > '~' {
					t.Fatalf("%q accepted with byte %d", v, id[i])
				}
			}
		})
	})
}
