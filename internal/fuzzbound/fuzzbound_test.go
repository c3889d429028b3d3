package fuzzbound

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	lim := Limits{CPU: 200 * time.Millisecond, Wall: 200 * time.Millisecond, Bytes: 32 << 20, PerByte: 1}
	switch os.Getenv(helperEnv) {
	case "":
		t.Skip("run by the tests that re-execute the test binary")
	case "slow":
		lim.CPU = time.Hour // the backstop must stop a body that uses no CPU
		lim.Run(t, 0, func() { time.Sleep(time.Hour) })
	case "spin":
		lim.Wall = time.Hour // the CPU bound must stop it, however busy the machine
		lim.Run(t, 0, func() { spin(func() bool { return false }) })
	case "burn": // a process that takes a core, for TestBusyMachine
		start := time.Now() // and ends by itself if it outlives its test
		spin(func() bool { return time.Since(start) > time.Minute })
	case "busy":
		busyHelper(t)
	case "fatal":
		// t.Fatal in the body: the watcher ends with the call, it does not
		// fail the process with ExitWall afterwards.
		lim.Wall = 50 * time.Millisecond
		t.Run("inner", func(t *testing.T) {
			lim.Run(t, 0, func() { t.Fatal("the body failed") })
		})
		time.Sleep(3 * lim.Wall * raceFactor())
	case "hog":
		lim.CPU, lim.Wall = time.Minute, time.Minute // the memory bound must stop it, on a busy machine too
		lim.Run(t, 0, func() {
			for range 4096 { // 4 GiB unless stopped
				sink = append(sink, make([]byte, 1<<20))
			}
		})
	case "deep":
		lim.CPU, lim.Wall = time.Minute, time.Minute
		lim.Run(t, 0, func() { deep(1 << 30) })
	case "fine":
		lim.Run(t, 1000, func() { sink = append(sink, make([]byte, 1<<20)) })
	case "fakecpu", "fakewall":
		// The clock says what the body used, whatever it took.
		c := new(fakeClock)
		lim := Limits{CPU: 2 * time.Second} // backstop 30 s
		lim.watch(t, 0, nil, func() clock { return c }, func() {
			if os.Getenv(helperEnv) == "fakecpu" {
				c.advance(2500*time.Millisecond*raceFactor(), 2100*time.Millisecond*raceFactor())
			} else {
				c.advance(31*time.Second*raceFactor(), 0)
			}
			time.Sleep(time.Hour)
		})
	}
	t.Logf("body returned")
}

func raceFactor() time.Duration {
	if raceEnabled {
		return RaceFactor
	}
	return 1
}

// spin burns CPU until stop says so.
func spin(stop func() bool) {
	sum := sha256.Sum256(nil)
	for !stop() {
		for range 100 {
			sum = sha256.Sum256(sum[:])
		}
	}
	sink = append(sink, sum[:1])
}

// fakeClock is a clock that the body moves.
type fakeClock struct{ wall, cpu atomic.Int64 }

func (c *fakeClock) since() (wall, cpu time.Duration) {
	return time.Duration(c.wall.Load()), time.Duration(c.cpu.Load())
}

func (c *fakeClock) advance(wall, cpu time.Duration) {
	c.wall.Add(int64(wall))
	c.cpu.Add(int64(cpu))
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
	if r.code != ExitWall || !strings.Contains(r.out, "wall-clock backstop") || !strings.Contains(r.out, "TestHelper") {
		t.Fatalf("exit %d, want %d, output:\n%s", r.code, ExitWall, r.out)
	}
	if !strings.Contains(r.out, "time.Sleep") {
		t.Errorf("the report lacks the running goroutine's stack:\n%s", r.out)
	}
	if r.elapsed > 20*time.Second*raceFactor() {
		t.Errorf("took %v to stop a body bounded to 200ms of wall-clock time", r.elapsed)
	}
}

func TestSpinningBodyEndsTheProcess(t *testing.T) {
	r := helper(t, "", "spin", "-test.run=^TestHelper$")
	if r.code != ExitCPU || !strings.Contains(r.out, "of CPU time, more than its bound of") {
		t.Fatalf("exit %d, want %d, output:\n%s", r.code, ExitCPU, r.out)
	}
	if !strings.Contains(r.out, "fuzzbound.spin") {
		t.Errorf("the report lacks the running goroutine's stack:\n%s", r.out)
	}
}

