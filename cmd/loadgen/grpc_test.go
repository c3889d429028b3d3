package main

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "rnnserve/server/inferencepb"
)

// fakeInference answers ModelInfer after a millisecond, failing every
// third request, and checks each request's shape.
type fakeInference struct {
	pb.UnimplementedGRPCInferenceServiceServer
	n   atomic.Int64
	bad atomic.Int64 // malformed requests seen
}

func (f *fakeInference) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (f *fakeInference) ModelInfer(_ context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	in := r.GetInputs()
	if r.ModelName != "m" || len(in) != 1 || len(in[0].GetContents().GetInt64Contents()) != 5 || len(r.Outputs) != 1 || r.Outputs[0].Name != "hidden" {
		f.bad.Add(1)
	}
	for _, id := range in[0].GetContents().GetInt64Contents() {
		if id < 0 || id >= 10 {
			f.bad.Add(1)
		}
	}
	time.Sleep(time.Millisecond)
	if f.n.Add(1)%3 == 0 {
		return nil, errors.New("every third fails")
	}
	return &pb.ModelInferResponse{}, nil
}

func TestDriveGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	fake := &fakeInference{}
	pb.RegisterGRPCInferenceServiceServer(gs, fake)
	go gs.Serve(ln)
	defer gs.Stop()
	fl, err := grpcFloor(ln.Addr().String(), 50*time.Millisecond)
	if err != nil || fl <= 0 {
		t.Fatalf("floor %v %v", fl, err)
	}
	r, err := driveGRPC(ln.Addr().String(), "m", 4, 5, 10, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.lat) == 0 || r.errors == 0 || int64(len(r.lat)+r.errors) > fake.n.Load() || fake.bad.Load() != 0 {
		t.Fatalf("%d ok, %d errors, %d served, %d malformed", len(r.lat), r.errors, fake.n.Load(), fake.bad.Load())
	}
	if r.pct(0.5) < time.Millisecond || r.pct(0.99) < r.pct(0.5) {
		t.Errorf("p50 %v p99 %v", r.pct(0.5), r.pct(0.99))
	}
}
