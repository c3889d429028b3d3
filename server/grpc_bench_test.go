package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/wire"
)

// BenchmarkGRPCOverhead compares the in-process overhead of the gRPC path
// with the REST path for one 32-token request asking for the final hidden
// state, the engine stubbed out as in BenchmarkRESTOverhead. Each
// iteration runs one request each way, alternating, so both see the same
// machine; the metrics are their mean times. gRPC: the request message
// decoded from its wire bytes, the handler (conversion, lookup,
// statistics, metrics) and the response encoded to wire bytes, the work
// grpc-go's codec and our handler do (HTTP/2 framing left out); REST:
// gin's routing, the JSON body decoded and the response encoded (HTTP/1.1
// parsing left out). Output "raw" is JSON output for REST against
// raw_output_contents for gRPC; "binary" is binary tensor data against
// raw; "typed" JSON against typed contents. Run with
//
//	go test ./server/ -run '^$' -bench GRPCOverhead -benchtime 2s -count 3
func BenchmarkGRPCOverhead(b *testing.B) {
	for _, bm := range benchModels(b) {
		s := stubServer(b, bm)
		h := s.Handler()
		svc := &grpcService{s: s}
		toks := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(bm.ids)), ","), "[]")
		for _, c := range []struct {
			name       string
			restBinary bool
			grpcRaw    bool
		}{{"json-vs-raw", false, true}, {"binary-vs-raw", true, true}, {"json-vs-typed", false, false}} {
			body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": [%s]}], "outputs": [{"name": "hidden", "parameters": {"binary_data": %v}}]}`,
				len(bm.ids), toks, c.restBinary)
			wire, err := proto.Marshal(&pb.ModelInferRequest{ModelName: bm.entry.Name,
				Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, int64(len(bm.ids))},
					Contents: &pb.InferTensorContents{Int64Contents: bm.ids}}},
				Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden",
					Parameters: map[string]*pb.InferParameter{wire.ParamBinary: wire.ParamToGRPC(c.grpcRaw)}}}})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s", bm.entry.Name, c.name), func(b *testing.B) {
				b.ReportAllocs()
				var rest, grpc time.Duration
				for b.Loop() {
					t0 := time.Now()
					req := httptest.NewRequest(http.MethodPost, "/v2/models/"+bm.entry.Name+"/infer", strings.NewReader(body))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("REST: %d %s", w.Code, w.Body)
					}
					t1 := time.Now()
					var in pb.ModelInferRequest
					if err := proto.Unmarshal(wire, &in); err != nil {
						b.Fatal(err)
					}
					resp, err := svc.ModelInfer(b.Context(), &in)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := proto.Marshal(resp); err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					rest += t1.Sub(t0)
					grpc += t2.Sub(t1)
				}
				n := float64(b.N)
				b.ReportMetric(float64(rest.Microseconds())/n, "rest-µs/req")
				b.ReportMetric(float64(grpc.Microseconds())/n, "grpc-µs/req")
				b.ReportMetric(float64(grpc)/float64(rest), "grpc/rest")
			})
		}
	}
}
