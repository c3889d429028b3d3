// Package fuzzbound bounds the time and memory of one call of a fuzz body,
// and fails the input that exceeds either.
//
// Go's fuzzer has no per-input time or memory limit: an input that makes a
// parser loop forever hangs the worker, and one that makes it allocate
// gigabytes ends in the kernel's OOM killer, which the fuzzer does not
// record as a crash. A body wrapped in Run is watched while it runs: the
// wall-clock time since it started, the heap bytes allocated since it
// started and the growth of goroutine stacks (deep recursion) are sampled
// every few milliseconds and once more when the body returns.
//
// A call that exceeds a bound cannot be stopped (Go has no way to kill a
// goroutine), so Run prints a report (the test, the input's size and
// SHA-256, what was exceeded and by how much, and every goroutine's stack,
// which shows where the time went) to standard error and ends the process
// with ExitTime or ExitMemory. Under `go test -fuzz` the fuzzer takes a
// worker that exits for a crash it cannot minimise: it writes the input to
// testdata/fuzz/<Target>/ and stops at once, instead of spending the run
// minimising an input each try of which takes the whole time bound. The
// worker's own output is discarded by the fuzzer, so a worker also writes
// the report to $TMPDIR/fuzzbound-<Target>-<pid>.txt; re-running the
// recorded input (`go test -run <Target>/<file>`) prints it again. Outside
// fuzzing, the seed corpus runs through the same bounds, so a regression
// fails `go test` the same way.
//
// Memory is the process's heap allocation counter (runtime/metrics
// /gc/heap/allocs:bytes) plus stack growth, so allocations by other
// goroutines running at the same time count against the input: the fuzz
// workers run one input at a time, and seed corpora run after a package's
// tests. Allocation is counted, not live memory, so the bound holds a
// parser to what it allocates in all, which is stricter than its peak.
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
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults for a zero Limits field. The time bound is generous beside what
// a parser needs for a fuzz input (microseconds to milliseconds) so that a
// busy machine does not fail a sound input; it is multiplied by RaceFactor
// under the race detector.
const (
	DefaultTime    = 2 * time.Second
	DefaultBytes   = 64 << 20
	DefaultPerByte = 64
)

// RaceFactor multiplies the time bound when the race detector is on.
const RaceFactor = 10

// Exit codes of a process ended by Run.
const (
	ExitTime   = 3 // the body ran longer than its time bound
	ExitMemory = 4 // the body allocated more than its memory bound
)

// sampleEvery is how often a running body's time and memory are read.
const sampleEvery = 5 * time.Millisecond

// Limits bound one call of a fuzz body. The zero value is the defaults.
type Limits struct {
	// Time is the wall-clock time one input may take.
	Time time.Duration
	// Bytes is the heap one input may allocate whatever its size.
	Bytes int64
	// PerByte is the further heap one input may allocate per byte of
	// input.
	PerByte int64
}

// EnsureDefaults fills zero fields with the defaults.
func (l *Limits) EnsureDefaults() {
	if l.Time <= 0 {
		l.Time = DefaultTime
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
// ends the process with a report if body takes longer than l.Time, or
// allocates more than l.Memory(size) bytes, before it returns. size is the
// input's length in bytes (the sum of the lengths for several arguments).
// input, if not nil, is printed in the report in part and hashed.
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

func (l Limits) run(t testing.TB, size int, input []byte, body func()) {
	t.Helper()
	l.EnsureDefaults()
	if raceEnabled {
		l.Time *= RaceFactor
	}
	w := &watch{name: t.Name(), size: size, input: input, limTime: l.Time, limMem: l.Memory(size)}
	w.start = time.Now()
	w.alloc0, w.stack0 = readMemory()
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
	body()
	close(done)
	<-stopped
	w.check(true)
}

type watch struct {
	name           string
	size           int
	input          []byte
	start          time.Time
	alloc0, stack0 uint64
	limTime        time.Duration
	limMem         int64
}

// check ends the process if the body has overrun a bound. returned says
// the body has returned (the final check).
func (w *watch) check(returned bool) {
	elapsed := time.Since(w.start)
	alloc, stack := readMemory()
	used := int64(alloc - w.alloc0)
	if stack > w.stack0 {
		used += int64(stack - w.stack0)
	}
	switch {
	case used > w.limMem:
		w.fail(ExitMemory, fmt.Sprintf("allocated %s (heap %s, stack growth %s), more than its bound of %s",
			size(used), size(int64(alloc-w.alloc0)), size(max(0, int64(stack)-int64(w.stack0))), size(w.limMem)), elapsed, returned)
	case elapsed > w.limTime:
		w.fail(ExitTime, fmt.Sprintf("ran for %v, more than its bound of %v", elapsed.Round(time.Millisecond), w.limTime), elapsed, returned)
	}
}

var failing sync.Mutex

func (w *watch) fail(code int, what string, elapsed time.Duration, returned bool) {
	failing.Lock() // one report, even if the final check races a sample
	var b strings.Builder
	fmt.Fprintf(&b, "--- FAIL: %s\n", w.name)
	fmt.Fprintf(&b, "    fuzzbound: an input of %d bytes %s", w.size, what)
	if returned {
		fmt.Fprintf(&b, " (it returned after %v)", elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, " (still running after %v)", elapsed.Round(time.Millisecond))
	}
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
