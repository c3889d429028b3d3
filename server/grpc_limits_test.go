package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/limits"
)

// h2Client speaks raw HTTP/2 to the gRPC port, as a client that does not
// play by the rules would: it writes frames the way it likes and reads
// what the server sends.
type h2Client struct {
	t    testing.TB
	conn net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

// dialH2 connects to addr and sends the client preface and empty
// settings.
func dialH2(t testing.TB, addr string) *h2Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &h2Client{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// headers opens stream id as a gRPC call of method (ending the stream
// when end is set).
func (c *h2Client) headers(id uint32, method string, end bool) error {
	c.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}

// message sends the 5-byte prefix of a gRPC message of size bytes and
// the first part bytes of it.
func (c *h2Client) message(id uint32, size, part int) error {
	b := make([]byte, 5+part)
	b[1], b[2], b[3], b[4] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	return c.fr.WriteData(id, false, b)
}

// until reads frames until match returns true, the connection ends (the
// error) or wait passes.
func (c *h2Client) until(wait time.Duration, match func(http2.Frame) bool) error {
	c.conn.SetReadDeadline(time.Now().Add(wait))
	defer c.conn.SetReadDeadline(time.Time{})
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.fr.WritePing(true, f.Data)
			}
		}
		if match(f) {
			return nil
		}
	}
}

// TestGRPCTransportBounds: the gRPC transport announces the bounds it
// keeps (calls per connection, a call's window, its metadata), closes an
// idle connection with GOAWAY, and sends GOAWAY to a client that pings
// too often.
func TestGRPCTransportBounds(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.GRPC.MaxConcurrentStreams = 7
		o.IdleTimeout = 300 * time.Millisecond
	}, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := s.NewGRPC()
	go gs.Serve(ln)
	t.Cleanup(gs.Close)

	c := dialH2(t, ln.Addr().String())
	settings := map[http2.SettingID]uint32{}
	if err := c.until(5*time.Second, func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		if ok && !sf.IsAck() {
			sf.ForeachSetting(func(s http2.Setting) error { settings[s.ID] = s.Val; return nil })
		}
		return ok && !sf.IsAck()
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[http2.SettingID]uint32{http2.SettingMaxConcurrentStreams: 7,
		http2.SettingInitialWindowSize: grpcStreamWindow, http2.SettingMaxHeaderListSize: grpcMaxHeaderList} {
		if settings[id] != want {
			t.Errorf("server setting %v = %d, want %d", id, settings[id], want)
		}
	}
	// Idle: GOAWAY, then the close.
	start := time.Now()
	var away *http2.GoAwayFrame
	if err := c.until(5*time.Second, func(f http2.Frame) bool { away, _ = f.(*http2.GoAwayFrame); return away != nil }); err != nil {
		t.Fatalf("no GOAWAY on an idle connection: %v", err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("GOAWAY after %v idle, want about the 300ms idle timeout", took)
	}
	if away.ErrCode != http2.ErrCodeNo || string(away.DebugData()) != "max_idle" {
		t.Errorf("idle GOAWAY %v %q, want NO_ERROR max_idle", away.ErrCode, away.DebugData())
	}
	if err := c.until(2*time.Second, func(http2.Frame) bool { return false }); !errors.Is(err, io.EOF) {
		t.Errorf("after the idle GOAWAY: %v, want the connection closed", err)
	}

	// A ping flood: GOAWAY too_many_pings.
	c = dialH2(t, ln.Addr().String())
	c.headers(1, "/grpc.health.v1.Health/Watch", false) // a call in flight: not idle
	var data [8]byte
	for i := range 10 {
		data[0] = byte(i)
		c.fr.WritePing(false, data)
	}
	away = nil
	if err := c.until(5*time.Second, func(f http2.Frame) bool { away, _ = f.(*http2.GoAwayFrame); return away != nil }); err != nil {
		t.Fatalf("no GOAWAY after 10 pings at once: %v", err)
	}
	if away.ErrCode != http2.ErrCodeEnhanceYourCalm || string(away.DebugData()) != "too_many_pings" {
		t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", away.ErrCode, away.DebugData())
	}
}

// grpcServed serves s's gRPC front end on a listener counted by the
// server (so its connections are known) until the test ends, and returns
// its address.
func grpcServed(t *testing.T, s *Server) (string, *GRPCServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := s.NewGRPC()
	go gs.Serve(s.GRPCListener(ln))
	t.Cleanup(gs.Close)
	return ln.Addr().String(), gs
}

// grpcClient is a client connection to addr, closed when the test ends.
func grpcClient(t *testing.T, addr string) pb.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

// smallInfer is a small valid ModelInfer request for the test lm.
func smallInfer() *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2, 3}})}}
}

