package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "rnnserve/server/inferencepb"
)

// Attacks: each runs for -attack-for against one server process, beside
// four normal clients (REST and gRPC, each on a kept connection and on a
// new connection per request), and is then stopped (its connections
// closed). A row reports what the attacker sent and got, the server's
// peak resident memory during the attack (VmHWM, reset before it through
// /proc/PID/clear_refs), its resident memory three seconds after the
// attacker's connections closed, and each normal client's successes.
//
// The server runs with its default settings, serving bytelm and a GRU on
// 256-wide float features (gru256: hidden 256, random weights), whose
// near-limit requests are 8 x 1000 x 256 floats.

// attack is one attack.
type attack struct {
	name, what string
	run        func(ctx context.Context, e *attackEnv) string
}

// attackEnv is what the attacks share.
type attackEnv struct {
	rest, grpcAddr string
	limit          int
	near           []byte // a REST near-limit body (bytelm, padded)
	gzNear         []byte // gzip of a body inflating to near the limit
	gruMsg         []byte // a near-limit ModelInferRequest for gru256, marshalled
}

var attacks = []attack{
	{"rest-near", "300 clients post near-limit bodies (8 MiB less 16 KiB) back to back", restNear},
	{"rest-gzip", "300 clients post gzip bodies that inflate to 8 MiB less 16 KiB", restGzip},
	{"rest-silent", "300 connections send a head announcing 8 MiB and one byte, then nothing", restSilent},
	{"grpc-near", "300 clients, a connection each, send near-limit ModelInfer messages (gru256, 8 MB of raw floats)", grpcNear(false)},
	{"grpc-near-shared", "300 callers on one connection send near-limit ModelInfer messages", grpcNear(true)},
	{"grpc-halfsent", "one connection keeps 300 ModelInfer calls open, each with half of an 8 MiB message sent", grpcHalfSent},
	{"grpc-headers", "200 connections keep 100 calls each open (20,000) that send only a message prefix announcing 8 MiB", grpcHeaders},
	{"responses", "20 REST and 20 gRPC clients ask for 33.5 MB of logits ([8, 4096] x 256) and never read them; others ask for 1.07 GB as JSON", bigResponses},
	{"idle-h2", "4,200 HTTP/2 connections to the gRPC port send their preface and stay idle", idleH2},
}

