package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rnnserve/models/safetensors"
	"rnnserve/server"
)

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "serve.yaml")
	os.WriteFile(file, []byte("listen: 127.0.0.1:9999\nserver:\n  batching:\n    max_rows: 8\n"), 0o644)
	cfg, err := parse([]string{"-config", file, "-batching-enabled", "off"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9999" || cfg.Server.Batching.MaxRows != 8 || *cfg.Server.Batching.Enabled {
		t.Errorf("config %+v", cfg)
	}
	cfg, _ = parse([]string{"-config", file, "-listen", "127.0.0.1:1"})
	if cfg.Listen != "127.0.0.1:1" {
		t.Errorf("flag did not override the file: %s", cfg.Listen)
	}
	if cfg, _ := parse(nil); cfg.Listen != "127.0.0.1:8080" {
		t.Errorf("default listen %s", cfg.Listen)
	}
	// Shutdown timing and the memory budget: defaults, the file, flags.
	cfg, err = parse(nil)
	if err != nil || cfg.LameDuck != 5*time.Second || cfg.DrainTimeout != 30*time.Second {
		t.Errorf("default lame duck %v, drain timeout %v (%v), want 5s and 30s", cfg.LameDuck, cfg.DrainTimeout, err)
	}
	if mem := machineMemory(); cfg.Server.Budget.Bytes != 0 || mem > 0 && budgetFromMemory(8<<20) != server.BudgetFor(mem, 8<<20) {
		t.Errorf("default budget %d (0: from the memory at start), from memory %d, want BudgetFor(%d)", cfg.Server.Budget.Bytes, budgetFromMemory(8<<20), mem)
	}
	os.WriteFile(file, []byte("lame_duck: 2s\ndrain_timeout: 9s\nserver:\n  budget: {bytes: 33554432, wait: 3s}\n  max_connections: 10\n"), 0o644)
	cfg, err = parse([]string{"-config", file})
	if err != nil || cfg.LameDuck != 2*time.Second || cfg.DrainTimeout != 9*time.Second || cfg.Server.Budget.Bytes != 32<<20 ||
		cfg.Server.Budget.Wait != 3*time.Second || cfg.Server.MaxConnections != 10 {
		t.Errorf("from the file: %+v %v", cfg, err)
	}
	cfg, err = parse([]string{"-config", file, "-lame-duck", "0", "-drain-timeout", "4s", "-budget-bytes", "16777216", "-max-connections", "7"})
	if err != nil || cfg.LameDuck != 0 || cfg.DrainTimeout != 4*time.Second || cfg.Server.Budget.Bytes != 16<<20 || cfg.Server.MaxConnections != 7 {
		t.Errorf("flags over the file: %+v %v", cfg, err)
	}
	for _, c := range []struct {
		yaml string
		args []string
		want string
	}{
		{"colour: red\n", nil, "colour"},
		{"server:\n  max_steps: -1\n", nil, "(server.max_steps): server: invalid options: max_steps = -1"},
		{"", []string{"-batching-enabled", "maybe"}, "want on or off"},
		{"", []string{"extra"}, "unexpected arguments"},
		{"lame_duck: -1s\n", nil, "(lame_duck): lame-duck period -1s"},
		{"", []string{"-lame-duck", "11m"}, "flag -lame-duck: lame-duck period 11m0s"},
		{"server:\n  max_body_bytes: 8388608\n  budget: {bytes: 4096}\n", nil, "budget.bytes = 4096, want 0 (the default) or 8388608"},
		{"server:\n  budget: {wait: 2m}\n", nil, "budget.wait"},
		{"server:\n  max_connections: -1\n", nil, "max_connections = -1"},
	} {
		os.WriteFile(file, []byte(c.yaml), 0o644)
		_, err := parse(append([]string{"-config", file}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %v: %v, want an error mentioning %q", c.yaml, c.args, err, c.want)
		}
	}
}

// parse is parseConfig with flags only, no environment.
func parse(args []string) (config, error) {
	cfg, _, err := parseConfig(args, nil, io.Discard)
	return cfg, err
}

// TestServeAndSIGTERM builds the server, serves the bundled model on a free
// port, answers a request (echoing its request id and logging it), has
// the build-info metric of its -version, and exits 0 on SIGTERM.
func TestServeAndSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(cfg, []byte("read_timeout: 500ms\n"), 0o644)
	srv := startServe(t, bin, nil, "-config", cfg, "-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0", "-cache-bytes", "1048576", "-lame-duck", "200ms")
	base := srv.base
	// A client that sends its body too slowly gets a 400 once the read
	// timeout passes, and the server goes on serving.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v2/models/bytelm/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"inputs\"")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	slow, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasPrefix(string(slow), "HTTP/1.1 400") || !strings.Contains(string(slow), "timeout") {
		t.Errorf("slow client got %q, want a 400 about the timeout", slow)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v2/models/bytelm/infer",
		strings.NewReader(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [72, 105]}], "outputs": [{"name": "top_k", "parameters": {"k": 1}}]}`))
	req.Header.Set("X-Request-Id", "sigterm-test-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("infer: %v %v", resp, err)
	}
	resp.Body.Close()
	if id := resp.Header.Get("X-Request-Id"); id != "sigterm-test-1" {
		t.Errorf("X-Request-Id %q, want the client's", id)
	}
	if line := srv.log.waitLine(t, "request_id=sigterm-test-1"); !strings.Contains(line, "msg=request") || !strings.Contains(line, "status=200") {
		t.Errorf("access log line %q", line)
	}

	// The build-info metric says what -version says.
	out, err := exec.Command(bin, "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^serve (\S+) \(commit (\S+), (go\S+)\)\n$`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("-version printed %q", out)
	}
	metrics := getBody(t, base+"/metrics")
	want := fmt.Sprintf(`rnnserve_build_info{commit=%q,goversion=%q,version=%q} 1`, m[2], m[3], m[1])
	if !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}
	stopServe(t, srv)
}

