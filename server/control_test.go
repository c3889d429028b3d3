package server

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "rnnserve/server/inferencepb"
)

// controlServer is a server on a temporary repository with the given
// options, its REST and management handlers and a gRPC client; its log
// is kept.
type controlServer struct {
	s          *Server
	dir        string
	rest, mgmt string
	grpc       pb.GRPCInferenceServiceClient
	log        *syncLog
}

// syncLog is a log buffer safe for concurrent writers.
type syncLog struct {
	buf bytes.Buffer
	mu  chan struct{}
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.buf.String()
}

// startControl serves files (a repository directory) with the models
// named in load loaded at start (the others left to the repository) and
// failed as failures at start.
func startControl(t *testing.T, files map[string]string, load []string, mutate func(*Options, *Deps)) *controlServer {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := NewRepository(os.DirFS(dir), "")
	if err != nil {
		t.Fatal(err)
	}
	entries, failed := repo.LoadAll(load)
	o := testOptions()
	o.CacheBytes, o.TrafficSteps = 1<<20, 4
	logs := &syncLog{mu: make(chan struct{}, 1)}
	deps := testDeps(t, o)
	deps.Log = slog.New(slog.NewTextHandler(logs, nil))
	deps.Repository, deps.Failed = repo, failed
	if mutate != nil {
		mutate(&o, &deps)
	}
	s, err := New(entries, o, deps)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	ms := httptest.NewServer(s.ManagementHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := s.NewGRPC()
	go gs.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop(context.Background())
		hs.Close()
		ms.Close()
		s.Stop(context.Background())
	})
	return &controlServer{s: s, dir: dir, rest: hs.URL, mgmt: ms.URL, grpc: pb.NewGRPCInferenceServiceClient(conn), log: logs}
}

// call posts to a repository endpoint with an Authorization header when
// auth is set.
func (c *controlServer) call(t *testing.T, base, path, auth string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader("{}"))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), resp.Header
}

// grpcLoad loads (or, with unload, unloads) a model over gRPC with the
// given authorization metadata.
func (c *controlServer) grpcLoad(name, auth string, unload bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	if unload {
		_, err := c.grpc.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: name})
		return err
	}
	_, err := c.grpc.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: name})
	return err
}

func ready(t *testing.T, base string) int {
	t.Helper()
	code, _ := get(t, base+"/v2/health/ready")
	return code
}

// metric is the value of one sample line of /metrics, or "" when absent.
func metric(t *testing.T, base, sample string) string {
	t.Helper()
	_, body := get(t, base+"/metrics")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			return v
		}
	}
	return ""
}

// TestModelControlNone: the default refuses load and unload with 403
// (gRPC PERMISSION_DENIED) naming the setting, logs and counts each
// refusal, and changes nothing.
func TestModelControlNone(t *testing.T) {
	c := startControl(t, map[string]string{"a/model.yaml": lmSpec(8, 1), "b/model.yaml": lmSpec(8, 2)}, []string{"a"}, nil)
	for _, op := range []string{"load", "unload"} {
		code, body, _ := c.call(t, c.rest, "/v2/repository/models/a/"+op, "")
		if code != 403 || !strings.Contains(body, "model_control_mode is none") || !strings.Contains(body, "-model-control-mode explicit") {
			t.Errorf("%s: %d %s", op, code, body)
		}
		err := c.grpcLoad("a", "", op == "unload")
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "model_control_mode is none") {
			t.Errorf("gRPC %s: %v", op, err)
		}
	}
	if code, _ := get(t, c.rest+"/v2/models/a"); code != 200 {
		t.Errorf("model a after refused unloads: %d", code)
	}
	if code, _ := get(t, c.rest+"/v2/models/b"); code != 404 {
		t.Errorf("model b after refused loads: %d", code)
	}
	if got := metric(t, c.rest, `rnnserve_model_control_refused_total{reason="mode"}`); got != "4" {
		t.Errorf("refusals counted %q, want 4", got)
	}
	if n := strings.Count(c.log.String(), `msg="model event" event=refused`); n != 4 {
		t.Errorf("%d refusals logged, want 4:\n%s", n, c.log)
	}
	// The index is read-only and answers in every mode.
	idx := index(t, c.rest, "")
	if idx["a"].State != "READY" || idx["b"].State != "UNAVAILABLE" || idx["b"].Reason != "not loaded" {
		t.Errorf("index %+v", idx)
	}
}