// attackRun runs the attacks named in c.attacks against one server.
func attackRun(c config) error {
	dir, err := os.MkdirTemp("", "soak-models")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	gru := filepath.Join(dir, "gru256")
	if err := os.MkdirAll(gru, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gru, "model.yaml"), []byte("cell: gru\ninput_size: 256\nhidden_size: 256\nseed: 1\n"), 0o644); err != nil {
		return err
	}
	// -grpc, not -grpc-listen: the old spelling, which builds from before
	// the rename understand too, so the same run measures them.
	c.args = append(c.args, "-grpc", c.grpcAddr, "-model", filepath.Join(c.models, "bytelm"), "-model", gru)
	srv, err := startServe(c)
	if err != nil {
		return err
	}
	defer srv.kill()
	e := &attackEnv{rest: "http://" + c.addr, grpcAddr: c.grpcAddr, limit: c.limit}
	e.near = nearLimitBody(c.limit - 16<<10)
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(e.near)
	zw.Close()
	e.gzNear = zb.Bytes()
	e.gruMsg = gruMessage(c.limit)

	var selected []attack
	for _, a := range attacks {
		if c.attacks == "all" || slices.Contains(strings.Split(c.attacks, ","), a.name) {
			selected = append(selected, a)
		}
	}
	clients := []*normal{{name: "REST", pause: 20 * time.Millisecond}, {name: "gRPC", pause: 20 * time.Millisecond},
		{name: "new REST", fresh: true, pause: 250 * time.Millisecond}, {name: "new gRPC", fresh: true, pause: 250 * time.Millisecond}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, n := range clients {
		ready := make(chan struct{})
		if strings.Contains(n.name, "gRPC") {
			wg.Go(func() { n.runGRPC(ctx, c.grpcAddr, ready) })
			<-ready
		} else {
			wg.Go(func() { n.runREST(ctx, e.rest) })
		}
	}
	defer func() { stop(); wg.Wait() }()

	fmt.Fprintf(os.Stderr, "loadavg at start: %s\n", loadavg())
	fmt.Println("| attack | attacker sent and got | peak RSS | RSS 3 s after | normal REST | normal gRPC | new REST connections | new gRPC connections |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	row := func(name, outcome string) {
		peak := srv.peak()
		var sums []string
		for _, n := range clients {
			sums = append(sums, summary(n.reset()))
		}
		time.Sleep(3 * time.Second)
		after, _ := procStatus(srv.cmd.Process.Pid, "VmRSS")
		fmt.Fprintf(os.Stderr, "%s, 3 s after: budget in use %s, heap in use %s, goroutines %s, connections %s\n", name,
			metric(e.rest, "rnnserve_request_budget_used_bytes"), metric(e.rest, "go_memstats_heap_inuse_bytes"),
			metric(e.rest, "go_goroutines"), metric(e.rest, "rnnserve_open_connections"))
		fmt.Printf("| %s | %s | %.0f MiB | %.0f MiB | %s |\n", name, outcome, mib(peak), mib(after), strings.Join(sums, " | "))
	}
	for _, n := range clients {
		n.reset()
	}
	srv.resetPeak()
	time.Sleep(c.attackFor / 3)
	row("none (the normal clients alone)", "")
	for _, a := range selected {
		for _, n := range clients {
			n.reset()
		}
		srv.resetPeak()
		actx, cancel := context.WithTimeout(ctx, c.attackFor)
		start := time.Now()
		outcome := a.run(actx, e)
		cancel()
		fmt.Fprintf(os.Stderr, "%s: %s; ran %v, loadavg %s\n", a.name, a.what, time.Since(start).Round(time.Millisecond), loadavg())
		select {
		case <-srv.exited:
			killed := ""
			if srv.killed {
				killed = fmt.Sprintf(" (killed past -max-rss %d MiB)", c.maxRSS)
			}
			fmt.Printf("| %s | %s | serve died%s | | | | | |\n", a.name, outcome, killed)
			return fmt.Errorf("serve died during %s%s: %v", a.name, killed, srv.err)
		default:
		}
		row(a.name, outcome)
	}
	fmt.Fprintf(os.Stderr, "loadavg at end: %s\n", loadavg())
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// resetPeak starts the process's resident high-water mark again (Linux:
// clear_refs 5); without it the sampled peak starts again.
func (p *serveProc) resetPeak() {
	os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0)
	p.mu.Lock()
	p.rss = 0
	p.mu.Unlock()
}

// gruMessage is a ModelInferRequest for gru256 of near limit bytes: 8
// rows of 1000 steps of 256 floats, raw.
func gruMessage(limit int) []byte {
	steps := int64((limit - 64<<10) / (8 * 256 * 4))
	raw := make([]byte, 8*steps*256*4)
	for i := 0; i < len(raw); i += 4 {
		binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(float32(i%97)/97))
	}
	msg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "gru256",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "features", Datatype: "FP32", Shape: []int64{8, steps, 256}}},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden"}},
		RawInputContents: [][]byte{raw}})
	if err != nil {
		panic(err)
	}
	return msg
}

// tally counts outcomes by name.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *tally) add(k string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[k] += n
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	total := 0
	for k, v := range t.n {
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
		total += v
	}
	slices.Sort(parts)
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// rude pauses a little after a refusal, so that the attacker's own
// processor time does not crowd out the server's on a shared machine.
func rude(ctx context.Context) { sleep(ctx, 50*time.Millisecond) }

func restPosts(ctx context.Context, e *attackEnv, body []byte, h ...string) string {
	var t tally
	tr := &http.Transport{MaxIdleConnsPerHost: 300, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			for ctx.Err() == nil {
				got := postRaw(hc, e.rest+"/v2/models/bytelm/infer", body, h...)
				t.add(got, 1)
				if got != "200" {
					rude(ctx)
				}
			}
		})
	}
	wg.Wait()
	return t.String()
}

func restNear(ctx context.Context, e *attackEnv) string {
	return restPosts(ctx, e, e.near, "Content-Type", "application/json")
}

func restGzip(ctx context.Context, e *attackEnv) string {
	return restPosts(ctx, e, e.gzNear, "Content-Type", "application/json", "Content-Encoding", "gzip")
}