// waitFor polls cond for up to 5 seconds.
// halfSentCalls opens two connections with calls ModelInfer calls each,
// every call announcing a message of announce bytes and sending the
// first 10,000 of them.
func halfSentCalls(t *testing.T, addr string, calls, announce int) []*h2Client {
	t.Helper()
	conns := []*h2Client{dialH2(t, addr), dialH2(t, addr)}
	for _, c := range conns {
		for i := range calls {
			id := uint32(2*i + 1)
			if err := c.headers(id, "/inference.GRPCInferenceService/ModelInfer", false); err != nil {
				t.Fatal(err)
			}
			if err := c.message(id, announce, 10000); err != nil {
				t.Fatal(err)
			}
		}
	}
	return conns
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// A condition, not a timing: the wait is long so a loaded machine or
	// the region checker's slowed inference (-tags invariants) passes.
	const patience = 60 * time.Second
	for deadline := time.Now().Add(patience); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", patience, what)
		}
	}
}

// TestGRPCReadsInBudget: a unary call's message is read under a
// reservation of three messages at the limit, taken before the transport
// reads it, so half-sent messages hold the budget, not more, and a
// connection reads at most connlimit.ReadsPerConn at once; they are cut when
// their connection falls under the minimum rate, giving everything back;
// a client whose messages have been small is served while unknown-size
// reads fill the budget.
func TestGRPCReadsInBudget(t *testing.T) {
	const body = 1 << 20
	s, _ := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = body
		o.Budget = BudgetOptions{Bytes: 16 * body, Wait: 3 * time.Second}
		o.MinBodyRate = 1 << 20 // the first 64 KiB within 62ms
	}, true)
	addr, _ := grpcServed(t, s)
	normal := grpcClient(t, addr)
	if _, err := normal.ModelInfer(t.Context(), smallInfer()); err != nil {
		t.Fatal(err)
	}
	// The response is owed until the connection has written it.
	waitFor(t, "nothing held after a call", func() bool { return s.budget.InUse() == 0 })
	// Two connections open six calls each that announce 1 MiB messages
	// and send 10 KB of them. The large part of the budget (14 MiB) admits
	// four reads of three messages; the rest wait.
	bad := halfSentCalls(t, addr, 6, body-100)
	waitFor(t, "four reads to hold the budget", func() bool { return s.budget.InUse() == 4*readReservation*body })
	// A small client is served beside them, from the share for small
	// requests.
	start := time.Now()
	if _, err := normal.ModelInfer(t.Context(), smallInfer()); err != nil {
		t.Errorf("a small client while unknown-size reads fill the budget: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the small client waited %v", took)
	}
	// The stalled reads are cut and give their bytes back; the waiting
	// ones are admitted, stall and are cut in turn.
	codes := map[string]int{}
	for _, c := range bad {
		for range 6 {
			var hf *http2.MetaHeadersFrame
			if err := c.until(10*time.Second, func(f http2.Frame) bool {
				hf, _ = f.(*http2.MetaHeadersFrame)
				return hf != nil && hf.StreamEnded()
			}); err != nil {
				t.Fatalf("a stalled call not ended: %v (so far %v)", err, codes)
			}
			codes[hf.PseudoValue("status")+" "+fieldOf(hf, "grpc-status")]++
			if msg := fieldOf(hf, "grpc-message"); fieldOf(hf, "grpc-status") == "4" && !strings.Contains(msg, "min_body_rate") {
				t.Errorf("a stalled call: %q, want a message naming min_body_rate", msg)
			}
		}
	}
	if codes["200 4"] != 12 {
		t.Errorf("the stalled calls ended %v, want 12 DEADLINE_EXCEEDED (4)", codes)
	}
	waitFor(t, "the budget to empty", func() bool { return s.budget.InUse() == 0 })
}

