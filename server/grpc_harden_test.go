package server

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "rnnserve/server/inferencepb"
)

// grpcOn serves s's gRPC front end (s started or not) until the test ends.
func grpcOn(t *testing.T, s *Server) (*GRPCServer, *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := s.NewGRPC()
	go gs.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Close()
	})
	return gs, conn
}

// generateReq is a gRPC generation request for the test repository's lm.
func generateReq(prompt []byte, maxTokens int64) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "lm", Parameters: map[string]*pb.InferParameter{"max_tokens": i64Param(maxTokens)},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1},
			Contents: &pb.InferTensorContents{BytesContents: [][]byte{prompt}}}}}
}

// TestGRPCLameDuckBudgetText: the lame-duck period turns the health
// service and ServerReady at once while calls are still served; the
// memory budget refuses with UNAVAILABLE; decoded tensors are bounded;
// text that is not UTF-8 is INVALID_ARGUMENT.
func TestGRPCLameDuckBudgetText(t *testing.T) {
	g := newGRPCTest(t, func(o *Options) {
		o.MaxBodyBytes = 64 << 10
		o.Budget = BudgetOptions{Bytes: 128 << 10, Wait: 100 * time.Millisecond}
	})
	ctx := t.Context()
	infer := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2, 3}})}}

	// Budget.
	hold := g.s.budget.Reserve(context.Background())
	if err := hold.Grow(g.s.budget.Size()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := g.c.ModelInfer(ctx, infer); codeOf(err) != codes.Unavailable || !strings.Contains(err.Error(), "memory budget") || time.Since(start) < 90*time.Millisecond {
		t.Errorf("infer with the budget full: %v after %v, want UNAVAILABLE after the wait", err, time.Since(start))
	}
	hold.Release()
	if _, err := g.c.ModelInfer(ctx, infer); err != nil {
		t.Errorf("infer with room: %v", err)
	}
	raw := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT8", Shape: []int64{1, 60000}}},
		RawInputContents: [][]byte{make([]byte, 60000)}}
	if _, err := g.c.ModelInfer(ctx, raw); codeOf(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "decoded tensors") {
		t.Errorf("60000 raw INT8 (480 KB as int64): %v, want RESOURCE_EXHAUSTED", err)
	}
	if used := g.s.budget.InUse(); used != 0 {
		t.Errorf("%d bytes of the budget not given back", used)
	}

	// Text.
	for _, p := range [][]byte{[]byte("a\xffb"), []byte("\xed\xa0\x80"), []byte("ab\xe2")} {
		if _, err := g.c.ModelInfer(ctx, generateReq(p, 2)); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("text_input %q: %v, want INVALID_ARGUMENT", p, err)
		}
	}
	stop := generateReq([]byte("ab"), 2)
	stop.Inputs = append(stop.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "stop", Datatype: "BYTES", Shape: []int64{1},
		Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("\xc0")}}})
	if _, err := g.c.ModelInfer(ctx, stop); codeOf(err) != codes.InvalidArgument {
		t.Errorf("stop string not UTF-8: %v, want INVALID_ARGUMENT", err)
	}

	// Lame duck.
	h := healthpb.NewHealthClient(g.conn)
	g.s.LameDuck()
	for _, svc := range []string{"", "inference.GRPCInferenceService"} {
		if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q in the lame-duck period: %v %v, want NOT_SERVING", svc, r, err)
		}
	}
	if r, err := g.c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || r.Ready {
		t.Errorf("ServerReady in the lame-duck period: %v %v", r, err)
	}
	if _, err := g.c.ModelInfer(ctx, infer); err != nil {
		t.Errorf("infer in the lame-duck period: %v", err)
	}
}

// TestGRPCDrainAndCut: Drain waits for a stream in flight without cutting
// it; Cut ends its generation with an error_message response and a
// unary generation with UNAVAILABLE; Close then ends the connections.
func TestGRPCDrainAndCut(t *testing.T) {
	s, _ := newSlowServer(t)
	gs, conn := grpcOn(t, s)
	c := pb.NewGRPCInferenceServiceClient(conn)
	stream, err := c.ModelStreamInfer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(generateReq([]byte("abc"), 4000)); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.ErrorMessage != "" {
		t.Fatalf("first token: %v %v", first, err)
	}
	unary := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(context.Background(), generateReq([]byte("xyz"), 4000))
		unary <- err
	}()
	for s.InFlight() < 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := gs.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain with a stream in flight: %v, want its deadline", err)
	}
	if cut := s.Cut(); len(cut) != 2 || !strings.Contains(cut[0], "(grpc)") {
		t.Errorf("Cut: %q, want the two gRPC generations", cut)
	}
	var last *pb.ModelStreamInferResponse
	tokens := 1
	for {
		r, err := stream.Recv()
		if err != nil {
			break
		}
		if r.ErrorMessage != "" {
			last = r
			break
		}
		tokens++
	}
	if last == nil || !strings.Contains(last.ErrorMessage, "drain timeout") || tokens < 1 {
		t.Errorf("stream after Cut: %d tokens then %v, want an error_message naming the drain timeout", tokens, last)
	}
	if err := <-unary; codeOf(err) != codes.Unavailable || !strings.Contains(err.Error(), "drain timeout") {
		t.Errorf("unary generation after Cut: %v, want UNAVAILABLE", err)
	}
	stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			if err != io.EOF {
				t.Logf("stream ended: %v", err)
			}
			break
		}
	}
	gs.Close()
}