func restSilent(ctx context.Context, e *attackEnv) string {
	var t tally
	var wg sync.WaitGroup
	addr := strings.TrimPrefix(e.rest, "http://")
	for range 300 {
		wg.Go(func() {
			for ctx.Err() == nil {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.add(classify(err), 1)
					rude(ctx)
					continue
				}
				fmt.Fprintf(conn, "POST /v2/models/bytelm/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", e.limit)
				done := make(chan struct{})
				go func() {
					select {
					case <-ctx.Done():
						conn.Close()
					case <-done:
					}
				}()
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				close(done)
				switch {
				case err == nil:
					t.add(fmt.Sprint(resp.StatusCode), 1)
				case ctx.Err() == nil:
					t.add(classify(err), 1)
				default:
					t.add("held to the end", 1)
				}
				conn.Close()
			}
		})
	}
	wg.Wait()
	return t.String()
}

// rawCodec sends pre-marshalled messages as they are, so that 300
// attackers need one copy of the message, not one each.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

func grpcNear(shared bool) func(ctx context.Context, e *attackEnv) string {
	return func(ctx context.Context, e *attackEnv) string {
		var t tally
		dial := func() *grpc.ClientConn {
			conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
			if err != nil {
				panic(err)
			}
			return conn
		}
		var one *grpc.ClientConn
		if shared {
			one = dial()
			defer one.Close()
		}
		var wg sync.WaitGroup
		for range 300 {
			wg.Go(func() {
				conn := one
				if !shared {
					conn = dial()
					defer conn.Close()
				}
				for ctx.Err() == nil {
					var out []byte
					err := conn.Invoke(ctx, "/inference.GRPCInferenceService/ModelInfer", e.gruMsg, &out)
					if ctx.Err() != nil {
						break
					}
					t.add(status.Code(err).String(), 1)
					if err != nil {
						rude(ctx)
					}
				}
			})
		}
		wg.Wait()
		return t.String()
	}
}

// holdCalls keeps calls open on conns until ctx ends: perConn each, opened
// by open and opened again (a second later) as the server ends them.
func holdCalls(ctx context.Context, conns []*h2conn, perConn int, open func(c *h2conn) bool) string {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened atomic.Int64
	for _, c := range conns {
		wg.Go(func() { c.pump(stop) })
		wg.Go(func() {
			for ctx.Err() == nil && c.alive() {
				for c.openCalls() < perConn && ctx.Err() == nil {
					if !open(c) {
						return
					}
					opened.Add(1)
				}
				sleep(ctx, time.Second)
			}
		})
	}
	<-ctx.Done()
	close(stop)
	ended := map[string]int{}
	for _, c := range conns {
		c.outcomes(ended)
		c.close()
	}
	wg.Wait()
	var parts []string
	for k, v := range ended {
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
	}
	slices.Sort(parts)
	return fmt.Sprintf("%d calls opened; ended by the server: %s", opened.Load(), strings.Join(parts, ", "))
}

func dialMany(addr string, n int, reads bool) ([]*h2conn, string) {
	var conns []*h2conn
	var errs tally
	for range n {
		c, err := dialH2(addr, reads)
		if err != nil {
			errs.add(classify(err), 1)
			continue
		}
		conns = append(conns, c)
	}
	if errs.n != nil {
		return conns, "; dial errors " + errs.String()
	}
	return conns, ""
}

func grpcHalfSent(ctx context.Context, e *attackEnv) string {
	conns, errs := dialMany(e.grpcAddr, 1, true)
	const size = 8 << 20
	return holdCalls(ctx, conns, 300, func(c *h2conn) bool {
		_, ok := c.open("/inference.GRPCInferenceService/ModelInfer", size, size/2)
		return ok
	}) + errs
}

func grpcHeaders(ctx context.Context, e *attackEnv) string {
	conns, errs := dialMany(e.grpcAddr, 200, true)
	return holdCalls(ctx, conns, 100, func(c *h2conn) bool {
		_, ok := c.open("/inference.GRPCInferenceService/ModelInfer", 8<<20, 0)
		return ok
	}) + errs
}

