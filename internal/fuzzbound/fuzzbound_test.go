package fuzzbound

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv selects what a re-executed test binary does in TestHelper and
// FuzzHelper; both do nothing without it.
const helperEnv = "FUZZBOUND_HELPER"

var sink [][]byte

// TestHelper is the body of the subprocess tests below.
func TestHelper(t *testing.T) {
	lim := Limits{Time: 200 * time.Millisecond, Bytes: 32 << 20, PerByte: 1}
	switch os.Getenv(helperEnv) {
	case "":
		t.Skip("run by the tests that re-execute the test binary")
	case "slow":
		lim.Run(t, 0, func() { time.Sleep(time.Hour) })
	case "hog":
		lim.Time = time.Minute // the memory bound must stop it, on a busy machine too
		lim.Run(t, 0, func() {
			for range 4096 { // 4 GiB unless stopped
				sink = append(sink, make([]byte, 1<<20))
			}
		})
	case "deep":
		lim.Time = time.Minute
		lim.Run(t, 0, func() { deep(1 << 30) })
	case "fine":
		lim.Run(t, 1000, func() { sink = append(sink, make([]byte, 1<<20)) })
	}
	t.Logf("body returned")
}

//go:noinline
func deep(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%256])
}

type result struct {
	code    int
	out     string
	elapsed time.Duration
	maxRSS  int64 // bytes
}

func helper(t *testing.T, dir string, mode string, args ...string) result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	r := result{out: out.String(), elapsed: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss << 10
	}
	return r
}

func TestSlowBodyEndsTheProcess(t *testing.T) {
	r := helper(t, "", "slow", "-test.run=^TestHelper$")
	if r.code != ExitTime || !strings.Contains(r.out, "ran for") || !strings.Contains(r.out, "TestHelper") {
		t.Fatalf("exit %d, want %d, output:\n%s", r.code, ExitTime, r.out)
	}
	if !strings.Contains(r.out, "time.Sleep") {
		t.Errorf("the report lacks the running goroutine's stack:\n%s", r.out)
	}
	if r.elapsed > 20*time.Second {
		t.Errorf("took %v to stop a body bounded to 200ms", r.elapsed)
	}
}

func TestMemoryHogEndsTheProcess(t *testing.T) {
	r := helper(t, "", "hog", "-test.run=^TestHelper$")
	if r.code != ExitMemory || !strings.Contains(r.out, "allocated") {
		t.Fatalf("exit %d, want %d, output:\n%s", r.code, ExitMemory, r.out)
	}
	if r.maxRSS > 512<<20 {
		t.Errorf("peak RSS %d MiB for a 32 MiB bound", r.maxRSS>>20)
	}
}

func TestDeepRecursionEndsTheProcess(t *testing.T) {
	r := helper(t, "", "deep", "-test.run=^TestHelper$")
	if r.code != ExitMemory || !strings.Contains(r.out, "stack growth") {
		t.Fatalf("exit %d, want %d, output:\n%s", r.code, ExitMemory, r.out)
	}
}

func TestBodyWithinBoundsReturns(t *testing.T) {
	r := helper(t, "", "fine", "-test.run=^TestHelper$", "-test.v")
	if r.code != 0 || !strings.Contains(r.out, "body returned") {
		t.Fatalf("exit %d, output:\n%s", r.code, r.out)
	}
}

func TestLimits(t *testing.T) {
	var l Limits
	if got := l.Memory(10); got != DefaultBytes+10*DefaultPerByte {
		t.Errorf("default Memory(10) = %d", got)
	}
	if got := (Limits{Bytes: 100, PerByte: 3}).Memory(10); got != 130 {
		t.Errorf("Memory(10) = %d, want 130", got)
	}
	Run(t, 5, func() {}) // a quick body returns
}

// FuzzHelper hangs on any input longer than 8 bytes, which the fuzzer's
// mutations reach within a few hundred inputs.
func FuzzHelper(f *testing.F) {
	if os.Getenv(helperEnv) != "fuzz" {
		f.Skip("run by TestFuzzerRecordsSlowInput")
	}
	f.Add([]byte("seed"))
	Bytes(f, Limits{Time: 200 * time.Millisecond}, func(t *testing.T, data []byte) {
		if len(data) > 8 {
			time.Sleep(time.Hour)
		}
	})
}

// TestFuzzerRecordsSlowInput runs the fuzzer on FuzzHelper: the slow input
// must be written to the corpus at once, not minimised.
func TestFuzzerRecordsSlowInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the fuzzer")
	}
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	r := helper(t, dir, "fuzz", "-test.run=^$", "-test.fuzz=^FuzzHelper$", "-test.fuzztime=60s",
		"-test.parallel=1", "-test.fuzzcachedir="+filepath.Join(dir, "cache"))
	if r.code == 0 || !strings.Contains(r.out, "exit status 3") {
		t.Fatalf("exit %d, output:\n%s", r.code, r.out)
	}
	if strings.Contains(r.out, "minimizing") {
		t.Errorf("the fuzzer minimised a slow input:\n%s", r.out)
	}
	found, _ := filepath.Glob(filepath.Join(dir, "testdata", "fuzz", "FuzzHelper", "*"))
	if len(found) != 1 {
		t.Fatalf("%d inputs recorded, want 1; output:\n%s", len(found), r.out)
	}
	rec, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(rec, []byte("go test fuzz v1\n[]byte(")) {
		t.Errorf("recorded input %q", rec)
	}
	reports, _ := filepath.Glob(filepath.Join(dir, "fuzzbound-FuzzHelper-*.txt"))
	if len(reports) != 1 {
		t.Errorf("%d report files in $TMPDIR, want 1", len(reports))
	} else if text, _ := os.ReadFile(reports[0]); !strings.Contains(string(text), "ran for") {
		t.Errorf("report %q", text)
	}
	// Re-running the recorded input prints the report.
	name := "FuzzHelper/" + filepath.Base(found[0])
	again := helper(t, dir, "fuzz", "-test.run=^"+name+"$")
	if again.code != ExitTime || !strings.Contains(again.out, "input sha256") {
		t.Errorf("re-run: exit %d, output:\n%s", again.code, again.out)
	}
}
