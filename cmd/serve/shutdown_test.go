package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"rnnserve/server"
	pb "rnnserve/server/inferencepb"
)

// startLogged runs bin as startServe does and returns it, its base URL,
// its log and a channel with its exit.
func startLogged(t *testing.T, bin string, args ...string) (*exec.Cmd, string, *syncBuffer, chan error) {
	t.Helper()
	srv := startServe(t, bin, nil, args...)
	exited := make(chan error, 1)
	go func() { exited <- srv.cmd.Wait() }()
	return srv.cmd, srv.base, srv.log, exited
}

// TestLameDuckShutdown: on SIGTERM readiness fails at once, requests are
// still served for the lame-duck period, each closing its connection,
// and serve exits 0 once drained, after the period.
func TestLameDuckShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	cmd, base, logs, exited := startLogged(t, bin, "-listen", "127.0.0.1:0", "-grpc-listen", "off", "-cache-bytes", "1048576", "-lame-duck", "1500ms")
	infer := `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [72, 105]}]}`
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	var ready503 time.Duration
	for time.Since(start) < time.Second {
		resp, err := http.Get(base + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				ready503 = time.Since(start)
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if ready503 == 0 {
		t.Fatal("readiness did not turn 503 within 1s of SIGTERM")
	}
	served := 0
	for time.Since(start) < time.Second {
		resp, err := http.Post(base+"/v2/models/bytelm/infer", "application/json", strings.NewReader(infer))
		if err != nil {
			t.Fatalf("infer %v after SIGTERM, within the lame-duck period: %v", time.Since(start), err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Fatalf("infer in the lame-duck period: %d, close %v; want 200 closing the connection", resp.StatusCode, resp.Close)
		}
		served++
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v, want 0\n%s", err, logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve still running\n%s", logs)
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("exited %v after SIGTERM, before the 1.5s lame-duck period ended", took)
	}
	for _, want := range []string{"msg=\"lame duck", "msg=\"draining", "msg=\"stopped: every request in flight finished\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	// Every request served has its access line (they are written in
	// batches), before the last line.
	log := logs.String()
	n := 0
	for line := range strings.Lines(log) {
		if strings.Contains(line, "msg=request ") && strings.Contains(line, "protocol=rest method=POST path=/v2/models/bytelm/infer status=200") {
			n++
		}
	}
	if n != served {
		t.Errorf("%d access lines of infer requests, want one for each of the %d served:\n%s", n, served, log)
	}
	if strings.LastIndex(log, "msg=request") > strings.Index(log, "msg=\"stopped") {
		t.Errorf("an access line after the last line:\n%s", log)
	}
	t.Logf("readiness 503 %v after SIGTERM; %d requests served in the lame-duck period", ready503, served)
}

// TestDrainTimeoutCuts: a generation still streaming when the drain
// timeout expires ends with an error event, serve logs the request it cut
// and exits 1.
func TestDrainTimeoutCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(cfg, []byte("lame_duck: 0s\ndrain_timeout: 1s\nserver:\n  max_generate_tokens: 1000000\n"), 0o644)
	cmd, base, logs, exited := startLogged(t, bin, "-config", cfg, "-listen", "127.0.0.1:0", "-grpc-listen", "off", "-cache-bytes", "1048576")
	resp, err := http.Post(base+"/v2/models/bytelm/generate_stream", "application/json",
		strings.NewReader(`{"text_input": "Once", "parameters": {"max_tokens": 1000000, "temperature": 1, "seed": 3}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first event")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	var last string
	events := 1
	for sc.Scan() {
		if sc.Text() != "" {
			last = sc.Text()
			events++
		}
	}
	if !strings.HasPrefix(last, `data: {"error":`) || !strings.Contains(last, "drain timeout") {
		t.Errorf("the stream's last event after %d: %q, want an error event naming the drain timeout", events, last)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("exit: %v, want status 1", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve still running\n%s", logs)
	}
	log := logs.String()
	if !strings.Contains(log, "drain timeout: cut what was still in flight") || !strings.Contains(log, "requests_cut=1") || !strings.Contains(log, "generate bytelm (rest) after") {
		t.Errorf("the log does not name the request cut:\n%s", log)
	}
}

// TestMachineMemory reads the memory files the default budget comes from.
func TestMachineMemory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(data), 0o644)
		return p
	}
	if v, ok := meminfoTotal(write("meminfo", "MemFree:  10 kB\nMemTotal:       24576000 kB\n")); !ok || v != 24576000<<10 {
		t.Errorf("MemTotal: %d %v", v, ok)
	}
	for _, c := range []struct {
		data string
		want int64
		ok   bool
	}{{"1073741824\n", 1 << 30, true}, {"max\n", 0, false}, {"9223372036854771712\n", 0, false}, {"x", 0, false}} {
		if v, ok := cgroupLimit(write("limit", c.data)); v != c.want || ok != c.ok {
			t.Errorf("cgroup limit %q: %d %v, want %d %v", c.data, v, ok, c.want, c.ok)
		}
	}
	if _, ok := meminfoTotal(filepath.Join(dir, "none")); ok {
		t.Error("a missing meminfo reads")
	}
	for _, bad := range []string{"MemTotal: 0 kB\n", "MemTotal: -5 kB\n", "MemTotal: 9007199254740993 kB\n", "MemTotal: 12 MB\n", "MemFree: 10 kB\n"} {
		if v, ok := parseMeminfo([]byte(bad)); ok {
			t.Errorf("meminfo %q read as %d bytes", bad, v)
		}
	}
	mem := machineMemory()
	t.Logf("this machine: %d MiB; default budget %d MiB", mem>>20, server.BudgetFor(mem, 8<<20)>>20)
	if _, err := os.Stat("/proc/meminfo"); err == nil && mem <= 0 {
		t.Error("no memory read on a machine with /proc/meminfo")
	}
}

// TestStreamsEndAtShutdown: SIGTERM with gRPC streams kept open: at the
// end of the lame-duck period each gets a last response saying the
// server is shutting down and ends with OK, and serve exits 0 well
// within the lame-duck period plus five seconds.
func TestStreamsEndAtShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	cmd, _, logs, exited := startLogged(t, bin, "-listen", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-cache-bytes", "1048576", "-lame-duck", "500ms")
	m := regexp.MustCompile(`grpc=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no gRPC address in the log:\n%s", logs)
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	var streams []pb.GRPCInferenceService_ModelStreamInferClient
	for range 3 {
		st, err := c.ModelStreamInfer(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&pb.ModelInferRequest{ModelName: "bytelm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64",
			Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Int64Contents: []int64{72, 105}}}}})
		if r, err := st.Recv(); err != nil || r.ErrorMessage != "" {
			t.Fatalf("a stream's request: %v %v", r, err)
		}
		streams = append(streams, st)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	for i, st := range streams {
		last, err := st.Recv()
		if err != nil || !strings.Contains(last.ErrorMessage, "shutting down") {
			t.Errorf("stream %d: %v %v, want a last response saying the server is shutting down", i, last, err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Errorf("stream %d after its last response: %v, want OK", i, err)
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v, want 0\n%s", err, logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve still running\n%s", logs)
	}
	if took := time.Since(start); took > 500*time.Millisecond+5*time.Second {
		t.Errorf("exited %v after SIGTERM, want within the lame duck and 5s", took)
	}
}

// TestSoftMemoryLimit: the runtime's soft limit is three budgets and 256
// MiB, at most three quarters of the memory; GOMEMLIMIT, when set, is
// left alone (TestServeFromEnvironment's process has none, and logs the
// limit it set).
func TestSoftMemoryLimit(t *testing.T) {
	for _, c := range []struct{ budget, mem, want int64 }{
		{256 << 20, 24 << 30, 1024 << 20},
		{256 << 20, 1 << 30, 768 << 20},
		{64 << 20, 0, 448 << 20},
		{0, 0, 3*server.DefaultBudgetBytes + 256<<20},
	} {
		if got := softMemoryLimit(c.budget, c.mem); got != c.want {
			t.Errorf("budget %d, memory %d: %d, want %d", c.budget, c.mem, got, c.want)
		}
	}
}