func bigResponses(ctx context.Context, e *attackEnv) string {
	var t tally
	var wg sync.WaitGroup
	rows := func(b, steps int) string {
		var sb strings.Builder
		sb.WriteString(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [` + itoa(b) + `, ` + itoa(steps) + `], "data": [`)
		for i := range b * steps {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(itoa(32 + i%90))
		}
		return sb.String()
	}
	binaryBody := []byte(rows(8, 4096) + `]}], "outputs": [{"name": "logits", "parameters": {"binary_data": true}}]}`)
	jsonBody := []byte(rows(64, 4096) + `]}], "outputs": [{"name": "logits"}]}`)
	addr := strings.TrimPrefix(e.rest, "http://")
	// REST: never read the response; hold the connection to the end.
	for range 20 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.add("REST "+classify(err), 1)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v2/models/bytelm/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(binaryBody))
			conn.Write(binaryBody)
			<-ctx.Done()
			t.add("REST unread to the end", 1)
		})
	}
	// gRPC: calls on connections that never give the window back.
	conns, errs := dialMany(e.grpcAddr, 20, false)
	grpcMsg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "bytelm",
		Inputs:  []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{8, 4096}, Contents: &pb.InferTensorContents{Int64Contents: make([]int64, 8*4096)}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}})
	if err != nil {
		panic(err)
	}
	held := holdCallsAsync(ctx, conns, func(c *h2conn) bool {
		_, ok := c.send("/inference.GRPCInferenceService/ModelInfer", grpcMsg)
		return ok
	})
	// JSON responses over the limit: refused.
	hc := &http.Client{Timeout: 60 * time.Second}
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				t.add("REST [64, 4096] JSON "+postRaw(hc, e.rest+"/v2/models/bytelm/infer", jsonBody), 1)
				rude(ctx)
			}
		})
	}
	wg.Wait()
	return t.String() + "; gRPC unread: " + <-held + errs
}

// holdCallsAsync is holdCalls with one call a connection, on its own
// goroutine; its summary comes on the channel.
func holdCallsAsync(ctx context.Context, conns []*h2conn, open func(c *h2conn) bool) <-chan string {
	out := make(chan string, 1)
	go func() { out <- holdCalls(ctx, conns, 1, open) }()
	return out
}

func idleH2(ctx context.Context, e *attackEnv) string {
	var t tally
	var wg sync.WaitGroup
	for range 4200 {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := dialH2(e.grpcAddr, true)
				if err != nil {
					t.add(classify(err), 1)
					rude(ctx)
					continue
				}
				for c.alive() && ctx.Err() == nil {
					sleep(ctx, 100*time.Millisecond)
				}
				if ctx.Err() == nil {
					t.add("closed by the server", 1)
				} else {
					t.add("held to the end", 1)
				}
				c.close()
			}
		})
	}
	wg.Wait()
	return "connections " + t.String()
}

// sigtermStreams: SIGTERM while streams are kept open and normal clients
// send: how the streams end, how long the process takes, its exit code.
func sigtermStreams(c config) error {
	c.args = append(c.args, "-grpc", c.grpcAddr, "-model", filepath.Join(c.models, "bytelm"))
	srv, err := startServe(c)
	if err != nil {
		return err
	}
	defer srv.kill()
	conn, err := grpc.NewClient(c.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	const streams = 24 // within the default max_infer_streams (32)
	var open []pb.GRPCInferenceService_ModelStreamInferClient
	for range streams {
		st, err := client.ModelStreamInfer(context.Background())
		if err != nil {
			return err
		}
		st.Send(normalRequest())
		if _, err := st.Recv(); err != nil {
			return err
		}
		open = append(open, st)
	}
	// The normal client sends until just before the lame duck ends (what
	// comes later may meet the closed listener, as it should).
	ctx, stop := context.WithTimeout(context.Background(), time.Second+c.lameDuck-100*time.Millisecond)
	defer stop()
	n := &normal{name: "REST", pause: 20 * time.Millisecond}
	var wg sync.WaitGroup
	wg.Go(func() { n.runREST(ctx, "http://"+c.addr) })
	time.Sleep(time.Second)
	start := time.Now()
	srv.cmd.Process.Signal(syscall.SIGTERM)
	var ends tally
	for _, st := range open {
		wg.Go(func() {
			last, err := st.Recv()
			switch {
			case err != nil:
				ends.add("error "+status.Code(err).String(), 1)
			case strings.Contains(last.ErrorMessage, "shutting down"):
				if _, err := st.Recv(); errors.Is(err, io.EOF) {
					ends.add("a last response saying so, then OK", 1)
				} else {
					ends.add("a last response, then "+status.Code(err).String(), 1)
				}
			default:
				ends.add("another response", 1)
			}
		})
	}
	<-srv.exited
	gone := time.Since(start)
	wg.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(srv.err, &ee) {
		code = ee.ExitCode()
	}
	ok, fails, took := n.reset()
	fmt.Println("| scenario | streams ended | process gone after SIGTERM | exit code | normal REST client until the lame duck ends |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	fmt.Printf("| SIGTERM, %d ModelStreamInfer streams kept open, lame duck %v | %s | %.2f s | %d | %s |\n", streams, c.lameDuck, ends.String(), gone.Seconds(), code, summary(ok, fails, took))
	return nil
}
