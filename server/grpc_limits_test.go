package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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