// fieldOf is the value of the header field name in f.
func fieldOf(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// TestGRPCCallCaps: calls past max_calls are refused at once with
// UNAVAILABLE and a retry delay, unless their connection has less than
// its fair share; streams past max_infer_streams likewise; a call whose
// message does not come within first_message_timeout is ended.
func TestGRPCCallCaps(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.GRPC.MaxCalls = 4
		o.GRPC.MaxInferStreams = 2
		o.GRPC.FirstMessageTimeout = 400 * time.Millisecond
		o.MinBodyRate = 1 // no rate: the timeout alone
	}, true)
	addr, gs := grpcServed(t, s)
	normal := grpcClient(t, addr)
	if _, err := normal.ServerLive(t.Context(), &pb.ServerLiveRequest{}); err != nil {
		t.Fatal(err)
	}
	// Two connections open two calls each that send nothing.
	bad := []*h2Client{dialH2(t, addr), dialH2(t, addr)}
	for _, c := range bad {
		for id := uint32(1); id <= 3; id += 2 {
			c.headers(id, "/inference.GRPCInferenceService/ModelInfer", false)
		}
	}
	gc := &gs.calls
	waitFor(t, "four calls open", func() bool { gc.mu.Lock(); defer gc.mu.Unlock(); return gc.calls == 4 })
	// A fifth on one of them is over the cap and over its share (4/3).
	bad[0].headers(5, "/inference.GRPCInferenceService/ModelInfer", false)
	var hf *http2.MetaHeadersFrame
	if err := bad[0].until(5*time.Second, func(f http2.Frame) bool {
		hf, _ = f.(*http2.MetaHeadersFrame)
		return hf != nil && hf.StreamID == 5
	}); err != nil {
		t.Fatal(err)
	}
	if fieldOf(hf, "grpc-status") != "14" || !strings.Contains(fieldOf(hf, "grpc-message"), "max_calls") {
		t.Errorf("a call over the cap: status %s %q, want UNAVAILABLE naming max_calls", fieldOf(hf, "grpc-status"), fieldOf(hf, "grpc-message"))
	}
	// The client with no call open is under its share: served, and a
	// refusal says when to retry.
	if _, err := normal.ServerLive(t.Context(), &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("a connection under its fair share: %v", err)
	}
	// The silent calls end at the first-message timeout.
	for _, c := range bad {
		for n := 0; n < 2; {
			if err := c.until(5*time.Second, func(f http2.Frame) bool {
				hf, _ = f.(*http2.MetaHeadersFrame)
				return hf != nil && hf.StreamEnded()
			}); err != nil {
				t.Fatalf("a silent call not ended: %v", err)
			}
			if hf.StreamID == 5 {
				continue
			}
			n++
			if fieldOf(hf, "grpc-status") != "4" || !strings.Contains(fieldOf(hf, "grpc-message"), "first_message_timeout") {
				t.Errorf("a silent call: %s %q, want DEADLINE_EXCEEDED naming first_message_timeout", fieldOf(hf, "grpc-status"), fieldOf(hf, "grpc-message"))
			}
		}
	}
	waitFor(t, "no call open", func() bool { gc.mu.Lock(); defer gc.mu.Unlock(); return gc.calls == 0 })

	// Streams: two open, a third refused with a retry delay.
	for range 2 {
		st, err := normal.ModelStreamInfer(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(smallInfer()); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := normal.ModelStreamInfer(t.Context())
	if err == nil {
		st.Send(smallInfer())
		_, err = st.Recv()
	}
	sts, _ := status.FromError(err)
	var retry *errdetails.RetryInfo
	for _, d := range sts.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if sts.Code() != codes.Unavailable || !strings.Contains(sts.Message(), "max_infer_streams") || retry == nil || retry.RetryDelay.AsDuration() != time.Second {
		t.Errorf("a third stream: %v (retry %v), want UNAVAILABLE naming max_infer_streams with a 1s retry delay", err, retry)
	}
}

// TestGRPCDrainSlowReader: a drain ends a stream whose client does not
// read its responses: the stream's handler ends at once, and its
// connection is closed drainFlush later, the drain returning nil.
func TestGRPCDrainSlowReader(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	addr, gs := grpcServed(t, s)
	c := dialH2(t, addr)
	// A stream asks for 400 KB of logits and reads none of it (no window
	// update: the server can send 64 KiB).
	c.headers(1, "/inference.GRPCInferenceService/ModelStreamInfer", false)
	msg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{make([]int64, 400)})},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}})
	if err != nil {
		t.Fatal(err)
	}
	frame := append([]byte{0, byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
	if err := c.fr.WriteData(1, false, frame); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the response to be under way", func() bool {
		s.inflight.mu.Lock()
		defer s.inflight.mu.Unlock()
		gs.calls.mu.Lock()
		defer gs.calls.mu.Unlock()
		return len(s.inflight.reqs) == 0 && gs.calls.calls == 1 && testutil.ToFloat64(s.metrics.requests.WithLabelValues("lm", "infer", "grpc", "200")) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := gs.Drain(ctx); err != nil {
		t.Errorf("drain with a client not reading: %v", err)
	}
	if took := time.Since(start); took < drainFlush || took > 2*drainFlush+2*time.Second {
		t.Errorf("drain took %v, want about %v to %v", took, drainFlush, 2*drainFlush)
	}
}

// TestGRPCResponseOwed: a response grpc-go holds for a client that does
// not read stays in the memory budget, charged to its connection, until
// the connection writes it (here: until it closes).
func TestGRPCResponseOwed(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	addr, _ := grpcServed(t, s)
	c := dialH2(t, addr)
	msg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{make([]int64, 400)})},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}})
	if err != nil {
		t.Fatal(err)
	}
	c.headers(1, "/inference.GRPCInferenceService/ModelInfer", false)
	frame := append([]byte{0, byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
	if err := c.fr.WriteData(1, true, frame); err != nil {
		t.Fatal(err)
	}
	// 400 steps of 256 logits: 410 KB raw, of which the client's 64 KiB
	// window lets 64 KiB out; the rest stays owed.
	waitFor(t, "the call to be answered", func() bool {
		return testutil.ToFloat64(s.metrics.requests.WithLabelValues("lm", "infer", "grpc", "200")) == 1
	})
	waitFor(t, "the owed response to be all that is held", func() bool {
		used := s.budget.InUse()
		return used > 300<<10 && used < 400<<10
	})
	c.conn.Close()
	waitFor(t, "the budget to empty once the connection closed", func() bool { return s.budget.InUse() == 0 })
}

// TestGRPCNewSmallClient: a new connection's first call, announcing a
// small message, is served at once while calls announcing large messages
// hold the budget and more wait, without the server having read a
// message of it, and with less room left than a read of a message at the
// limit takes; a new connection announcing a large one waits with the
// others.
func TestGRPCNewSmallClient(t *testing.T) {
	const body = 1 << 20
	s, _ := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = body
		o.Budget = BudgetOptions{Bytes: 16 * body, Wait: 2 * time.Second}
		o.MinBodyRate = 1 // the large reads are held, not cut
	}, true)
	addr, _ := grpcServed(t, s)
	halfSentCalls(t, addr, 4, body-100)
	waitFor(t, "four reads to hold the budget", func() bool { return s.budget.InUse() == 4*readReservation*body })
	// All but 1 MiB is taken: less than a read of a message at the limit
	// needs, more than a small message's.
	if err := s.budget.Acquire(t.Context(), 3*body, limits.TierAdmitted, true); err != nil {
		t.Fatal(err)
	}
	defer s.budget.Release(3 * body)
	for i := range 3 {
		start := time.Now()
		if _, err := grpcClient(t, addr).ModelInfer(t.Context(), smallInfer()); err != nil {
			t.Errorf("new connection %d's small call while large reads fill the budget: %v", i, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("new connection %d's small call waited %v", i, took)
		}
	}
	// A new connection whose message comes a little after its call's
	// headers is still known to be small.
	late := dialH2(t, addr)
	late.headers(1, "/inference.GRPCInferenceService/ModelInfer", false)
	time.Sleep(20 * time.Millisecond)
	msg, err := proto.Marshal(smallInfer())
	if err != nil {
		t.Fatal(err)
	}
	wire := make([]byte, 5+len(msg))
	wire[1], wire[2], wire[3], wire[4] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
	copy(wire[5:], msg)
	late.fr.WriteData(1, true, wire)
	var end *http2.MetaHeadersFrame
	start := time.Now()
	if err := late.until(5*time.Second, func(f http2.Frame) bool {
		end, _ = f.(*http2.MetaHeadersFrame)
		return end != nil && end.StreamEnded()
	}); err != nil {
		t.Fatalf("the call whose message came late did not end: %v", err)
	}
	if got := fieldOf(end, "grpc-status"); got != "0" || time.Since(start) > time.Second {
		t.Errorf("a new connection's small message 20 ms after its headers: grpc-status %s %q after %v, want 0 at once", got, fieldOf(end, "grpc-message"), time.Since(start))
	}
	// A new connection that announces a large message is not trusted.
	c := dialH2(t, addr)
	c.headers(1, "/inference.GRPCInferenceService/ModelInfer", false)
	c.message(1, body-100, 100)
	var hf *http2.MetaHeadersFrame
	if err := c.until(5*time.Second, func(f http2.Frame) bool {
		hf, _ = f.(*http2.MetaHeadersFrame)
		return hf != nil && hf.StreamEnded()
	}); err != nil {
		t.Fatalf("the large call not refused: %v", err)
	}
	if got := fieldOf(hf, "grpc-status"); got != "14" {
		t.Errorf("a new connection's large call while the budget is full: grpc-status %s %q, want 14 (UNAVAILABLE)", got, fieldOf(hf, "grpc-message"))
	}
}

