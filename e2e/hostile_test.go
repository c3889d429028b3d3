package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// hostileModel is a model folder of the repository that holds a hostile
// file where a model file belongs.
type hostileModel struct {
	name string // the folder, the model's name
	file string // the file in it that must be named in the refusal
	says string // what the refusal must say ("" for the ONNX files, which may load)
}

// hostileRepository lays out one model folder per hostile file in repo:
// the files of models/testdata/hostile (scripts/model_files.py), the
// hostile ONNX files (models/internal/onnxbuild), a named pipe called
// model.pt, a device behind model.safetensors and 256 MiB of zeros
// called model.safetensors.
func hostileRepository(ctx context.Context, t *testing.T, root, repo string) []hostileModel {
	t.Helper()
	src := filepath.Join(root, "models", "testdata", "hostile")
	data, err := os.ReadFile(filepath.Join(src, "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expect map[string]string
	if err := json.Unmarshal(data, &expect); err != nil {
		t.Fatal(err)
	}
	var hs []hostileModel
	for name, says := range expect {
		ext := filepath.Ext(name)
		file := "model" + ext
		if ext == ".yaml" {
			file = "model.yaml"
		}
		h := hostileModel{name: "h-" + strings.TrimSuffix(name, ext), file: file, says: says}
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(repo, h.name, file), string(b))
		hs = append(hs, h)
	}

	onnxDir := t.TempDir()
	cmd := exec.CommandContext(ctx, "go", "run", "./models/internal/onnxbuild/write", onnxDir)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./models/internal/onnxbuild/write: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(onnxDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		h := hostileModel{name: "onnx-" + strings.TrimSuffix(e.Name(), ".onnx"), file: "model.onnx"}
		if e.IsDir() { // a model with its external data beside it
			if err := os.Rename(filepath.Join(onnxDir, e.Name()), filepath.Join(repo, h.name)); err != nil {
				t.Fatal(err)
			}
		} else {
			b, err := os.ReadFile(filepath.Join(onnxDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(repo, h.name, h.file), string(b))
		}
		hs = append(hs, h)
	}

	fifo := hostileModel{name: "fifo", file: "model.pt", says: "named pipe (FIFO), not a regular file"}
	os.MkdirAll(filepath.Join(repo, fifo.name), 0o755)
	if err := syscall.Mkfifo(filepath.Join(repo, fifo.name, fifo.file), 0o644); err != nil {
		t.Fatal(err)
	}
	device := hostileModel{name: "device", file: "model.safetensors", says: "character device, not a regular file"}
	os.MkdirAll(filepath.Join(repo, device.name), 0o755)
	if err := os.Symlink("/dev/zero", filepath.Join(repo, device.name, device.file)); err != nil {
		t.Fatal(err)
	}
	zeros := hostileModel{name: "zeros", file: "model.safetensors", says: "unknown format"}
	writeFile(t, filepath.Join(repo, zeros.name, zeros.file), "")
	if err := os.Truncate(filepath.Join(repo, zeros.name, zeros.file), 256<<20); err != nil {
		t.Fatal(err)
	}
	return append(hs, fifo, device, zeros)
}

// peakRSS is the peak resident memory of process pid (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kib << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// TestHostileLoadsWhileServing runs the server binary on a repository
// in explicit model control, serving one model to four clients, and
// loads every hostile model file (load calls, one after another) while
// the clients' requests go on: each load answers within seconds, a
// refusal names the file and says what is wrong, the server's peak
// memory grows by less than 256 MiB, no request to the served model
// fails, the repository index lists the hostile models as UNAVAILABLE
// with their reasons (naming the file), and the server stops cleanly.
func TestHostileLoadsWhileServing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds and runs the server")
	}
	root, dir, bin := builtServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*runTimeout)
	defer cancel()
	repo := filepath.Join(dir, "models")
	writeFile(t, filepath.Join(repo, "good", "model.yaml"),
		"cell: gru\ninput_size: 8\nhidden_size: 16\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: 3\n")
	hostile := hostileRepository(ctx, t, root, repo)

	t.Setenv("RNNSERVE_LAME_DUCK", "100ms")
	p, addr := startOnFreePort(ctx, t, "hostile", dir, bin, func(addr string) []string {
		return []string{"-listen", addr, "-grpc-listen", "off", "-model-repository", repo,
			"-model-control-mode", "explicit", "-load-model", "good"}
	}, "/v2/models/good/ready")
	c := &client{base: "http://" + addr}
	infer := func() (int, []byte, error) {
		return c.post(ctx, "/v2/models/good/infer", inferRequest(nil, tokens("The hostile")))
	}
	if code, body, err := infer(); err != nil || code != http.StatusOK {
		t.Fatalf("infer before the loads: %d %s %v", code, body, err)
	}
	before := peakRSS(t, p.cmd.Process.Pid)

	var served, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body, err := infer()
				if err == nil && code == http.StatusOK {
					served.Add(1)
					continue
				}
				if failed.Add(1) <= 5 {
					t.Errorf("infer on good during the hostile loads: %d %.300s %v", code, body, err)
				}
			}
		})
	}
	for _, h := range hostile {
		start := time.Now()
		code, body, err := c.post(ctx, "/v2/repository/models/"+h.name+"/load", []byte("{}"))
		took := time.Since(start)
		if err != nil {
			t.Errorf("load %s: %v after %v", h.name, err, took)
			continue
		}
		t.Logf("load %s: %d in %v: %.200s", h.name, code, took.Round(time.Millisecond), body)
		switch {
		case took > 10*time.Second:
			t.Errorf("load %s took %v", h.name, took)
		case code >= 500:
			t.Errorf("load %s: %d %s", h.name, code, body)
		case h.says == "":
		case code == http.StatusOK:
			t.Errorf("load %s: loaded", h.name)
		case !strings.Contains(string(body), h.file):
			t.Errorf("load %s: %d %s; want a refusal naming %s", h.name, code, body, h.file)
		case !strings.Contains(string(body), h.says) && !strings.HasSuffix(string(body), `..."}`):
			// (a message cut to the response's error limit says it ends in "...")
			t.Errorf("load %s: %d %s; want a refusal saying %q", h.name, code, body, h.says)
		}
	}
	time.Sleep(200 * time.Millisecond) // requests after the last load
	close(stop)
	wg.Wait()
	after := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("%d requests served during %d hostile loads, %d failed; peak RSS %d MiB before the loads, %d MiB after",
		served.Load(), len(hostile), failed.Load(), before>>20, after>>20)
	if served.Load() == 0 || failed.Load() != 0 {
		t.Errorf("%d requests served, %d failed", served.Load(), failed.Load())
	}
	if after-before > 256<<20 {
		t.Errorf("peak RSS grew by %d MiB", (after-before)>>20)
	}

	var index []struct {
		Name, State, Reason string
	}
	code, body, err := c.post(ctx, "/v2/repository/index", []byte("{}"))
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &index) != nil {
		t.Fatalf("index: %d %s %v", code, body, err)
	}
	states := map[string]string{}
	for _, m := range index {
		states[m.Name] = m.State + " " + m.Reason
	}
	if !strings.HasPrefix(states["good"], "READY") {
		t.Errorf("good in the index: %q", states["good"])
	}
	for _, h := range hostile {
		if h.says != "" && (!strings.HasPrefix(states[h.name], "UNAVAILABLE") || !strings.Contains(states[h.name], h.file)) {
			t.Errorf("%s in the index: %q, want UNAVAILABLE naming %s", h.name, states[h.name], h.file)
		}
	}
}
