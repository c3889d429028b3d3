// Package fuzzbound bounds the CPU time, the wall-clock time and the
// memory of one call of a fuzz body, and fails the input that exceeds any.
//
// Go's fuzzer has no per-input time or memory limit: an input that makes a
// parser loop forever hangs the worker, and one that makes it allocate
// gigabytes ends in the kernel's OOM killer, which the fuzzer does not
// record as a crash. A body wrapped in Run is watched while it runs: the
// CPU time the process has used since it started, the wall-clock time
// since it started, the heap bytes allocated since it started and the
// growth of goroutine stacks (deep recursion) are sampled every few
// milliseconds and once more when the body returns.
//
// Time is bounded by CPU time (Limits.CPU), with a wall-clock backstop
// (Limits.Wall, WallPerCPU times the CPU bound unless set). Wall-clock time
// is what a busy machine inflates: at a load of 30 on two cores an input
// that takes 1 ms alone can take seconds, and a wall-clock bound then stops
// a sound input. CPU time is the work the input made the process do,
// whatever else the machine runs. The backstop ends an input that uses no
// CPU at all: one that blocks reading, waits on a channel or sleeps.
//
// The CPU time is the process's (getrusage RUSAGE_SELF), not that of the
// body's goroutine (CLOCK_THREAD_CPUTIME_ID with the goroutine locked to
// its OS thread), for two reasons. Some bodies hand their work to other
// goroutines (the server's fuzz targets call a handler whose batcher runs
// the model on goroutines of its own): a thread's clock misses that work,
// and a runaway there would be stopped only by the backstop. And locking
// the body to its thread makes every block of the body (a channel, a
// mutex) hand the thread over and back, which costs every input. What the
// process's clock counts beyond the input is the process's own other work,
// never the machine's: the garbage collector's, which the input's
// allocation mostly causes, and any goroutine running beside the body.
// Under `go test -fuzz` the coordinator is another process and the
// worker's loop waits while an input runs; seed corpora run after the
// package's tests. A goroutine running beside the body is slowed by a
// busy machine as much as the body is, so it can add to the count in
// proportion to the body's own CPU time, not to the load. Where the
// process's CPU time cannot be read (not a Unix), the CPU bound is on
// wall-clock time.
//
// A call that exceeds a bound cannot be stopped (Go has no way to kill a
// goroutine), so Run prints a report (the test, the input's size and
// SHA-256, what was exceeded and by how much, and every goroutine's stack,
// which shows where the time went) to standard error and ends the process
// with ExitCPU, ExitWall or ExitMemory. Under `go test -fuzz` the fuzzer
// takes a worker that exits for a crash it cannot minimise: it writes the
// input to testdata/fuzz/<Target>/ and stops at once, instead of spending
// the run minimising an input each try of which takes the whole time
// bound. The worker's own output is discarded by the fuzzer, so a worker
// also writes the report to $TMPDIR/fuzzbound-<Target>-<pid>.txt;
// re-running the recorded input (`go test -run <Target>/<file>`) prints it
// again. Outside fuzzing, the seed corpus runs through the same bounds, so
// a regression fails `go test` the same way.
//
// Memory is the process's heap allocation counter (runtime/metrics
// /gc/heap/allocs:bytes) plus stack growth, so allocations by other
// goroutines running at the same time count against the input, as their
// CPU time does. Allocation is counted, not live memory, so the bound
// holds a parser to what it allocates in all, which is stricter than its
// peak.
//
//	f.Fuzz(func(t *testing.T, data []byte) {
//		fuzzbound.Run(t, len(data), func() {
//			_, err := Parse(data)
//			...
//		})
//	})
package fuzzbound

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"rnnserve/internal/cputime"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults for a zero Limits field. The CPU bound is generous beside what
// a parser needs for a fuzz input (microseconds to milliseconds); the
// wall-clock backstop is far above it, so that only an input that blocks,
// or one near its CPU bound on a machine loaded many times over its
// cores, reaches it. Both are multiplied by RaceFactor under the race
// detector.
const (
	DefaultCPU     = 2 * time.Second
	WallPerCPU     = 15
	DefaultBytes   = 64 << 20
	DefaultPerByte = 64
)