// The fake clock's readings stop the body by the bound they exceed, however
// long it really ran.
func TestFakeClockEndsTheProcess(t *testing.T) {
	for mode, want := range map[string]int{"fakecpu": ExitCPU, "fakewall": ExitWall} {
		r := helper(t, "", mode, "-test.run=^TestHelper$")
		if r.code != want {
			t.Errorf("%s: exit %d, want %d, output:\n%s", mode, r.code, want, r.out)
		}
	}
}

func TestFatalBodyStopsTheWatch(t *testing.T) {
	r := helper(t, "", "fatal", "-test.run=^TestHelper$")
	if r.code != 1 || !strings.Contains(r.out, "the body failed") {
		t.Fatalf("exit %d, want 1 (a failed test), output:\n%s", r.code, r.out)
	}
}

// TestBound: which bound a reading exceeds, and that a sound input on a
// busy machine (little CPU time, much wall-clock time) exceeds none where
// a wall-clock bound of the same size stops it.
func TestBound(t *testing.T) {
	const s = time.Second
	cases := []struct {
		lim  Limits
		r    reading
		want int
	}{
		{Limits{}, reading{wall: s / 100, cpu: s / 100}, 0},
		{Limits{}, reading{wall: 20 * s, cpu: s / 2}, 0},                               // load 40: not stopped
		{Limits{CPU: 2 * s, Wall: 2 * s}, reading{wall: 20 * s, cpu: s / 2}, ExitWall}, // as a 2 s wall-clock bound did
		{Limits{}, reading{wall: 2100 * time.Millisecond, cpu: 2100 * time.Millisecond}, ExitCPU},
		{Limits{}, reading{wall: 40 * s, cpu: 2100 * time.Millisecond}, ExitCPU},
		{Limits{}, reading{wall: 31 * s}, ExitWall}, // blocked
		{Limits{CPU: 3 * s}, reading{wall: 44 * s, cpu: 2 * s}, 0},
		{Limits{CPU: 3 * s}, reading{wall: 46 * s, cpu: 2 * s}, ExitWall},
		{Limits{}, reading{heap: 64<<20 + 64*10 + 1}, ExitMemory},
		{Limits{}, reading{heap: 64 << 20, stack: 64*10 + 1}, ExitMemory},
		{Limits{}, reading{heap: 64<<20 + 64*10, wall: 40 * s, cpu: 3 * s}, ExitCPU},
	}
	for _, c := range cases {
		c.lim.EnsureDefaults()
		w := &watch{lim: c.lim, limMem: c.lim.Memory(10)}
		if got, what := w.over(c.r); got != c.want {
			t.Errorf("%+v, %+v: exit %d (%s), want %d", c.lim, c.r, got, what, c.want)
		}
	}
}

// A body that takes 20 s on a machine loaded 40 times over, using 0.5 s of
// CPU time, returns; a wall-clock bound of 2 s would have ended the
// process (which would fail this test).
func TestBusyMachineFakeClock(t *testing.T) {
	c := new(fakeClock)
	Limits{}.watch(t, 0, nil, func() clock { return c }, func() {
		for range 20 {
			c.advance(time.Second*raceFactor(), time.Second/40*raceFactor())
			time.Sleep(2 * sampleEvery) // the watcher reads the clock
		}
	})
	var r reading
	r.wall, r.cpu = c.since()
	w := &watch{lim: Limits{CPU: DefaultCPU * raceFactor(), Wall: DefaultCPU * raceFactor()}, limMem: DefaultBytes}
	if code, _ := w.over(r); code != ExitWall {
		t.Fatalf("a wall-clock bound of %v does not stop %+v", DefaultCPU, r)
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
	Bytes(f, Limits{Wall: 200 * time.Millisecond}, func(t *testing.T, data []byte) {
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
	if r.code == 0 || !strings.Contains(r.out, "exit status 5") {
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
	} else if text, _ := os.ReadFile(reports[0]); !strings.Contains(string(text), "wall-clock backstop") {
		t.Errorf("report %q", text)
	}
	// Re-running the recorded input prints the report.
	name := "FuzzHelper/" + filepath.Base(found[0])
	again := helper(t, dir, "fuzz", "-test.run=^"+name+"$")
	if again.code != ExitWall || !strings.Contains(again.out, "input sha256") {
		t.Errorf("re-run: exit %d, output:\n%s", again.code, again.out)
	}
}