// TestModelControlToken: with a token, every repository call without it
// or with another gets 401 (gRPC UNAUTHENTICATED) before the model name
// is looked at, so the answer is the same for a model that exists and
// one that does not; with it, explicit load and unload work.
func TestModelControlToken(t *testing.T) {
	const token = "s3cret-token-0123456789"
	c := startControl(t, map[string]string{"a/model.yaml": lmSpec(8, 1), "b/model.yaml": lmSpec(8, 2)}, []string{"a"}, func(o *Options, d *Deps) {
		o.ModelControlMode = ControlExplicit
		d.Management.Token = token
	})
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, token, "Bearer " + token + "x"} {
		var answers []string
		for _, name := range []string{"a", "b", "nope", ".."} {
			for _, op := range []string{"load", "unload"} {
				code, body, h := c.call(t, c.rest, "/v2/repository/models/"+name+"/"+op, auth)
				if code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer ") {
					t.Errorf("%s %s with %q: %d %q %s", op, name, auth, code, h.Get("WWW-Authenticate"), body)
				}
				answers = append(answers, op+" "+body)
				err := c.grpcLoad(name, auth, op == "unload")
				if status.Code(err) != codes.Unauthenticated {
					t.Errorf("gRPC %s %s with %q: %v", op, name, auth, err)
				}
				answers = append(answers, op+" "+status.Convert(err).Message())
			}
		}
		for i := 4; i < len(answers); i++ {
			if answers[i] != answers[i%4] {
				t.Errorf("with %q the answers differ by model: %q and %q", auth, answers[i%4], answers[i])
			}
		}
		if code, _, _ := c.call(t, c.rest, "/v2/repository/index", auth); code != 401 {
			t.Errorf("index with %q: %d", auth, code)
		}
	}
	good := "Bearer " + token
	if code, body, _ := c.call(t, c.rest, "/v2/repository/models/b/load", good); code != 200 {
		t.Fatalf("load with the token: %d %s", code, body)
	}
	if err := c.grpcLoad("a", "bearer "+token, true); err != nil {
		t.Errorf("gRPC unload with the token: %v", err)
	}
	if code, body, _ := c.call(t, c.rest, "/v2/repository/models/nope/load", good); code != 404 {
		t.Errorf("load of a model the repository lacks, with the token: %d %s", code, body)
	}
	if got := metric(t, c.rest, `rnnserve_model_control_refused_total{reason="bad_token"}`); got != "68" {
		t.Errorf("bad tokens counted %q, want 64", got)
	}
	if strings.Contains(c.log.String(), token) {
		t.Error("the log holds the token")
	}
}

// TestManagementListener: with Separate, the repository API answers only
// on ManagementHandler; the REST and gRPC front ends refuse it with 403
// naming the setting.
func TestManagementListener(t *testing.T) {
	c := startControl(t, map[string]string{"a/model.yaml": lmSpec(8, 1)}, nil, func(o *Options, d *Deps) {
		o.ModelControlMode = ControlExplicit
		d.Management.Separate = true
	})
	for _, p := range []string{"/v2/repository/index", "/v2/repository/models/a/load"} {
		if code, body, _ := c.call(t, c.rest, p, ""); code != 403 || !strings.Contains(body, "management.listen") {
			t.Errorf("%s on the REST address: %d %s", p, code, body)
		}
	}
	if err := c.grpcLoad("a", "", false); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "management listener") {
		t.Errorf("gRPC load: %v", err)
	}
	if code, body, _ := c.call(t, c.mgmt, "/v2/repository/models/a/load", ""); code != 200 {
		t.Fatalf("load on the management address: %d %s", code, body)
	}
	if code, _ := get(t, c.mgmt+"/v2/models/a"); code != 404 {
		t.Errorf("the management address serves more than the repository API: %d", code)
	}
	if code, _ := get(t, c.rest+"/v2/models/a"); code != 200 {
		t.Errorf("model a after the load: %d", code)
	}
}

