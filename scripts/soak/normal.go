package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "rnnserve/server/inferencepb"
)

// normal is a well-behaved client beside an attack: it sends a small
// bytelm inference back to back (pausing pause between), on one
// keep-alive connection, or on a new connection each time (fresh), and
// counts what it gets. Any answer but a success counts as a failure,
// a 503 with Retry-After (UNAVAILABLE) too.
type normal struct {
	name  string
	fresh bool
	pause time.Duration

	logged atomic.Int32 // failures written to standard error
	mu     sync.Mutex
	ok     int
	fails  map[string]int
	took   []time.Duration
}

func (n *normal) record(err string, took time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == "" {
		n.ok++
		n.took = append(n.took, took)
		return
	}
	if n.fails == nil {
		n.fails = map[string]int{}
	}
	n.fails[err]++
}

// reset starts a new count (a new attack) and returns the last one.
func (n *normal) reset() (ok int, fails map[string]int, took []time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ok, fails, took = n.ok, n.fails, n.took
	n.ok, n.fails, n.took = 0, nil, nil
	return
}

// summary is "ok/all, p50/p99 ms, failures".
func summary(ok int, fails map[string]int, took []time.Duration) string {
	all := ok
	var parts []string
	for k, v := range fails {
		all += v
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
	}
	slices.Sort(parts)
	s := fmt.Sprintf("%d/%d", ok, all)
	if len(took) > 0 {
		slices.Sort(took)
		q := func(f float64) float64 { return ms(took[int(f*float64(len(took)-1))]) }
		s += fmt.Sprintf(" (p50 %.0f, p99 %.0f ms)", q(0.5), q(0.99))
	}
	if len(parts) > 0 {
		s += "; " + strings.Join(parts, ", ")
	}
	return s
}

const normalInfer = `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 8], "data": [84, 104, 101, 32, 113, 117, 105, 99]}],
 "outputs": [{"name": "top_k", "parameters": {"k": 3, "last_step": true}}]}`

// runREST sends REST requests until ctx ends.
func (n *normal) runREST(ctx context.Context, base string) {
	tr := &http.Transport{DisableCompression: true, DisableKeepAlives: n.fresh}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for ctx.Err() == nil {
		start := time.Now()
		resp, err := hc.Post(base+"/v2/models/bytelm/infer", "application/json", strings.NewReader(normalInfer))
		what := ""
		if err != nil {
			what = classify(err)
		} else {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				what = "body: " + classify(err)
			case resp.StatusCode != http.StatusOK:
				what = fmt.Sprint(resp.StatusCode)
			}
		}
		if ctx.Err() == nil || what == "" {
			n.record(what, time.Since(start))
		}
		sleep(ctx, n.pause)
	}
}

// normalRequest is the gRPC form of normalInfer.
func normalRequest() *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "bytelm",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 8},
			Contents: &pb.InferTensorContents{Int64Contents: []int64{84, 104, 101, 32, 113, 117, 105, 99}}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "top_k", Parameters: map[string]*pb.InferParameter{
			"k": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 3}}, "last_step": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}}}}
}

// runGRPC sends gRPC calls until ctx ends, on one connection kept (after
// a few calls before the attack, as a client that has been around) or a
// new one each time.
func (n *normal) runGRPC(ctx context.Context, addr string, ready chan<- struct{}) {
	dial := func() (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	var conn *grpc.ClientConn
	if !n.fresh {
		var err error
		if conn, err = dial(); err != nil {
			panic(err)
		}
		defer conn.Close()
		c := pb.NewGRPCInferenceServiceClient(conn)
		for range 3 {
			c.ModelInfer(ctx, normalRequest())
		}
	}
	close(ready)
	for ctx.Err() == nil {
		start := time.Now()
		cc := conn
		if n.fresh {
			var err error
			if cc, err = dial(); err != nil {
				panic(err)
			}
		}
		call, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := pb.NewGRPCInferenceServiceClient(cc).ModelInfer(call, normalRequest())
		cancel()
		if n.fresh {
			cc.Close()
		}
		what := ""
		if err != nil {
			what = status.Code(err).String()
			if n.logged.Add(1) <= 5 {
				fmt.Fprintf(os.Stderr, "%s client: %v\n", n.name, err)
			}
		}
		if ctx.Err() == nil || what == "" {
			n.record(what, time.Since(start))
		}
		sleep(ctx, n.pause)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// postRaw posts body to url with the headers h (name, value, ...) and
// returns the status or the client-side error.
func postRaw(hc *http.Client, url string, body []byte, h ...string) string {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return classify(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "body: " + classify(err)
	}
	return fmt.Sprint(resp.StatusCode)
}