// TestGRPCStructureBounded: a message whose repeated fields other than
// tensor data (inputs, outputs, dimensions, parameters, on unary calls and
// streams, on any service) hold more elements than any request needs is
// refused with INVALID_ARGUMENT before it is decoded: 2 bytes of an empty
// input on the wire would be a pointer and a 120-byte struct in memory.
func TestGRPCStructureBounded(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	addr, _ := grpcServed(t, s)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 1 << 20
	msg := func(fields ...[]byte) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, "lm")
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	repeat := func(num protowire.Number, elem []byte) []byte {
		var b []byte
		for range n {
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, elem)
		}
		return b
	}
	entry := func(key string) []byte { // a parameters map entry
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendString(e, key)
	}
	var shape []byte
	for range n {
		shape = protowire.AppendVarint(shape, 1)
	}
	input := protowire.AppendTag(nil, 3, protowire.BytesType) // shape, packed
	input = protowire.AppendBytes(input, shape)
	ok, err := proto.Marshal(smallInfer())
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := conn.Invoke(t.Context(), "/inference.GRPCInferenceService/ModelInfer", &ok, &out); err != nil {
		t.Fatal(err) // and warm the pools
	}
	for _, c := range []struct {
		what, method string
		body         []byte
	}{
		{"empty inputs", "ModelInfer", msg(repeat(5, nil))},
		{"empty outputs", "ModelInfer", msg(repeat(6, nil))},
		{"parameters", "ModelInfer", msg(repeat(4, entry("k")))},
		{"a long shape", "ModelInfer", msg(protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), input))},
		{"empty raw contents", "ModelInfer", msg(repeat(7, nil))},
		{"empty inputs on a stream", "ModelStreamInfer", msg(repeat(5, nil))},
		{"load parameters", "RepositoryModelLoad", msg(repeat(3, entry("k")))},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if c.method == "ModelStreamInfer" {
			cs, serr := conn.NewStream(t.Context(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/inference.GRPCInferenceService/ModelStreamInfer")
			if serr != nil {
				t.Fatal(serr)
			}
			cs.SendMsg(&c.body)
			cs.CloseSend()
			err = cs.RecvMsg(&out)
		} else {
			err = conn.Invoke(t.Context(), "/inference.GRPCInferenceService/"+c.method, &c.body, &out)
		}
		runtime.ReadMemStats(&after)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "elements") {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", c.what, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 8*uint64(len(c.body)) {
			t.Errorf("%s: a %d-byte message allocated %d bytes", c.what, len(c.body), got)
		}
	}
	if err := conn.Invoke(t.Context(), "/inference.GRPCInferenceService/ModelInfer", &ok, &out); err != nil {
		t.Errorf("the server stopped serving: %v", err)
	}
}