// TestStartFailures: a model that failed at start is UNAVAILABLE with its
// reason in the index, its metadata and /metrics; the server is not
// ready (strict readiness) until it loads, or at once without strict
// readiness.
func TestStartFailures(t *testing.T) {
	files := map[string]string{"a/model.yaml": lmSpec(8, 1), "bad/model.yaml": "cell: lstm\nhidden_size: -1\n"}
	c := startControl(t, files, []string{"a", "bad"}, func(o *Options, _ *Deps) { o.ModelControlMode = ControlExplicit })
	if code := ready(t, c.rest); code != 503 {
		t.Errorf("ready with a failed model: %d", code)
	}
	if u := c.s.Unavailable(); len(u) != 1 || u[0].Name != "bad" {
		t.Errorf("unavailable %v", u)
	}
	e := index(t, c.rest, "")["bad"]
	if e.State != "UNAVAILABLE" || !strings.Contains(e.Reason, "invalid spec") {
		t.Errorf("index: %+v", e)
	}
	code, body := get(t, c.rest+"/v2/models/bad")
	if code != 404 || !strings.Contains(string(body), `model unavailable: \"bad\" did not load`) || !strings.Contains(string(body), "invalid spec") || !strings.Contains(string(body), "served: [a]") {
		t.Errorf("metadata of the failed model: %d %s", code, body)
	}
	if code, body := get(t, c.rest+"/v2/models/zzz"); code != 404 || !strings.Contains(string(body), "served: [a]") {
		t.Errorf("an unknown model: %d %s", code, body)
	}
	if code, _ := get(t, c.rest+"/v2/models/a/ready"); code != 200 {
		t.Errorf("model a's readiness: %d", code)
	}
	if v := metric(t, c.rest, `rnnserve_model_ready{model="bad"}`); v != "0" {
		t.Errorf("rnnserve_model_ready of bad: %q", v)
	}
	if v := metric(t, c.rest, `rnnserve_model_events_total{event="load_failed",model="bad"}`); v != "1" {
		t.Errorf("load_failed events of bad: %q", v)
	}
	if !strings.Contains(c.log.String(), `msg="model event" event=load_failed model=bad`) {
		t.Errorf("no load_failed event in the log:\n%s", c.log)
	}
	// A reload of a served model that fails: it keeps serving, the server
	// stays as ready as it was, the index says so.
	os.WriteFile(filepath.Join(c.dir, "a", "model.yaml"), []byte("cell: lstm\nhidden_size: -2\n"), 0o644)
	if code, _, _ := c.call(t, c.rest, "/v2/repository/models/a/load", ""); code != 400 {
		t.Errorf("failed reload: %d", code)
	}
	if e := index(t, c.rest, "")["a"]; e.State != "READY" || !strings.Contains(e.Reason, "the last reload failed") {
		t.Errorf("index after a failed reload: %+v", e)
	}
	// The broken model, mended and loaded: the server is ready.
	os.WriteFile(filepath.Join(c.dir, "bad", "model.yaml"), []byte(lmSpec(8, 3)), 0o644)
	if code, body, _ := c.call(t, c.rest, "/v2/repository/models/bad/load", ""); code != 200 {
		t.Fatalf("load: %d %s", code, body)
	}
	if code := ready(t, c.rest); code != 200 {
		t.Errorf("ready once every model loaded: %d", code)
	}
	// An explicit unload is on purpose: still ready. A failed explicit
	// load of a model never served changes nothing either.
	if code, _, _ := c.call(t, c.rest, "/v2/repository/models/bad/unload", ""); code != 200 {
		t.Error("unload")
	}
	os.MkdirAll(filepath.Join(c.dir, "new"), 0o755)
	os.WriteFile(filepath.Join(c.dir, "new", "model.yaml"), []byte("cell: gru\n"), 0o644)
	if code, _, _ := c.call(t, c.rest, "/v2/repository/models/new/load", ""); code != 400 {
		t.Error("load of a broken new model")
	}
	if code := ready(t, c.rest); code != 200 {
		t.Errorf("ready after an unload and a failed new load: %d", code)
	}
	if v := metric(t, c.rest, `rnnserve_model_ready{model="bad"}`); v != "" {
		t.Errorf("rnnserve_model_ready of an unloaded model: %q", v)
	}

	// Without strict readiness a failed model does not hold readiness.
	c2 := startControl(t, files, []string{"a", "bad"}, func(o *Options, _ *Deps) { o.StrictReadiness = new(bool) })
	if code := ready(t, c2.rest); code != 200 {
		t.Errorf("ready without strict readiness: %d", code)
	}
}

