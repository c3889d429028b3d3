package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
	"rnnserve/server"
)

// TestGRPCFlag: gRPC listens on 127.0.0.1:8081 unless the file or -grpc
// says otherwise; off and an empty -grpc turn it off.
func TestGRPCFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(file, []byte("grpc_listen: 127.0.0.1:9000\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
		off  bool
	}{
		{nil, "127.0.0.1:8081", false},
		{[]string{"-grpc-listen", "127.0.0.1:7"}, "127.0.0.1:7", false},
		{[]string{"-grpc-listen", "off"}, "off", true},
		{[]string{"-grpc-listen", ""}, "", true},
		{[]string{"-config", file}, "127.0.0.1:9000", false},
		{[]string{"-config", file, "-grpc-listen", "off"}, "off", true},
	} {
		cfg, err := parse(c.args)
		if err != nil || cfg.GRPCListen != c.want || grpcOff(cfg.GRPCListen) != c.off {
			t.Errorf("%q: %q %v, want %q", c.args, cfg.GRPCListen, err, c.want)
		}
	}
	f, err := listenGRPC("off", nil)
	if f != nil || err != nil || f.addr() != "off" || f.stop(context.Background()) != nil {
		t.Errorf("off: %v %v", f, err)
	}
	f.serve(nil) // a nil front end serves nothing
}

// TestGRPCFront serves the bundled models' gRPC front end the way run
// does, checks its health service, and stops it.
func TestGRPCFront(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the bundled models")
	}
	entries, err := server.LoadRepository(bundled.FS)
	if err != nil {
		t.Fatal(err)
	}
	o := server.DefaultOptions()
	o.CacheBytes, o.PrivateCacheBytes, o.TrafficSteps = 1<<20, 256<<10, 4
	pools := server.Pools{}
	for _, n := range server.PoolSizes(o) {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			t.Fatal(err)
		}
		pools[n] = p
		defer p.Close()
	}
	srv, err := server.New(entries, o, server.Deps{Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Stop(context.Background())
	f, err := listenGRPC("127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	f.serve(errc)
	conn, err := grpc.NewClient(f.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "inference.GRPCInferenceService"})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
	select {
	case err := <-errc:
		t.Errorf("serve failed: %v", err)
	default:
	}
}