// TestGRPCContentsCharged: a packed int64 of one byte on the wire is
// eight decoded, so a message's tensor contents may decode to eight
// times its size, past the three messages at the limit a read holds of
// the budget. What a message takes decoded beyond that is taken from the
// budget before it is decoded: with room, the budget's peak shows it;
// without, the call is UNAVAILABLE and the message is never decoded.
func TestGRPCContentsCharged(t *testing.T) {
	const maxBody, zeros = 1 << 20, 512 << 10 // 512 KiB on the wire, 4 MiB decoded
	req := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "tokens", Datatype: "INT64", Shape: []int64{1, zeros},
		Contents: &pb.InferTensorContents{Int64Contents: make([]int64, zeros)},
	}}}
	need := int64(readReservation*proto.Size(req) + 8*zeros - zeros)
	for _, c := range []struct {
		what   string
		budget int64
		code   codes.Code
	}{
		{"room", 8 << 20, codes.ResourceExhausted}, // decoded, then over the decoded tensors' limit
		{"no room", 4 << 20, codes.Unavailable},
	} {
		t.Run(c.what, func(t *testing.T) {
			s, _ := newTestServer(t, func(o *Options) {
				o.MaxBodyBytes, o.Budget.Bytes, o.Budget.Wait = maxBody, c.budget, 100*time.Millisecond
			}, true)
			addr, _ := grpcServed(t, s)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := pb.NewGRPCInferenceServiceClient(conn)
			if _, err := client.ModelInfer(t.Context(), smallInfer()); err != nil {
				t.Fatal(err)
			}
			s.budget.TakePeak()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err = client.ModelInfer(t.Context(), req)
			runtime.ReadMemStats(&after)
			if status.Code(err) != c.code {
				t.Fatalf("%v, want %v", err, c.code)
			}
			peak, _ := s.budget.TakePeak()
			switch c.code {
			case codes.ResourceExhausted:
				if peak < need {
					t.Errorf("the budget's peak %d bytes, want at least the %d the message took decoded beside grpc-go's copies", peak, need)
				}
			case codes.Unavailable:
				if got := after.TotalAlloc - before.TotalAlloc; got > 8*zeros {
					t.Errorf("refused, but the call allocated %d bytes: decoded", got)
				}
			}
			waitFor(t, "the budget to be given back", func() bool { return s.budget.InUse() == 0 })
		})
	}
}

