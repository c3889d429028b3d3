package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "rnnserve/server/inferencepb"
)

// dialGRPC connects to the server's gRPC API.
func dialGRPC(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
}

// grpcFloor is the median time of ServerLive, one client, back to back
// for d: the gRPC counterpart of httpFloor.
func grpcFloor(addr string, d time.Duration) (time.Duration, error) {
	conn, err := dialGRPC(addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end) || len(lat) < 5; {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t0 := time.Now()
		_, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("ServerLive: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], nil
}

// grpcRequest is a ModelInfer request of one sequence of random tokens
// asking for the final hidden state (raw, the gRPC default).
func grpcRequest(rng *rand.Rand, model string, steps, vocab int) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: model,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, int64(steps)},
			Contents: &pb.InferTensorContents{Int64Contents: randomTokens(rng, steps, vocab)}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden"}}}
}

// driveGRPC drives the gRPC API with n clients for d, each on its own
// connection (as REST's clients each have theirs).
func driveGRPC(addr, model string, n, steps, vocab int, d time.Duration) (*result, error) {
	conns := make([]*grpc.ClientConn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		var err error
		if conns[i], err = dialGRPC(addr); err != nil {
			return nil, err
		}
	}
	return drive(n, d, func(i int) func(context.Context) error {
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		c := pb.NewGRPCInferenceServiceClient(conns[i])
		// Each call gets its own minute, as REST's do (http.Client's
		// Timeout): a call in flight when the run ends finishes and counts,
		// instead of failing on the run's deadline.
		return func(context.Context) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.ModelInfer(ctx, grpcRequest(rng, model, steps, vocab))
			return err
		}
	}), nil
}