// RaceFactor multiplies the time bounds when the race detector is on.
const RaceFactor = 10

// Exit codes of a process ended by Run.
const (
	ExitCPU    = 3 // the body used more CPU time than its bound
	ExitMemory = 4 // the body allocated more than its memory bound
	ExitWall   = 5 // the body ran longer than its wall-clock backstop
)

// sampleEvery is how often a running body's time and memory are read.
const sampleEvery = 5 * time.Millisecond

// Limits bound one call of a fuzz body. The zero value is the defaults.
type Limits struct {
	// CPU is the CPU time the process may use while one input runs.
	CPU time.Duration
	// Wall is the wall-clock time one input may take: a backstop for an
	// input that blocks, well above CPU. Zero is WallPerCPU times CPU.
	Wall time.Duration
	// Bytes is the heap one input may allocate whatever its size.
	Bytes int64
	// PerByte is the further heap one input may allocate per byte of
	// input.
	PerByte int64
}

// EnsureDefaults fills zero fields with the defaults.
func (l *Limits) EnsureDefaults() {
	if l.CPU <= 0 {
		l.CPU = DefaultCPU
	}
	if l.Wall <= 0 {
		l.Wall = WallPerCPU * l.CPU
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultBytes
	}
	if l.PerByte <= 0 {
		l.PerByte = DefaultPerByte
	}
}

// Memory is the memory bound for an input of size bytes.
func (l Limits) Memory(size int) int64 {
	l.EnsureDefaults()
	return l.Bytes + l.PerByte*int64(size)
}

// Run runs body under the default limits; see Limits.Run.
func Run(t testing.TB, size int, body func()) {
	Limits{}.Run(t, size, body)
}

// Run calls body on the calling goroutine (so body may call t.Fatal) and
// ends the process with a report if, before body returns, the process uses
// more than l.CPU of CPU time, or l.Wall of wall-clock time passes, or
// more than l.Memory(size) bytes are allocated. size is the input's length
// in bytes (the sum of the lengths for several arguments).
func (l Limits) Run(t testing.TB, size int, body func()) {
	l.run(t, size, nil, body)
}

// Bytes registers a fuzz body over one []byte argument and bounds every
// call with l. The report names the input's SHA-256.
func Bytes(f *testing.F, l Limits, body func(t *testing.T, data []byte)) {
	f.Fuzz(func(t *testing.T, data []byte) {
		l.run(t, len(data), data, func() { body(t, data) })
	})
}

// String is Bytes for a string argument.
func String(f *testing.F, l Limits, body func(t *testing.T, s string)) {
	f.Fuzz(func(t *testing.T, s string) {
		l.run(t, len(s), []byte(s), func() { body(t, s) })
	})
}

// A clock reads the wall-clock time and the process's CPU time since it
// was started.
type clock interface {
	since() (wall, cpu time.Duration)
}

type processClock struct {
	start  time.Time
	cpu0   time.Duration
	hasCPU bool
}

func startProcessClock() clock {
	c := &processClock{}
	c.cpu0, c.hasCPU = cputime.Process()
	c.start = time.Now()
	return c
}

func (c *processClock) since() (wall, cpu time.Duration) {
	wall = time.Since(c.start)
	if now, ok := cputime.Process(); ok && c.hasCPU {
		return wall, now - c.cpu0
	}
	return wall, wall
}

func (l Limits) run(t testing.TB, size int, input []byte, body func()) {
	t.Helper()
	l.watch(t, size, input, startProcessClock, body)
}

// watch is run with the clock that start returns.
func (l Limits) watch(t testing.TB, size int, input []byte, start func() clock, body func()) {
	t.Helper()
	l.EnsureDefaults()
	if raceEnabled {
		l.CPU *= RaceFactor
		l.Wall *= RaceFactor
	}
	w := &watch{name: t.Name(), size: size, input: input, lim: l, limMem: l.Memory(size)}
	w.alloc0, w.stack0 = readMemory()
	w.clock = start()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				w.check(false)
			}
		}
	}()
	returned := false
	defer func() {
		// Also when body calls t.Fatal (runtime.Goexit) or panics: the
		// watcher must not outlive the call and fail a later one.
		close(done)
		<-stopped
		if returned {
			w.check(true)
		}
	}()
	body()
	returned = true
}

