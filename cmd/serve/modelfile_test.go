package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestModelFileKinds runs the server binary on model files as an operator
// has them: a Hugging Face cache snapshot (its file a link into
// ../../blobs) is served; a named pipe called model.pt is refused at once,
// naming it, instead of blocking startup forever.
func TestModelFileKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	golden, err := os.ReadFile("../../models/testdata/golden/ckpt_emb_lstm_fc_batchfirst/model.pt")
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "models--user--lm")
	snap := filepath.Join(cache, "snapshots", "5d1f0e2a")
	os.MkdirAll(filepath.Join(cache, "blobs"), 0o755)
	os.MkdirAll(snap, 0o755)
	os.WriteFile(filepath.Join(cache, "blobs", "3a7bd3e2360a3d29"), golden, 0o644)
	if err := os.Symlink("../../blobs/3a7bd3e2360a3d29", filepath.Join(snap, "model.pt")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "model.pt")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("serve %s still running after 30s", strings.Join(args, " "))
		}
		return string(out), err
	}
	for _, p := range []string{filepath.Join(snap, "model.pt"), snap} {
		out, err := run("-model", p, "-print-spec")
		if err != nil || !strings.Contains(out, "hidden_size: 20") {
			t.Errorf("-model %s: %v\n%s", p, err, out)
		}
	}
	start := time.Now()
	out, err := run("-model", fifo, "-listen", "127.0.0.1:0", "-grpc", "off")
	if err == nil || !strings.Contains(out, fifo) || !strings.Contains(out, "named pipe (FIFO), not a regular file") {
		t.Errorf("-model on a FIFO: %v\n%s", err, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to refuse a FIFO", d)
	}
}
