package main

import (
	"bufio"
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
	"reflect"
	"regexp"
	"strings"
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
	cfg, err := parseConfig([]string{"-config", file, "-batching", "off"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9999" || cfg.Server.Batching.MaxRows != 8 || *cfg.Server.Batching.Enabled {
		t.Errorf("config %+v", cfg)
	}
	cfg, _ = parseConfig([]string{"-config", file, "-listen", "127.0.0.1:1"})
	if cfg.Listen != "127.0.0.1:1" {
		t.Errorf("flag did not override the file: %s", cfg.Listen)
	}
	if cfg, _ := parseConfig(nil); cfg.Listen != "127.0.0.1:8080" {
		t.Errorf("default listen %s", cfg.Listen)
	}
	// configs/serve.yaml says it holds the defaults.
	shipped, err := parseConfig([]string{"-config", "../../configs/serve.yaml"})
	if dflt, _ := parseConfig(nil); err != nil || !reflect.DeepEqual(shipped, dflt) {
		t.Errorf("configs/serve.yaml: %v\n%+v\nwant the defaults\n%+v", err, shipped, dflt)
	}
	// Shutdown timing and the memory budget: defaults, the file, flags.
	cfg, err = parseConfig(nil)
	if err != nil || cfg.LameDuck != 5*time.Second || cfg.DrainTimeout != 30*time.Second {
		t.Errorf("default lame duck %v, drain timeout %v (%v), want 5s and 30s", cfg.LameDuck, cfg.DrainTimeout, err)
	}
	if mem := machineMemory(); mem > 0 && cfg.Server.Budget.Bytes != server.BudgetFor(mem, cfg.Server.MaxBodyBytes) {
		t.Errorf("default budget %d, want BudgetFor(%d)", cfg.Server.Budget.Bytes, mem)
	}
	os.WriteFile(file, []byte("lame_duck: 2s\ndrain_timeout: 9s\nserver:\n  budget: {bytes: 33554432, wait: 3s}\n  max_connections: 10\n"), 0o644)
	cfg, err = parseConfig([]string{"-config", file})
	if err != nil || cfg.LameDuck != 2*time.Second || cfg.DrainTimeout != 9*time.Second || cfg.Server.Budget.Bytes != 32<<20 ||
		cfg.Server.Budget.Wait != 3*time.Second || cfg.Server.MaxConnections != 10 {
		t.Errorf("from the file: %+v %v", cfg, err)
	}
	cfg, err = parseConfig([]string{"-config", file, "-lame-duck", "0", "-drain-timeout", "4s", "-budget-bytes", "16777216", "-max-connections", "7"})
	if err != nil || cfg.LameDuck != 0 || cfg.DrainTimeout != 4*time.Second || cfg.Server.Budget.Bytes != 16<<20 || cfg.Server.MaxConnections != 7 {
		t.Errorf("flags over the file: %+v %v", cfg, err)
	}
	for _, c := range []struct {
		yaml string
		args []string
		want string
	}{
		{"colour: red\n", nil, "colour"},
		{"server:\n  max_steps: -1\n", nil, "max_steps = -1"},
		{"", []string{"-batching", "maybe"}, "want on or off"},
		{"", []string{"extra"}, "unexpected arguments"},
		{"lame_duck: -1s\n", nil, "lame_duck -1s"},
		{"", []string{"-lame-duck", "11m"}, "lame_duck 11m0s"},
		{"server:\n  max_body_bytes: 8388608\n  budget: {bytes: 4096}\n", nil, "budget.bytes = 4096"},
		{"server:\n  budget: {wait: 2m}\n", nil, "budget.wait"},
		{"server:\n  max_connections: -1\n", nil, "max_connections = -1"},
	} {
		os.WriteFile(file, []byte(c.yaml), 0o644)
		_, err := parseConfig(append([]string{"-config", file}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %v: %v, want an error mentioning %q", c.yaml, c.args, err, c.want)
		}
	}
}

// TestServeAndSIGTERM builds the server, serves the bundled model on a free
// port, answers a request, and exits 0 on SIGTERM.
func TestServeAndSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(cfg, []byte("read_timeout: 500ms\n"), 0o644)
	cmd, base := startServe(t, bin, "-config", cfg, "-listen", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-cache-bytes", "1048576", "-lame-duck", "200ms")
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
	resp, err := http.Post(base+"/v2/models/bytelm/infer", "application/json",
		strings.NewReader(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [72, 105]}], "outputs": [{"name": "top_k", "parameters": {"k": 1}}]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("infer: %v %v", resp, err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
}

// buildServe builds the server binary into a temporary directory.
func buildServe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "serve")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startServe runs bin with args and returns it and its base URL once it
// serves; the process is killed when the test ends.
func startServe(t *testing.T, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`msg=serving addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return cmd, "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatal("server did not start")
	}
	return nil, ""
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

	_, base := startServe(t, bin, "-model", dir+"/model.pt", "-listen", "127.0.0.1:0", "-grpc", "off", "-cache-bytes", "1048576")
	gold, err := safetensors.ReadFile(dir + "/io.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := gold.Tensor("tokens")
	ids, _ := tok.Int64s()
	head, _ := gold.Tensor("head")
	want, _ := head.Float32s()
	T, B, V := tok.Shape[0], tok.Shape[1], head.Shape[2]
	// The golden input is time-major; the request is batch-first.
	rows := make([]int64, 0, T*B)
	for b := range B {
		for t := range T {
			rows = append(rows, ids[t*B+b])
		}
	}
	body, _ := json.Marshal(map[string]any{
		"inputs":  []any{map[string]any{"name": "tokens", "datatype": "INT64", "shape": []int{B, T}, "data": rows}},
		"outputs": []any{map[string]any{"name": "logits"}},
	})
	resp, err := http.Post(base+"/v2/models/model/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Outputs []struct {
			Shape []int     `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || len(got.Outputs) != 1 {
		t.Fatalf("infer: status %d, %v, %+v", resp.StatusCode, err, got)
	}
	data := got.Outputs[0].Data
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
