package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	triton "github.com/sunhailin-Leo/triton-service-go/v2/nvidia_inferenceserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Sticky sequences across replicas: three servers behind nginx, which
// hashes the X-Sequence-Id header with a consistent hash, run by the
// recipe deploy/nginx/rnnserve.conf exactly as committed (only the
// addresses move to free loopback ports).

const (
	nginxBin = "/usr/sbin/nginx"
	nginxPkg = "nginx" // Debian's package

	// stickyConf is the recipe, below the module root.
	stickyConf = "deploy/nginx/rnnserve.conf"
	// upstreamHeader is the response header the recipe adds: the
	// replicas nginx tried, the one that answered last.
	upstreamHeader = "X-Rnnserve-Upstream"
	// sequenceHeader is the header serve reads a sequence id from
	// (server.SequenceHeader; this package does not import server).
	sequenceHeader = "X-Sequence-Id"
)

// replica is one server of the pool.
type replica struct {
	p          *process
	rest, grpc string // addresses
}

// startReplica starts the built server on free loopback ports.
func startReplica(ctx context.Context, t *testing.T, name, dir, bin string) replica {
	t.Helper()
	var r replica
	r.p, r.rest = startOnFreePort(ctx, t, name, dir, bin, func(addr string) []string {
		r.grpc = freeAddr(t)
		return []string{"-listen", addr, "-grpc-listen", r.grpc}
	}, "/v2/health/ready")
	return r
}

// nginxConfig is the recipe with its example addresses moved to the
// test's (each example address must be in the recipe), inside a main
// configuration that keeps nginx's files in dir.
func nginxConfig(t *testing.T, root, dir string, addrs map[string]string) string {
	t.Helper()
	recipe, err := os.ReadFile(filepath.Join(root, stickyConf))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(recipe)
	for from, to := range addrs {
		if !strings.Contains(conf, " "+from+";") && !strings.Contains(conf, " "+from+" ") {
			t.Fatalf("%s has no address %s", stickyConf, from)
		}
		conf = strings.ReplaceAll(conf, " "+from, " "+to)
	}
	if left := regexp.MustCompile(`127\.0\.0\.1:8[0-9]{3}\b`).FindString(conf); left != "" {
		t.Fatalf("%s: address %s not moved by the test", stickyConf, left)
	}
	include := filepath.Join(dir, "rnnserve.conf")
	if err := os.WriteFile(include, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers otherwise run as nobody, who cannot write dir
	}
	return fmt.Sprintf(`%s
worker_processes 1;
pid %[2]s/nginx.pid;
error_log stderr notice;
events { worker_connections 256; }
http {
    log_format sticky '$request_id seq=$http_x_sequence_id $status upstream=$upstream_addr $upstream_status';
    access_log %[2]s/access.log sticky;
    client_body_temp_path %[2]s/client_body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    include %[3]s;
}
`, user, dir, include)
}

// seqText is sequence i's input, in four steps.
func seqText(i int) [][]int64 {
	text := tokens(fmt.Sprintf("%02d: Permission is hereby granted, free of charge, to any person obtaining a copy", i))
	return [][]int64{text[:9], text[9:30], text[30:31], text[31:]}
}

// stepResult is the answer to one step of a sequence.
type stepResult struct {
	code     int
	body     string
	upstream string // the replica that answered (the last one nginx tried)
	tried    string // every replica nginx tried
	hidden   []float64
}

// step sends one step of a sequence to base: the id in the
// X-Sequence-Id header when inHeader, else in the body.
func step(ctx context.Context, base, id string, toks []int64, start, end, inHeader bool) (stepResult, error) {
	params := map[string]any{"sequence_start": start, "sequence_end": end}
	if !inHeader {
		params["sequence_id"] = id
	}
	req := map[string]any{
		"parameters": params,
		"inputs":     []any{map[string]any{"name": "tokens", "datatype": "INT64", "shape": []int{1, len(toks)}, "data": toks}},
		"outputs":    []any{map[string]any{"name": "hidden"}},
	}
	var header []string
	if inHeader {
		header = []string{sequenceHeader, id}
	}
	return inferVia(ctx, base, req, header...)
}

