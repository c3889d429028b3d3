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

// TestRepositoryWithFIFO starts the server on a repository where one
// model's model.pt is a named pipe beside a good model: startup does not
// wait on the pipe (the server either starts without that model or
// refuses to start, naming the pipe), and shutdown is prompt.
func TestRepositoryWithFIFO(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, "good"), 0o755)
	os.MkdirAll(filepath.Join(repo, "pipe"), 0o755)
	golden, err := os.ReadFile("../../models/testdata/golden/ckpt_emb_lstm_fc_batchfirst/model.pt")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "good", "model.pt"), golden, 0o644)
	if err := syscall.Mkfifo(filepath.Join(repo, "pipe", "model.pt"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cmd := exec.Command(bin, "-repository", repo, "-listen", "127.0.0.1:0", "-grpc", "off")
	cmd.Env = append(os.Environ(), "RNNSERVE_LAME_DUCK=100ms")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	serving := false
	deadline := time.After(30 * time.Second)
wait:
	for {
		select {
		case <-done: // refused to start
			break wait
		case <-deadline:
			t.Fatalf("neither serving nor exited after 30 s:\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
			if strings.Contains(log.String(), "msg=serving") {
				serving = true
				break wait
			}
		}
	}
	if !strings.Contains(log.String(), "named pipe (FIFO), not a regular file") {
		t.Errorf("the log does not name the pipe:\n%s", log.String())
	}
	if serving {
		start := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("no exit 30 s after SIGTERM")
		}
		t.Logf("served without the pipe's model; stopped in %v", time.Since(start))
	}
}