// getBody GETs url and returns the body of a 200 answer.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestServeFromEnvironment configures the server by environment variables
// alone, as a container's manifest does: JSON logs at level debug, an
// access log line per request, the listen addresses and limits; a bad
// variable stops it at once, naming the variable.
func TestServeFromEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	srv := startServe(t, bin, []string{"RNNSERVE_LISTEN=127.0.0.1:0", "RNNSERVE_GRPC_LISTEN=off", "RNNSERVE_LOG_FORMAT=json", "RNNSERVE_LOG_LEVEL=debug",
		"RNNSERVE_CACHE_BYTES=1048576", "RNNSERVE_SCHEDULE_TIMING=0s", "RNNSERVE_MAX_STEPS=3", "RNNSERVE_MAX_STEP=5"})
	resp, err := http.Post(srv.base+"/v2/models/bytelm/infer", "application/json",
		strings.NewReader(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 4], "data": [72, 105, 33, 33]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "is 4, want 1..3") {
		t.Errorf("4 steps with RNNSERVE_MAX_STEPS=3: %d %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("X-Request-Id")
	line := srv.log.waitLine(t, `"request_id":"`+id+`"`)
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["status"] != 400.0 || rec["path"] != "/v2/models/bytelm/infer" {
		t.Errorf("access log line %q: %v", line, err)
	}
	srv.log.waitLine(t, `"level":"WARN","msg":"environment variable RNNSERVE_MAX_STEP is not a setting of serve`)
	if strings.Contains(srv.log.String(), "measured memory traffic off") {
		srv.log.waitLine(t, `"level":"DEBUG","msg":"measured memory traffic off`) // the reason, at debug
	}
	for line := range strings.Lines(srv.log.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("not a JSON log line: %q", line)
		}
	}
	stopServe(t, srv)

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "RNNSERVE_BATCHING_QUEUE_LENGTH=many")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), `serve: environment variable RNNSERVE_BATCHING_QUEUE_LENGTH: "many" is not an integer`) {
		t.Errorf("bad variable: exit %d %v, %s", code, err, out)
	}
}