// TestGRPCStalledReaderClosed: grpc-go has no write deadline, so a client
// that reads its frames but opens no flow-control window holds the
// response it asked for, and the connection, for as long as it likes
// (answering the keepalive pings, it is never found dead). A connection
// that owes responses and writes less than connlimit.StallBytes of them
// in write_timeout is closed.
func TestGRPCStalledReaderClosed(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.WriteTimeout = 300 * time.Millisecond }, true)
	addr, _ := grpcServed(t, s)
	row := make([]int64, 400) // logits of 400 x 256 floats: past the 64 KiB window
	req, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{row})},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := dialH2(t, addr)
	if err := c.headers(1, "/inference.GRPCInferenceService/ModelInfer", false); err != nil {
		t.Fatal(err)
	}
	msg := append([]byte{0, byte(len(req) >> 24), byte(len(req) >> 16), byte(len(req) >> 8), byte(len(req))}, req...)
	if err := c.fr.WriteData(1, true, msg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.until(10*time.Second, func(f http2.Frame) bool {
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			c.fr.WritePing(true, p.Data) // alive, but never a window
		}
		return false
	})
	if !isClosed(err) {
		t.Fatalf("a client that opens no window still connected after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	waitFor(t, "the budget to be given back", func() bool { return s.budget.InUse() == 0 })
}

// TestGRPCGenerationCharged: over gRPC too, a generation's memory comes
// from the budget before it starts: more than the whole budget is
// INVALID_ARGUMENT, no room within the wait UNAVAILABLE, unary and on a
// stream; with room it is served, and every byte comes back.
func TestGRPCGenerationCharged(t *testing.T) {
	g := newGRPCTest(t, func(o *Options) {
		o.MaxBodyBytes = 64 << 10
		o.MaxGenerateTokens = 1 << 16
		o.Budget = BudgetOptions{Bytes: 1 << 20, Wait: 50 * time.Millisecond}
	})
	ctx := t.Context()
	req := func(tokens int32) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("Hi")}}},
			{Name: "max_tokens", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{tokens}}},
		}}
	}
	streamErr := func(r *pb.ModelInferRequest) string {
		stream, err := g.c.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
		stream.CloseSend()
		msg := ""
		for {
			resp, err := stream.Recv()
			if err != nil {
				return msg
			}
			if resp.ErrorMessage != "" {
				msg = resp.ErrorMessage
			}
		}
	}
	_, err := g.c.ModelInfer(ctx, req(1<<16))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "whole memory budget") {
		t.Errorf("65536 tokens: %v, want INVALID_ARGUMENT naming the budget", err)
	}
	if msg := streamErr(req(1 << 16)); !strings.Contains(msg, "whole memory budget") {
		t.Errorf("65536 tokens on a stream: %q, want an error naming the budget", msg)
	}
	hold := g.s.budget.Reserve(context.Background())
	if err := hold.Grow(g.s.budget.Size() - 64<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := g.c.ModelInfer(ctx, req(2000)); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "memory budget") {
		t.Errorf("2000 tokens with 64 KiB free: %v, want UNAVAILABLE naming the budget", err)
	}
	if msg := streamErr(req(2000)); !strings.Contains(msg, "memory budget") {
		t.Errorf("2000 tokens with 64 KiB free on a stream: %q, want an error naming the budget", msg)
	}
	hold.Release()
	if _, err := g.c.ModelInfer(ctx, req(2000)); err != nil {
		t.Errorf("2000 tokens with room: %v", err)
	}
	if msg := streamErr(req(2000)); msg != "" {
		t.Errorf("2000 tokens with room on a stream: %q", msg)
	}
	for end := time.Now().Add(5 * time.Second); g.s.budget.InUse() != 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := g.s.budget.InUse(); n != 0 {
		t.Errorf("%d bytes still held after every generation ended", n)
	}
}