// inferVia posts an infer request for the test model to base and reads
// the answer.
func inferVia(ctx context.Context, base string, req any, header ...string) (stepResult, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return stepResult{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/models/"+testModel+"/infer", bytes.NewReader(data))
	if err != nil {
		return stepResult{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		hr.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(hr)
	if err != nil {
		return stepResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	r := stepResult{code: resp.StatusCode, body: string(body), tried: resp.Header.Get(upstreamHeader)}
	tried := strings.Split(r.tried, ", ")
	r.upstream = tried[len(tried)-1]
	if err != nil || r.code != http.StatusOK {
		return r, err
	}
	var out struct {
		Outputs []struct {
			Data []float64 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Outputs) == 0 {
		return r, fmt.Errorf("infer response %q: %v", body, err)
	}
	r.hidden = out.Outputs[0].Data
	return r, nil
}

// closeTo reports whether two hidden states agree within 1e-5 (relative
// above 1): replicas may run different schedules (each times its
// candidates at load), whose sums differ in the last bits.
func closeTo(a, b []float64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-5*math.Max(1, math.Abs(b[i])) {
			return false
		}
	}
	return true
}

// restInfers200 is a replica's count of REST infer requests for the test
// model answered 200, from its /metrics.
func restInfers200(ctx context.Context, t *testing.T, addr string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != "rnnserve_requests_total" {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		if slices.ContainsFunc([]string{`code="200"`, `endpoint="infer"`, `protocol="rest"`, `model="` + testModel + `"`}, func(l string) bool { return !strings.Contains(labels, l) }) {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		return int(n)
	}
	return 0
}

// TestStickySequences runs three replicas behind nginx with the recipe of
// deploy/nginx/rnnserve.conf and shows that
//
//   - every step of every sequence (its id in the X-Sequence-Id header)
//     lands on one replica, as nginx's response header and the replicas'
//     own request counters both say, and its outputs equal a separate
//     server's for the same sequence; requests outside sequences spread;
//     a gRPC sequence (x-sequence-id metadata) sticks as well;
//   - when a replica is killed (SIGKILL, by its PID) its sequences get a
//     clear 404 "unknown sequence" from another replica, not a 5xx, the
//     other sequences go on where they were, and new sequences go to the
//     live replicas.
func TestStickySequences(t *testing.T) {
	needTool(t, nginxBin, nginxPkg)
	root := repoRoot(t)
	dir := t.TempDir()
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), buildTimeout)
	defer cancelBuild()
	bin := buildServer(buildCtx, t, root, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	reference := startReplica(ctx, t, "reference", dir, bin)
	var pool []replica
	for i := range 3 {
		pool = append(pool, startReplica(ctx, t, fmt.Sprintf("replica%d", i), dir, bin))
	}
	which := map[string]int{} // a replica's REST or gRPC address: its index
	for i, r := range pool {
		which[r.rest], which[r.grpc] = i, i
	}
	var nginxREST, nginxGRPC string
	nginx, restAddr := startOnFreePort(ctx, t, "nginx", dir, nginxBin, func(addr string) []string {
		nginxGRPC = freeAddr(t)
		addrs := map[string]string{"127.0.0.1:8000": addr, "127.0.0.1:8001": nginxGRPC}
		for i, r := range pool {
			addrs[fmt.Sprintf("127.0.0.1:8%d80", i+1)] = r.rest
			addrs[fmt.Sprintf("127.0.0.1:8%d81", i+1)] = r.grpc
		}
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(nginxConfig(t, root, dir, addrs)), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"-p", dir, "-e", "stderr", "-c", conf, "-g", "daemon off;"}
	}, "/v2/health/ready")
	nginxREST = "http://" + restAddr
	defer func() {
		if t.Failed() {
			access, _ := os.ReadFile(filepath.Join(dir, "access.log"))
			t.Logf("nginx log:\n%s\naccess log:\n%s", nginx.tail(), access)
		}
	}()

	const before, after = 12, 6 // sequences started before and after the kill
	// The reference: every sequence's steps on a server of its own, the
	// id in the body.
	want := make([][][]float64, before+after)
	for i := range want {
		for k, toks := range seqText(i) {
			r, err := step(ctx, "http://"+reference.rest, fmt.Sprintf("ref-%d", i), toks, k == 0, k == 3, false)
			if err != nil || r.code != http.StatusOK {
				t.Fatalf("reference sequence %d step %d: %d %v %s", i, k, r.code, err, r.body)
			}
			want[i] = append(want[i], r.hidden)
		}
	}

	// Three steps of each sequence, all sequences at once, through nginx.
	routed := make([]int, len(pool)) // requests each replica answered 200
	home := make([]int, before)      // each sequence's replica
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range before {
		wg.Go(func() {
			id := fmt.Sprintf("chat-%d", i)
			var where []string
			for k, toks := range seqText(i)[:3] {
				r, err := step(ctx, nginxREST, id, toks, k == 0, false, true)
				if err != nil || r.code != http.StatusOK {
					t.Errorf("sequence %s step %d: %d %v %s", id, k, r.code, err, r.body)
					return
				}
				if !closeTo(r.hidden, want[i][k]) {
					t.Errorf("sequence %s step %d: hidden state differs from the reference server's", id, k)
				}
				where = append(where, r.upstream)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(slices.Compact(slices.Clone(where))) != 1 {
				t.Errorf("sequence %s went to %v: more than one replica", id, where)
			}
			n, ok := which[where[0]]
			if !ok {
				t.Errorf("sequence %s answered by %s, no replica", id, where[0])
			}
			home[i] = n
			routed[n] += len(where)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	homes := slices.Compact(slices.Sorted(slices.Values(home)))
	t.Logf("sequences per replica: %v (replicas %v)", counts(home, len(pool)), homes)
	if len(homes) < 2 {
		t.Fatalf("all %d sequences hashed to replica %v: the test needs them spread", before, homes)
	}

	// Requests outside a sequence spread over the replicas.
	var spread []int
	for i := range 12 {
		r, err := inferVia(ctx, nginxREST, inferRequest(nil, tokens(fmt.Sprintf("stateless %d", i))))
		if err != nil || r.code != http.StatusOK {
			t.Fatalf("stateless request %d: %d %v %s", i, r.code, err, r.body)
		}
		n := which[r.upstream]
		spread = append(spread, n)
		routed[n]++
	}
	if len(slices.Compact(slices.Sorted(slices.Values(spread)))) < 2 {
		t.Errorf("12 requests without a sequence id all went to replica %v", spread[0])
	}

	// The replicas' own counters agree with what nginx said.
	for i, r := range pool {
		if got := restInfers200(ctx, t, r.rest); got != routed[i] {
			t.Errorf("replica %d counted %d REST infer requests answered 200; nginx sent it %d", i, got, routed[i])
		}
	}

	// The request id: the client's, else nginx's own, passed on and
	// echoed by the replica.
	for _, c := range []struct{ sent, want string }{{"trace-42", "^trace-42$"}, {"", "^[0-9a-f]{32}$"}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nginxREST+"/v2/health/ready", nil)
		if c.sent != "" {
			req.Header.Set("X-Request-Id", c.sent)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Request-Id"); !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("request id %q through nginx: %q, want %s", c.sent, got, c.want)
		}
	}

	// A gRPC sequence through nginx sticks too (its own ring: the gRPC
	// addresses hash apart from the REST ones).
	stickyGRPC(ctx, t, nginxGRPC, which, want[0])

	// Kill the replica of sequence 0.
	victim := home[0]
	pool[victim].p.kill()
	t.Logf("killed replica %d (pid %d)", victim, pool[victim].p.cmd.Process.Pid)
	for i := range before {
		id := fmt.Sprintf("chat-%d", i)
		r, err := step(ctx, nginxREST, id, seqText(i)[3], false, true, true)
		if err != nil {
			t.Fatalf("sequence %s after the kill: %v", id, err)
		}
		switch {
		case home[i] == victim:
			// Its state died with the replica: another one says so.
			if r.code != http.StatusNotFound || !strings.Contains(r.body, "unknown sequence") || which[r.upstream] == victim {
				t.Errorf("sequence %s of the killed replica: %d %s from %s, want 404 unknown sequence from a live replica", id, r.code, r.body, r.tried)
			}
		case r.code != http.StatusOK || which[r.upstream] != home[i] || !closeTo(r.hidden, want[i][3]):
			t.Errorf("sequence %s of live replica %d: %d from %s (%s), want its last step there as on the reference", id, home[i], r.code, r.tried, r.body)
		}
	}
	// New sequences go to the live replicas.
	for i := before; i < before+after; i++ {
		id := fmt.Sprintf("chat-%d", i)
		var where []int
		for k, toks := range seqText(i) {
			r, err := step(ctx, nginxREST, id, toks, k == 0, k == 3, true)
			if err != nil || r.code != http.StatusOK || !closeTo(r.hidden, want[i][k]) {
				t.Fatalf("new sequence %s step %d: %d %v %s", id, k, r.code, err, r.body)
			}
			where = append(where, which[r.upstream])
		}
		if slices.Contains(where, victim) || len(slices.Compact(where)) != 1 {
			t.Errorf("new sequence %s went to replicas %v (replica %d is dead)", id, where, victim)
		}
	}
}

// counts is how many of xs equal each of 0..n-1.
func counts(xs []int, n int) []int {
	c := make([]int, n)
	for _, x := range xs {
		c[x]++
	}
	return c
}

// stickyGRPC runs sequence 0's first three steps over gRPC through nginx,
// the id in the x-sequence-id metadata, and checks they land on one
// replica and give the reference's states.
func stickyGRPC(ctx context.Context, t *testing.T, addr string, which map[string]int, want [][]float64) {
	t.Helper()
	stub := triton.NewGRPCInferenceServiceClient(dialGRPC(t, addr))
	mctx := metadata.AppendToOutgoingContext(ctx, "x-sequence-id", "grpc-chat-0")
	var where []int
	for k, toks := range seqText(0)[:3] {
		req, err := grpcRequest(testModel, []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, int64(len(toks))}, ints: toks}},
			[]outputReq{{name: "hidden"}}, map[string]any{"sequence_start": k == 0})
		if err != nil {
			t.Fatal(err)
		}
		var hdr metadata.MD
		resp, err := stub.ModelInfer(mctx, req, grpc.Header(&hdr))
		if err != nil {
			t.Fatalf("gRPC step %d through nginx: %v", k, err)
		}
		outs, err := grpcOutputs(resp)
		if err != nil || len(outs) != 1 {
			t.Fatalf("gRPC step %d: %v %v", k, outs, err)
		}
		hidden := make([]float64, len(outs[0].floats))
		for j, f := range outs[0].floats {
			hidden[j] = float64(f)
		}
		if !closeTo(hidden, want[k]) {
			t.Errorf("gRPC step %d: hidden state differs from the reference server's", k)
		}
		up := hdr.Get(strings.ToLower(upstreamHeader))
		n, ok := 0, len(up) == 1
		if ok {
			n, ok = which[up[0]]
		}
		if !ok {
			t.Fatalf("gRPC step %d: upstream header %q names no replica", k, up)
		}
		where = append(where, n)
	}
	if len(slices.Compact(where)) != 1 {
		t.Errorf("gRPC sequence went to replicas %v", where)
	}
}