// TestHelpAndVersion: serve -h prints every setting with its variable and
// exits 0; -version prints what -ldflags set when the build has no VCS
// information.
func TestHelpAndVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server binary")
	}
	bin := buildServe(t, "-buildvcs=false", "-ldflags", "-X main.version=v9.8.7-test -X main.commit=0123abcd")
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Errorf("serve -h: %v, want exit 0", err)
	}
	for i := range settings {
		if s := &settings[i]; !strings.Contains(string(out), "-"+s.flag+" ") || !strings.Contains(string(out), s.env()) {
			t.Errorf("serve -h lacks -%s or %s", s.flag, s.env())
		}
	}
	out, err = exec.Command(bin, "-version").Output()
	if want := fmt.Sprintf("serve v9.8.7-test (commit 0123abcd, %s)\n", runtime.Version()); err != nil || string(out) != want {
		t.Errorf("-version: %q %v, want %q", out, err, want)
	}
}

// buildServe builds the server binary into a temporary directory, with
// the extra go build arguments given.
func buildServe(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "serve")
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// served is a running server: its process, base URL and log.
type served struct {
	cmd  *exec.Cmd
	base string
	log  *syncBuffer
}

// syncBuffer is a log written by one goroutine and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLine waits for a log line containing want and returns it.
func (b *syncBuffer) waitLine(t *testing.T, want string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.Lines(b.String()) {
			if strings.Contains(line, want) {
				return line
			}
		}
	}
	t.Fatalf("no log line with %q:\n%s", want, b.String())
	return ""
}

// startServe runs bin with args (and env added to the test's
// environment) and returns it once it serves; the process is killed when
// the test ends. It finds the address in the serving log line, text or
// JSON.
func startServe(t *testing.T, bin string, env []string, args ...string) served {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// A short lame-duck period keeps the tests quick; a test's env or
	// flags may set another.
	cmd.Env = append(append(os.Environ(), "RNNSERVE_LAME_DUCK=100ms"), env...)
	srv := served{cmd: cmd, log: &syncBuffer{}}
	cmd.Stderr = srv.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	re := regexp.MustCompile(`msg=serving addr=(\S+)|"msg":"serving","addr":"([^"]+)"`)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(srv.log.String()); m != nil {
			srv.base = "http://" + m[1] + m[2]
			return srv
		}
	}
	t.Fatalf("server did not start:\n%s", srv.log.String())
	return srv
}

// stopServe sends SIGTERM and checks the server exits 0.
func stopServe(t *testing.T, srv served) {
	t.Helper()
	srv.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- srv.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0\n%s", err, srv.log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
}

// TestServeCheckpoint serves a model the way a PyTorch user has it, in
// one command: torch.save(model.state_dict()) of a module with its own
// names (emb, lstm, fc; batch_first=True), no spec. -print-spec shows the
// inferred spec, and the served logits equal PyTorch's.
func TestServeCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	const dir = "../../models/testdata/golden/ckpt_emb_lstm_fc_batchfirst"
	bin := buildServe(t)
	out, err := exec.Command(bin, "-model", dir+"/model.pt", "-print-spec").Output()
	if err != nil {
		t.Fatalf("-print-spec: %v", err)
	}
	for _, want := range []string{"# model model", "# Inferred by rnnserve from model.pt", "cell: lstm", "hidden_size: 20", "vocab_size: 50", "rnn: lstm"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("-print-spec output lacks %q:\n%s", want, out)
		}
	}

	base := startServe(t, bin, nil, "-model", dir+"/model.pt", "-listen", "127.0.0.1:0", "-grpc-listen", "off", "-cache-bytes", "1048576").base
	gold, err := safetensors.ReadFile(dir + "/io.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	o, T, B := inferGolden(t, base, gold, "logits")
	head, _ := gold.Tensor("head")
	want, _ := head.Float32s()
	V := head.Shape[2]
	data := o.Data
	if len(data) != B*T*V {
		t.Fatalf("logits of %d values, want %d", len(data), B*T*V)
	}
	for b := range B {
		for t2 := range T {
			for v := range V {
				g, w := data[(b*T+t2)*V+v], float64(want[(t2*B+b)*V+v])
				if math.Abs(g-w) > 1e-4*math.Max(1, math.Abs(w)) {
					t.Fatalf("logit [%d][%d][%d] = %v, PyTorch %v", b, t2, v, g, w)
				}
			}
		}
	}
}

