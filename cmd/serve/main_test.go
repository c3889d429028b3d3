package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
	for _, c := range []struct {
		yaml string
		args []string
		want string
	}{
		{"colour: red\n", nil, "colour"},
		{"server:\n  max_steps: -1\n", nil, "max_steps = -1"},
		{"", []string{"-batching", "maybe"}, "want on or off"},
		{"", []string{"extra"}, "unexpected arguments"},
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
	bin := filepath.Join(t.TempDir(), "serve")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(cfg, []byte("read_timeout: 500ms\n"), 0o644)
	cmd := exec.Command(bin, "-config", cfg, "-listen", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-cache-bytes", "1048576")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
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
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatal("server did not start")
	}
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