// TestPoll: in poll mode a new folder loads, a changed one reloads, a
// broken one is UNAVAILABLE (and tried again when it changes), a removed
// one unloads; load calls are refused.
func TestPoll(t *testing.T) {
	c := startControl(t, map[string]string{"a/model.yaml": lmSpec(8, 1)}, []string{"a"}, func(o *Options, _ *Deps) { o.ModelControlMode = ControlPoll })
	if code, body, _ := c.call(t, c.rest, "/v2/repository/models/a/load", ""); code != 403 || !strings.Contains(body, "model_control_mode poll") {
		t.Errorf("load in poll mode: %d %s", code, body)
	}
	c.s.Poll() // nothing changed: nothing happens
	if n := strings.Count(c.log.String(), "event=reload"); n != 0 {
		t.Errorf("a poll with nothing changed reloaded: %s", c.log)
	}
	write := func(p, data string) {
		os.MkdirAll(filepath.Dir(filepath.Join(c.dir, p)), 0o755)
		os.WriteFile(filepath.Join(c.dir, p), []byte(data), 0o644)
		// A later modification time, as a later write would have.
		later := time.Now().Add(time.Duration(len(data)) * time.Second)
		os.Chtimes(filepath.Join(c.dir, p), later, later)
	}
	write("b/model.yaml", lmSpec(8, 2))
	write("a/model.yaml", lmSpec(12, 1))
	c.s.Poll()
	if code, _ := get(t, c.rest+"/v2/models/b"); code != 200 {
		t.Errorf("new folder b after a poll: %d", code)
	}
	if got := seqOf(t, c.s, "a").net.Hidden; got != 12 {
		t.Errorf("a after a poll: hidden %d, want 12 (reloaded)", got)
	}
	write("c/model.yaml", "cell: gru\n")
	c.s.Poll()
	c.s.Poll() // the same broken files: not tried again
	if n := strings.Count(c.log.String(), "event=load_failed model=c"); n != 1 {
		t.Errorf("c failed %d times, want once", n)
	}
	if code := ready(t, c.rest); code != 503 {
		t.Errorf("ready with a broken folder in the repository: %d", code)
	}
	os.RemoveAll(filepath.Join(c.dir, "c"))
	os.RemoveAll(filepath.Join(c.dir, "b"))
	c.s.Poll()
	if code, _ := get(t, c.rest+"/v2/models/b"); code != 404 {
		t.Errorf("removed folder b after a poll: %d", code)
	}
	if code := ready(t, c.rest); code != 200 {
		t.Errorf("ready once the broken folder is gone: %d", code)
	}
	if !strings.Contains(c.log.String(), `event=unload model=b why="its folder left the repository"`) {
		t.Errorf("no unload event:\n%s", c.log)
	}
}

// TestLogSkipped: the entries of a repository's root that are not models
// are logged with the reason, a warning each, a hidden one at debug
// level only (package repository tests what Scan skips and why).
func TestLogSkipped(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "m"), 0o755)
	os.WriteFile(filepath.Join(dir, "m", "model.yaml"), []byte(lmSpec(8, 1)), 0o644)
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("hi"), 0o644)
	names, skipped, err := repoOf(t, os.DirFS(dir)).Scan()
	if err != nil || len(names) != 1 || names[0] != "m" {
		t.Fatalf("names %v, %v", names, err)
	}
	var logs bytes.Buffer
	LogSkipped(slog.New(slog.NewTextHandler(&logs, nil)), skipped)
	for _, want := range []string{"level=WARN", "entry=empty", "entry=README.md", "a file, not a folder"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("skipped entries logged without %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), ".git") {
		t.Errorf("a hidden entry logged as a warning:\n%s", logs.String())
	}
}