// servedOutput is an output of an infer response.
type servedOutput struct {
	Name  string    `json:"name"`
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

// inferGolden sends a golden case's time-major tokens batch-first to
// model "model" of the server at base, asking for outputs (none: the
// model's own), and returns the one output of the answer and the case's
// steps and rows.
func inferGolden(t *testing.T, base string, gold *safetensors.File, outputs ...string) (out servedOutput, T, B int) {
	t.Helper()
	tok, _ := gold.Tensor("tokens")
	ids, _ := tok.Int64s()
	T, B = tok.Shape[0], tok.Shape[1]
	rows := make([]int64, 0, T*B)
	for b := range B {
		for t := range T {
			rows = append(rows, ids[t*B+b])
		}
	}
	req := map[string]any{"inputs": []any{map[string]any{"name": "tokens", "datatype": "INT64", "shape": []int{B, T}, "data": rows}}}
	if len(outputs) > 0 {
		var asked []any
		for _, name := range outputs {
			asked = append(asked, map[string]any{"name": name})
		}
		req["outputs"] = asked
	}
	body, _ := json.Marshal(req)
	resp, err := http.Post(base+"/v2/models/model/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Outputs []servedOutput `json:"outputs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || len(got.Outputs) != 1 {
		t.Fatalf("infer: status %d, %v, %+v", resp.StatusCode, err, got)
	}
	return got.Outputs[0], T, B
}

// TestServeClassifierCheckpoint serves the usual bidirectional
// classifier, fc(cat(h_n[-2], h_n[-1])), from its checkpoint alone, over
// an LSTM and over an nn.RNN: a state_dict cannot say where the head
// reads, nor an nn.RNN's nonlinearity, so serve refuses with the spec
// lines and the flags that settle them, -print-spec prints the inferred
// spec and what it lacks, and with -head-input h_n (and -nonlinearity
// tanh) the logits, one row per sequence, are PyTorch's.
func TestServeClassifierCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	for _, c := range []struct {
		dir     string
		refusal []string // what serve without the flags must say
		flags   []string
	}{
		{"ckpt_bilstm_classifier_hn", []string{`add "input: h_n"`, "-head-input h_n"}, []string{"-head-input", "h_n"}},
		{"ckpt_rnn_tanh_classifier_hn", []string{`add "input: h_n"`, `write "cell: rnn_tanh"`, "-head-input h_n", "-nonlinearity tanh or relu"},
			[]string{"-head-input", "h_n", "-nonlinearity", "tanh"}},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dir := "../../models/testdata/golden/" + c.dir
			var stderr bytes.Buffer
			cmd := exec.Command(bin, "-model", dir+"/model.pt", "-listen", "127.0.0.1:0", "-grpc", "off")
			cmd.Stderr = &stderr
			err := cmd.Run()
			for _, want := range c.refusal {
				if err == nil || !strings.Contains(stderr.String(), want) {
					t.Errorf("served without the flags: %v, want an error saying %q\n%s", err, want, stderr.String())
				}
			}
			out, err := exec.Command(bin, "-model", dir+"/model.pt", "-print-spec").Output()
			if err != nil {
				t.Fatalf("-print-spec: %v", err)
			}
			for _, want := range []string{"# Not servable until stated: head.input", "bidirectional: true", "out_features:"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("-print-spec output lacks %q:\n%s", want, out)
				}
			}

			args := append([]string{"-model", dir + "/model.pt", "-listen", "127.0.0.1:0", "-grpc", "off", "-cache-bytes", "1048576"}, c.flags...)
			base := startServe(t, bin, nil, args...).base
			gold, err := safetensors.ReadFile(dir + "/io.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			o, _, B := inferGolden(t, base, gold)
			head, _ := gold.Tensor("head")
			want, _ := head.Float32s()
			V := head.Shape[1]
			if o.Name != "logits" || !slices.Equal(o.Shape, []int{B, V}) {
				t.Fatalf("output %s %v, want logits [%d %d]", o.Name, o.Shape, B, V)
			}
			for i, w := range want {
				if math.Abs(o.Data[i]-float64(w)) > 1e-5*math.Max(1, math.Abs(float64(w))) {
					t.Fatalf("logit %d = %v, PyTorch %v", i, o.Data[i], w)
				}
			}
		})
	}
}
