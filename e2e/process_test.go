package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	prometheusBin = "/usr/bin/prometheus"
	promtoolBin   = "/usr/bin/promtool"
	// prometheusPkg is the Debian package that installs both.
	prometheusPkg = "prometheus"

	// stopGrace is how long a process may take to exit after SIGTERM.
	stopGrace = 15 * time.Second
)

// needTool skips the test when the executable at path is missing, or
// fails it when the environment variable CI is set: CI installs the
// Debian package pkg, so a missing tool there is a broken CI setup.
func needTool(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(path); err == nil {
		return
	}
	msg := fmt.Sprintf("%s not found: install Debian's package %s (apt-get install -y --no-install-recommends %s)", path, pkg, pkg)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, and CI must install it")
	}
	t.Skip(msg)
}

// repoRoot is the module's root: go test runs a package's tests in the
// package's directory, one level below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// buildServer builds cmd/serve into dir and returns the binary's path.
func buildServer(ctx context.Context, t *testing.T, root, dir string) string {
	t.Helper()
	noteSources(t, root)
	bin := filepath.Join(dir, "serve")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/serve")
	cmd.Dir = root
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/serve: %v (after %v; a cold build cache is slowest)\n%s", err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("built the server in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// builtServer builds cmd/serve, within buildTimeout, into a temporary
// directory of the test, and returns the module root, that directory and
// the binary.
func builtServer(t *testing.T) (root, dir, bin string) {
	t.Helper()
	root, dir = repoRoot(t), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	return root, dir, buildServer(ctx, t, root, dir)
}

// noteSources stats every file of the module outside dot-directories.
// go test caches a passing result keyed on the files the test opened or
// asked os.Stat about; go build reads the server's sources, not the test,
// so without this a change to them would not rerun the test.
func noteSources(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
		case d.IsDir() && path != root && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case d.Type().IsRegular():
			_, err = os.Stat(path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// process is a child process whose output goes to a log file.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result; read it only after exited is closed
	killed bool          // by kill: its exit status is no failure
}

// kill sends SIGKILL to the process (by its PID) and waits for its exit.
func (p *process) kill() {
	p.killed = true
	p.cmd.Process.Kill()
	<-p.exited
}

// startProcess starts bin with args in dir, its stdout and stderr going to
// dir/name.log.
func startProcess(name, dir, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits for the exit, killing the process if it
// takes longer than stopGrace. It returns the process's exit error.
func (p *process) stop() error {
	if p.running() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
			p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.name, stopGrace)
		}
	}
	if p.err != nil && !p.killed {
		return fmt.Errorf("%s: %w", p.name, p.err)
	}
	return nil
}

// tail returns the end of the process's log.
func (p *process) tail() string {
	const max = 8 << 10
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(data) > max {
		data = append([]byte("...\n"), data[len(data)-max:]...)
	}
	return string(data)
}

// waitReady polls url until it answers 200 OK, the process exits, or ctx
// ends.
func (p *process) waitReady(ctx context.Context, url string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%w: %v", errExited, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w", p.name, url, ctx.Err())
		case <-tick.C:
		}
	}
}

var errExited = errors.New("exited before it was ready")

// startOnFreePort starts a process listening on a free loopback port,
// args giving its arguments for an address, and waits until
// http://ADDR+readyPath answers 200. A port taken by someone else between
// choosing and binding it is retried on another port. The test's cleanup
// stops the process and fails the test if it does not exit cleanly.
func startOnFreePort(ctx context.Context, t *testing.T, name, dir, bin string, args func(addr string) []string, readyPath string) (*process, string) {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		addr := freeAddr(t)
		p, err := startProcess(fmt.Sprintf("%s-%d", name, i), dir, bin, args(addr)...)
		if err != nil {
			t.Fatal(err)
		}
		err = p.waitReady(ctx, "http://"+addr+readyPath)
		if err == nil {
			t.Cleanup(func() {
				if err := p.stop(); err != nil {
					t.Errorf("%v\n%s log:\n%s", err, name, p.tail())
				} else if t.Failed() {
					t.Logf("%s log:\n%s", name, p.tail())
				}
			})
			return p, addr
		}
		p.stop()
		if errors.Is(err, errExited) && strings.Contains(p.tail(), "address already in use") && i < attempts {
			t.Logf("%s: %s was taken; trying another port", name, addr)
			continue
		}
		t.Fatalf("%s on %s: %v\nlog:\n%s", name, addr, err, p.tail())
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
