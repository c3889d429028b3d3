package server

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/connlimit"
)

// TestGRPCConnOfBothEnds: a client that uses one port for connections to
// two of the server's ports has each call matched to its own connection
// (by both ends), so its known small connection stays known when another
// connection from the same port opens.
func TestGRPCConnOfBothEnds(t *testing.T) {
	const body = 1 << 20
	s, _ := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = body
		o.Budget = BudgetOptions{Bytes: 16 * body, Wait: 2 * time.Second}
		o.MinBodyRate = 1
	}, true)
	addrA, _ := grpcServed(t, s)
	addrB, _ := grpcServed(t, s)
	reuse := func(network, address string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
		return err
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the client
	if err != nil {
		t.Fatal(err)
	}
	local := probe.Addr().(*net.TCPAddr)
	probe.Close()
	d := &net.Dialer{LocalAddr: local, Control: reuse}
	conn, err := grpc.NewClient(addrA, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	known := pb.NewGRPCInferenceServiceClient(conn)
	if _, err := known.ModelInfer(t.Context(), smallInfer()); err != nil {
		t.Fatal(err)
	}
	other, err := d.Dial("tcp", addrB) // the same client port, the other server port
	if err != nil {
		t.Skipf("cannot reuse the client port: %v", err)
	}
	defer other.Close()
	waitFor(t, "the second connection counted", func() bool { return s.conns.Open(connlimit.GRPC) == 2 })
	bad := dialH2(t, addrA)
	for i := range 6 {
		id := uint32(2*i + 1)
		bad.headers(id, "/inference.GRPCInferenceService/ModelInfer", false)
		bad.message(id, body-100, 10000)
	}
	waitFor(t, "four reads to hold the budget", func() bool { return s.budget.InUse() == 4*readReservation*body })
	start := time.Now()
	if _, err := known.ModelInfer(t.Context(), smallInfer()); err != nil {
		t.Errorf("the known small client, with a connection from its port to the other server port: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the known small client waited %v", took)
	}
}
