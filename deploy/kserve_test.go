package deploy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// lmSpec is a small LSTM language model (random weights from the seed).
const lmSpec = "cell: lstm\ninput_size: 8\nhidden_size: 16\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: 4\n"

// TestServeAsKServe runs the built serve as KServe runs the
// ServingRuntime's container: the image's entrypoint and the runtime's
// exact arguments, {{.Name}} replaced by the InferenceService's name as
// KServe does, its environment, and /mnt/models moved to a temporary
// directory laid out as KServe's storage initializer leaves a storageUri:
// one model's files (served as the InferenceService), then a folder per
// model. It answers the runtime's readiness probe and the scrape path of
// its annotations, serves the models, and exits 0 on SIGTERM.
func TestServeAsKServe(t *testing.T) {
	objs := manifests(t)
	im := readDockerfile(t)
	rt := get[servingRuntime](t, objs, "kserve/servingruntime.yaml")
	isvc := get[inferenceService](t, objs, "kserve/inferenceservice.yaml")
	c := rt.Spec.Containers[0]
	for _, layout := range []struct {
		name   string
		files  map[string]string
		models []string
	}{
		{"one model", map[string]string{"model.yaml": lmSpec}, []string{isvc.Name}},
		{"a folder per model", map[string]string{"a/model.yaml": lmSpec, "b/model.yaml": lmSpec}, []string{"a", "b"}},
	} {
		t.Run(strings.ReplaceAll(layout.name, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range layout.files {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rest := freeAddr(t)
			var args []string
			for _, a := range append(slices.Clone(im.entrypoint[1:]), c.Args...) {
				a = strings.ReplaceAll(a, "{{.Name}}", isvc.Name)
				a = strings.ReplaceAll(a, kserveModelDir, dir)
				args = append(args, a)
			}
			for i := 0; i+1 < len(args); i++ {
				switch strings.TrimLeft(args[i], "-") {
				case "listen":
					args[i+1] = rest
				case "grpc-listen":
					args[i+1] = "off"
				}
			}
			logs, stop := runServe(t, args, c.Env)
			base := "http://" + rest
			waitOK(t, base+c.ReadinessProbe.HTTPGet.Path, logs)
			for _, m := range layout.models {
				body := `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]}]}`
				resp, err := http.Post(base+"/v2/models/"+m+"/infer", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("infer on %s: %d\n%s", m, resp.StatusCode, logs)
				}
			}
			if code, body := getURL(t, base+rt.Spec.Annotations["prometheus.kserve.io/path"]); code != 200 || !strings.Contains(body, "rnnserve_model_ready{model=\""+layout.models[0]+"\"} 1") {
				t.Errorf("scrape: %d, rnnserve_model_ready of %s missing", code, layout.models[0])
			}
			stop()
			if layout.files["model.yaml"] == "" && !strings.Contains(logs.String(), "model_name names no model") {
				t.Errorf("the log does not say that --model_name names no model of a repository:\n%s", logs)
			}
		})
	}
}

// runServe starts the built serve with args and the container's plain
// environment variables; stop sends SIGTERM and checks the exit.
func runServe(t *testing.T, args []string, env []corev1.EnvVar) (*syncBuffer, func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "serve"), args...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), "RNNSERVE_LAME_DUCK=100ms")
	for _, e := range env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	})
	return logs, func() {
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit after SIGTERM: %v, want 0\n%s", err, logs)
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("serve still running a minute after SIGTERM\n%s", logs)
		}
	}
}

// waitOK waits up to two minutes for url to answer 200.
func waitOK(t *testing.T, url string, logs *syncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := getURL(t, url); code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200\n%s", url, logs)
		}
	}
}

// getURL fetches url, returning 0 when it cannot connect.
func getURL(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// syncBuffer is a buffer safe for a process's output and the test.
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