type watch struct {
	name           string
	size           int
	input          []byte
	clock          clock
	alloc0, stack0 uint64
	lim            Limits
	limMem         int64
}

// A reading is what a body has used since it started.
type reading struct {
	wall, cpu   time.Duration
	heap, stack int64 // bytes allocated, growth of goroutine stacks
}

func (w *watch) read() reading {
	var r reading
	r.wall, r.cpu = w.clock.since()
	alloc, stack := readMemory()
	r.heap = int64(alloc - w.alloc0)
	r.stack = max(0, int64(stack)-int64(w.stack0))
	return r
}

// over returns the exit code for the bound that r exceeds and what was
// exceeded, or 0.
func (w *watch) over(r reading) (int, string) {
	switch used := r.heap + r.stack; {
	case used > w.limMem:
		return ExitMemory, fmt.Sprintf("allocated %s (heap %s, stack growth %s), more than its bound of %s",
			size(used), size(r.heap), size(r.stack), size(w.limMem))
	case r.cpu > w.lim.CPU:
		return ExitCPU, fmt.Sprintf("used %v of CPU time, more than its bound of %v", r.cpu.Round(time.Millisecond), w.lim.CPU)
	case r.wall > w.lim.Wall:
		return ExitWall, fmt.Sprintf("ran for %v, more than its wall-clock backstop of %v, using %v of CPU time (blocked, or starved of CPU)",
			r.wall.Round(time.Millisecond), w.lim.Wall, r.cpu.Round(time.Millisecond))
	}
	return 0, ""
}

// check ends the process if the body has overrun a bound. returned says
// the body has returned (the final check).
func (w *watch) check(returned bool) {
	r := w.read()
	if code, what := w.over(r); code != 0 {
		w.fail(code, what, r, returned)
	}
}

var failing sync.Mutex

func (w *watch) fail(code int, what string, r reading, returned bool) {
	failing.Lock() // one report, even if the final check races a sample
	var b strings.Builder
	fmt.Fprintf(&b, "--- FAIL: %s\n", w.name)
	fmt.Fprintf(&b, "    fuzzbound: an input of %d bytes %s", w.size, what)
	state := "still running"
	if returned {
		state = "it returned"
	}
	fmt.Fprintf(&b, " (%s after %v, %v of CPU time)", state, r.wall.Round(time.Millisecond), r.cpu.Round(time.Millisecond))
	b.WriteString("\n")
	if w.input != nil {
		fmt.Fprintf(&b, "    input sha256 %x, first bytes %q\n", sha256.Sum256(w.input), head(w.input, 256))
	}
	if !returned {
		buf := make([]byte, 64<<10)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(&b, "    goroutines (first %d bytes):\n%s\n", len(buf), buf)
	}
	if isFuzzWorker() {
		// The fuzzer discards a worker's output: the report goes to a file
		// as well, and the fuzzer records the input under testdata/fuzz.
		p := filepath.Join(os.TempDir(), fmt.Sprintf("fuzzbound-%s-%d.txt", strings.NewReplacer("/", "_", " ", "_").Replace(w.name), os.Getpid()))
		if os.WriteFile(p, []byte(b.String()), 0o644) == nil {
			fmt.Fprintf(&b, "    report written to %s\n", p)
		}
	}
	os.Stderr.WriteString(b.String())
	os.Exit(code)
}

func head(b []byte, n int) []byte {
	if len(b) > n {
		return append(bytes.Clone(b[:n]), "..."...)
	}
	return b
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

var samplePool = sync.Pool{New: func() any {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	return &s
}}

// readMemory returns the bytes allocated on the heap since the process
// started and the bytes now in goroutine stacks.
func readMemory() (alloc, stack uint64) {
	sp := samplePool.Get().(*[]metrics.Sample)
	s := *sp
	metrics.Read(s)
	alloc, stack = s[0].Value.Uint64(), s[1].Value.Uint64()
	samplePool.Put(sp)
	return alloc, stack
}

func isFuzzWorker() bool {
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}
