package schedule

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of workers, one per core, that run the phases of a
// Partitioned plan together: every worker runs its part of a phase, then
// all meet at a barrier before the next phase starts.
//
// Worker 0 is the goroutine that calls Run: for the length of the job it
// is locked to its OS thread and pinned to the pool's first CPU, so it
// needs no wake-up and its weights stay in that core's cache from one run
// to the next. Workers 1..n-1 are goroutines started by NewPool, each
// locked to an OS thread pinned to its own CPU (sched_setaffinity, where
// the platform has it). Between jobs they spin for PoolOptions.Spin, so a
// request that follows closely starts at once, then park.
//
// Run leaves the caller as it found it: its thread's CPU set restored and
// the thread unlocked. The helpers' threads end with them at Close, so no
// pinned thread goes back to the Go runtime.
//
// A Pool runs one job at a time; Run serialises concurrent callers. Close
// stops the workers; a Pool must not be used after Close.
type Pool struct {
	n      int
	cpus   []int // CPU of each worker; nil when not pinned
	mu     sync.Mutex
	start  barrier // job start: helpers wait here between jobs
	step   barrier // end of every phase
	job    func(phase, w int)
	njob   int // phases of the job
	quit   bool
	done   sync.WaitGroup
	pinErr atomic.Pointer[error]
}

// PoolOptions configure NewPool. Zero values mean defaults.
type PoolOptions struct {
	// Workers is the number of workers, the calling goroutine included; 0
	// means runtime.GOMAXPROCS(0). It may not exceed GOMAXPROCS: every
	// worker needs a P to spin on.
	Workers int
	// NoPin leaves the workers' threads wherever the OS schedules them.
	NoPin bool
	// Spin is how long an idle worker, or one waiting at a barrier, spins
	// before it parks; 0 means DefaultSpin, a negative value parks at once.
	Spin time.Duration
}

// DefaultSpin is the default PoolOptions.Spin: long enough to cover the
// gap between back-to-back requests (building the next plan) and the
// occasional stall of one core within a job, short enough that an idle
// pool gives its cores back within half a millisecond. A parked worker
// costs a futex wake-up, 40-70 µs on the project's VM; at 50 µs of spin
// enough waits parked that a 2-worker LSTM (hidden 128, T = 100) took
// 76 µs per step against 7 µs on one worker; at 500 µs it takes 8 µs,
// and hidden 512 (4 layers) 224 µs against 418 on one core.
const DefaultSpin = 500 * time.Microsecond

// MaxWorkers bounds PoolOptions.Workers and PartitionOptions.Workers.
const MaxWorkers = 256

// ErrPool is wrapped by every error about pool or partition settings.
var ErrPool = errors.New("schedule: invalid pool settings")

// NewPool starts a pool. The caller owns it and must Close it.
func NewPool(opt PoolOptions) (*Pool, error) {
	procs := runtime.GOMAXPROCS(0)
	if opt.Workers == 0 {
		opt.Workers = procs
	}
	if opt.Workers < 1 || opt.Workers > min(procs, MaxWorkers) {
		return nil, fmt.Errorf("%w: %d workers, want 1..GOMAXPROCS (%d)", ErrPool, opt.Workers, procs)
	}
	if opt.Spin == 0 {
		opt.Spin = DefaultSpin
	}
	p := &Pool{n: opt.Workers}
	spins := spinIterations(opt.Spin)
	p.start.init(p.n, spins)
	p.step.init(p.n, spins)
	if !opt.NoPin {
		p.cpus = workerCPUs(p.n)
	}
	p.done.Add(p.n - 1)
	for w := 1; w < p.n; w++ {
		go p.worker(w)
	}
	return p, nil
}

// Workers is the number of workers, the caller of Run included.
func (p *Pool) Workers() int { return p.n }

// PinError reports the first error from pinning a worker's thread to its
// CPU (the pool still runs, unpinned), or nil.
func (p *Pool) PinError() error {
	if e := p.pinErr.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *Pool) notePinErr(err error) {
	if err != nil {
		p.pinErr.CompareAndSwap(nil, &err)
	}
}

// Close stops the helper workers and waits for them to exit.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quit {
		return
	}
	p.quit = true
	p.start.wait()
	p.done.Wait()
}

func (p *Pool) worker(w int) {
	defer p.done.Done()
	// The goroutine exits still locked, so the runtime ends its thread:
	// unlocked, the thread would go back to the runtime still pinned to
	// one CPU and confine whatever goroutine it ran next.
	runtime.LockOSThread()
	if p.cpus != nil {
		p.notePinErr(pinThread(p.cpus[w]))
	}
	for {
		p.start.wait()
		if p.quit {
			return
		}
		p.phases(w)
	}
}

// phases runs worker w's part of every phase of the current job, each
// followed by the barrier.
func (p *Pool) phases(w int) {
	for ph := range p.njob {
		p.job(ph, w)
		p.step.wait()
	}
}

// Phases runs a job of n phases on all workers: f(ph, w) for every worker
// w of phase ph, a barrier between phases. It returns when every worker
// has finished the last phase. f must not call Phases or Run.
func (p *Pool) Phases(n int, f func(phase, w int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quit {
		panic("schedule: Run on a closed Pool")
	}
	if p.n == 1 {
		for ph := range n {
			f(ph, 0)
		}
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if p.cpus != nil {
		restore, err := pinCaller(p.cpus[0])
		p.notePinErr(err)
		defer restore()
	}
	p.job, p.njob = f, n
	p.start.wait()
	p.phases(0)
	p.job, p.njob = nil, 0
}

// Run runs the phases on all workers: phases[ph](w) for every worker w,
// a barrier between phases (Phases with one function per phase).
func (p *Pool) Run(phases []func(w int)) {
	p.Phases(len(phases), func(ph, w int) { phases[ph](w) })
}

// Each runs f(w) once on every worker, on that worker's thread: how a
// Partitioned program copies each worker's weights into memory that worker
// touches first.
func (p *Pool) Each(f func(w int)) { p.Phases(1, func(_, w int) { f(w) }) }

// barrier is a reusable barrier for n goroutines: the last to arrive
// releases the others by bumping a generation counter. Waiters spin on
// the counter for a while, then park on a condition variable.
type barrier struct {
	n      int32
	spins  int
	count  atomic.Int32
	gen    atomic.Uint32
	parked atomic.Int32
	mu     sync.Mutex
	cond   sync.Cond
}

func (b *barrier) init(n, spins int) {
	b.n, b.spins = int32(n), spins
	b.cond.L = &b.mu
}

func (b *barrier) wait() {
	g := b.gen.Load()
	if b.count.Add(1) == b.n {
		b.count.Store(0)
		b.gen.Add(1)
		if b.parked.Load() > 0 {
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		}
		return
	}
	for i := 0; i < b.spins; i++ {
		if b.gen.Load() != g {
			return
		}
	}
	b.mu.Lock()
	b.parked.Add(1)
	for b.gen.Load() == g {
		b.cond.Wait()
	}
	b.parked.Add(-1)
	b.mu.Unlock()
}

// spinIterations converts a spin time into iterations of the barrier's
// polling loop, timed once per process.
func spinIterations(d time.Duration) int {
	if d < 0 {
		return 0
	}
	return int(float64(d) / spinCost())
}

var spinCost = sync.OnceValue(func() float64 {
	var b barrier
	const n = 1 << 16
	b.init(2, n)
	start := time.Now()
	g := b.gen.Load()
	for i := 0; i < n; i++ {
		if b.gen.Load() != g+1 {
			continue
		}
	}
	return max(float64(time.Since(start))/n, 0.1)
})
