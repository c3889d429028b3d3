package schedule

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"rnnserve/internal/invariants"
	"rnnserve/models"
	"rnnserve/rnn/tree"
)

// TestParallelPays checks the model that decides whether a plan whose
// parts are left open goes to the pool: two parts pay when each is longer
// than a wake-up, not when shorter; an unknown rate or one worker never
// pays; a later phase's helper part costs another wake-up, a later phase
// only the caller works in does not.
func TestParallelPays(t *testing.T) {
	const us = 1000.0 // ns
	cases := []struct {
		name    string
		work    []int64 // flops at 1 ns each
		workers int
		rate    float64
		wake    float64
		want    bool
	}{
		{"long parts", []int64{300 * us, 300 * us}, 2, 1, 60 * us, true},
		{"parts shorter than a wake-up", []int64{30 * us, 30 * us}, 2, 1, 60 * us, false},
		{"parts as long as a wake-up", []int64{60 * us, 60 * us}, 2, 1, 60 * us, false},
		{"unknown rate", []int64{300 * us, 300 * us}, 2, 0, 60 * us, false},
		{"one worker", []int64{300 * us}, 1, 1, 60 * us, false},
		{"all on the caller", []int64{300 * us, 0}, 2, 1, 0, false},
		// A lone tree: subtrees in phase 0, its top on the caller in phase 1.
		{"lone tree, long", []int64{200 * us, 200 * us, 20 * us, 0}, 2, 1, 60 * us, true},
		{"lone tree, short", []int64{40 * us, 40 * us, 20 * us, 0}, 2, 1, 60 * us, false},
		// A helper part in phase 1 waits for another wake-up: serial 280 µs,
		// parallel (60+100)+(60+40) = 260.
		{"helper in two phases", []int64{100 * us, 100 * us, 40 * us, 40 * us}, 2, 1, 60 * us, true},
		{"helper in two short phases", []int64{50 * us, 50 * us, 40 * us, 40 * us}, 2, 1, 60 * us, false},
		{"rate scales work", []int64{30, 30}, 2, 10 * us, 60 * us, true},
		{"three workers, one idle", []int64{100 * us, 100 * us, 0}, 3, 1, 60 * us, true},
	}
	for _, c := range cases {
		if got := parallelPays(c.work, nil, c.workers, c.rate, c.wake); got != c.want {
			t.Errorf("%s: parallelPays(%v, %d, %v, %v) = %v, want %v", c.name, c.work, c.workers, c.rate, c.wake, got, c.want)
		}
	}
	// Parts in chunks: a helper a wake-up late still shares the work, so
	// parts shorter than a wake-up pay when the phase is longer than one
	// (serial 100 µs, parallel (100+60)/2 + 5 = 85), and a phase shorter
	// than a wake-up or one of a single large chunk does not; parts of
	// one chunk each are no worse than whole.
	chunked := []struct {
		name  string
		work  []int64
		grain []int64
		wake  float64
		want  bool
	}{
		{"parts longer than a wake-up", []int64{300 * us, 300 * us}, []int64{30 * us}, 60 * us, true},
		{"parts shorter than a wake-up", []int64{50 * us, 50 * us}, []int64{10 * us}, 60 * us, true},
		{"all on the caller's part", []int64{200 * us, 0}, []int64{10 * us}, 60 * us, true},
		{"a phase shorter than a wake-up", []int64{25 * us, 25 * us}, []int64{5 * us}, 60 * us, false},
		{"one chunk as long as the phase", []int64{200 * us, 0}, []int64{200 * us}, 60 * us, false},
		{"a slow wake-up", []int64{300 * us, 300 * us}, []int64{30 * us}, 700 * us, false},
		{"a late phase that pays", []int64{20 * us, 20 * us, 300 * us, 300 * us}, []int64{10 * us, 30 * us}, 60 * us, true},
		{"one chunk a part, long", []int64{100 * us, 100 * us}, []int64{100 * us}, 60 * us, true},
		{"one chunk a part, short", []int64{50 * us, 50 * us}, []int64{50 * us}, 60 * us, false},
	}
	for _, c := range chunked {
		if got := parallelPays(c.work, c.grain, 2, 1, c.wake); got != c.want {
			t.Errorf("chunked, %s: parallelPays(%v, %v, 2, 1, %v) = %v, want %v", c.name, c.work, c.grain, c.wake, got, c.want)
		}
	}
}

// TestWorkRate checks the measured time per flop: unknown until a part
// is timed, then the first part's, then a quarter of the way to each new
// one; parts without flops or time count for nothing.
func TestWorkRate(t *testing.T) {
	var r workRate
	if r.nsPerFlop() != 0 {
		t.Fatalf("a new rate is %v, want 0 (unknown)", r.nsPerFlop())
	}
	r.observe(time.Microsecond, 0)
	r.observe(0, 1000)
	if r.nsPerFlop() != 0 {
		t.Fatalf("after parts without flops or time: %v, want 0", r.nsPerFlop())
	}
	r.observe(2*time.Microsecond, 1000)
	if r.nsPerFlop() != 2 {
		t.Fatalf("after 2 µs for 1000 flops: %v ns a flop, want 2", r.nsPerFlop())
	}
	r.observe(6*time.Microsecond, 1000)
	if r.nsPerFlop() != 3 {
		t.Fatalf("after 6 µs for 1000 flops: %v ns a flop, want 3", r.nsPerFlop())
	}
}

// TestNoteWake checks how a timed job moves the pool's wake-up time: a
// quarter of the way to the latest helper's arrival, even where the
// caller had taken over its part by then; a job that ended before a
// helper came says only that the wake-up was later than the caller's
// take-over, so it raises the time, never lowers it.
func TestNoteWake(t *testing.T) {
	p := &Pool{n: 2}
	p.wakeNs.Store(80_000)
	p.noteWake(40_000, 1, 0)
	if got := p.wakeNs.Load(); got != 70_000 {
		t.Errorf("after a helper started at 40 µs: %d ns, want 70000", got)
	}
	p.noteWake(30_000, 1, 10_000) // came at 30 µs, its part taken at 10
	if got := p.wakeNs.Load(); got != 60_000 {
		t.Errorf("after a helper came at 30 µs, its part taken over at 10: %d ns, want 60000", got)
	}
	p.noteWake(0, 0, 10_000) // took over at 10 µs: the helper was later
	if got := p.wakeNs.Load(); got != 60_000 {
		t.Errorf("after a take-over at 10 µs: %d ns, want 60000 (unchanged)", got)
	}
	p.noteWake(0, 0, 140_000)
	if got := p.wakeNs.Load(); got != 80_000 {
		t.Errorf("after a take-over at 140 µs: %d ns, want 80000", got)
	}
}

// TestPoolMeasuresWake checks that a pool of two measures a wake-up time
// at NewPool and a pool of one has none.
func TestPoolMeasuresWake(t *testing.T) {
	one, err := NewPool(PoolOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if one.WakeUp() != 0 {
		t.Errorf("a pool of one: wake-up %v, want 0", one.WakeUp())
	}
	pool := twoWorkers(t)
	if pool == nil {
		t.Skip("one core")
	}
	if d := pool.WakeUp(); d <= 0 || d > time.Second {
		t.Errorf("a pool of two: wake-up %v, want a measured time", d)
	}
	t.Logf("wake-up of a parked helper: %v", pool.WakeUp())
}

// TestTreeOpenParts builds tree plans whose parts are left open
// (TreeOptions.Workers 0) on a pool of two: the first runs on its caller
// (no rate measured yet) and is built for one worker, every step worker
// 0's; a plan goes to the pool's two workers when a wake-up is cheap
// against its parts, and stays on one when a wake-up is dear. Either way
// its steps say where they run and the outputs are a one-worker plan's,
// bit for bit.
func TestTreeOpenParts(t *testing.T) {
	pool := twoWorkers(t)
	if pool == nil {
		t.Skip("one core")
	}
	for _, ex := range []TreeExecutor{Recursive, DepthBatched} {
		m, trees := randomTreeModel(t, tree.BinaryLSTM)
		prog, err := NewTreeProgram(m)
		if err != nil {
			t.Fatal(err)
		}
		batch := trees(rand.New(rand.NewPCG(7, 7)), 6)
		one, err := prog.Plan(batch, TreeOptions{Executor: ex, Workers: 1, AllNodes: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := one.Run(); err != nil {
			t.Fatal(err)
		}
		want := treeOutputs(one)
		prog.rate[ex] = workRate{} // as a new program's
		open := TreeOptions{Executor: ex, AllNodes: true, Pool: pool}
		check := func(what string, parts int) {
			t.Helper()
			tp, err := prog.Plan(batch, open)
			if err != nil {
				t.Fatal(err)
			}
			if tp.Workers != parts || tp.Plan.Workers() != parts {
				t.Errorf("%v, %s: built for %d workers, steps on %d; want %d", ex, what, tp.Workers, tp.Plan.Workers(), parts)
			}
			if parts == 1 && slices.ContainsFunc(tp.Plan.Steps, func(s Step) bool { return s.Phase != 0 }) {
				t.Errorf("%v, %s: a plan on one worker has a step past phase 0", ex, what)
			}
			if err := tp.Run(); err != nil {
				t.Fatal(err)
			}
			sameBits(t, ex.String()+", "+what, treeOutputs(tp), want)
		}
		check("no rate yet", 1)
		if prog.rate[ex].nsPerFlop() <= 0 && !invariants.Enabled { // checked runs are not timed
			t.Fatalf("%v: a plan ran on its caller and no rate was measured", ex)
		}
		saved := pool.wakeNs.Load()
		pool.wakeNs.Store(1)
		prog.rate[ex].bits.Store(0)
		prog.rate[ex].observe(time.Second, 1) // slow enough that any split pays
		check("cheap wake-up", 2)
		pool.wakeNs.Store(int64(time.Hour))
		prog.rate[ex].bits.Store(0)
		prog.rate[ex].observe(time.Nanosecond, 1)
		check("dear wake-up", 1)
		pool.wakeNs.Store(saved)
	}
}

// TestGenerateOpenParts generates with the parts left open on a pool of
// two: with a dear wake-up every wave runs on the caller, with a cheap one
// a wave of three chains is split, and the tree is the same.
func TestGenerateOpenParts(t *testing.T) {
	pool := twoWorkers(t)
	if pool == nil {
		t.Skip("one core")
	}
	m := randomTopDown(t)
	prog, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	opt := GenerateOptions{MaxNodes: 11, MaxChildren: 3, MaxDepth: 6}
	one, err := prog.Generate(2, opt)
	if err != nil {
		t.Fatal(err)
	}
	if one.Plan.Workers() != 1 {
		t.Errorf("without a pool: steps on %d workers, want 1", one.Plan.Workers())
	}
	opt.Pool = pool
	saved := pool.wakeNs.Load()
	defer pool.wakeNs.Store(saved)
	for _, c := range []struct {
		name  string
		wake  int64
		rate  time.Duration
		parts int
	}{{"dear wake-up", int64(time.Hour), time.Nanosecond, 1}, {"cheap wake-up", 1, time.Second, 2}} {
		pool.wakeNs.Store(c.wake)
		prog.rate[Recursive].bits.Store(0)
		prog.rate[Recursive].observe(c.rate, 1)
		g, err := prog.Generate(2, opt)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Plan.Workers(); got != c.parts {
			t.Errorf("%s: steps on %d workers, want %d", c.name, got, c.parts)
		}
		if !slices.Equal(g.Parents, one.Parents) || !slices.Equal(g.Words, one.Words) || !slices.Equal(g.H, one.H) {
			t.Errorf("%s: the tree differs from one generated on the caller", c.name)
		}
	}
}

// randomTopDown is a small top-down generator that always grows another
// child (MaxChildren and MaxNodes stop it).
func randomTopDown(t *testing.T) *tree.Model {
	t.Helper()
	m, err := tree.NewModel(tree.Config{Cell: tree.TopDownLSTM, Vocab: 7, Embed: 6, Hidden: 5, Classes: 7}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.RandomizeTree(m, 3)
	clear(m.Grow)
	m.GrowB[0], m.GrowB[1] = 0, 1
	return m
}

// TestPaysProbes checks that a plan that would pay if waking the helpers
// were free goes to the pool once in probeEvery (to measure the wake-up
// again), however long it was measured, one that would not even then
// never, one that pays always.
func TestPaysProbes(t *testing.T) {
	p := &Pool{n: 2}
	p.wakeNs.Store(100_000)
	var rate workRate
	rate.observe(time.Nanosecond, 1)
	count := func(work []int64) int {
		n := 0
		for range 4 * probeEvery {
			if p.pays(work, nil, 2, &rate) {
				n++
			}
		}
		return n
	}
	if n := count([]int64{500_000, 500_000}); n != 4*probeEvery {
		t.Errorf("parts of 500 µs, wake-up 100 µs: on the pool %d times in %d, want every time", n, 4*probeEvery)
	}
	if n := count([]int64{80_000, 80_000}); n != 4 {
		t.Errorf("parts of 80 µs, wake-up 100 µs: on the pool %d times in %d, want 4", n, 4*probeEvery)
	}
	if n := count([]int64{30_000, 30_000}); n != 4 {
		t.Errorf("parts of 30 µs, wake-up 100 µs: on the pool %d times in %d, want 4", n, 4*probeEvery)
	}
	if n := count([]int64{60_000, 0}); n != 0 {
		t.Errorf("all 60 µs on the caller's part: on the pool %d times in %d, want 0", n, 4*probeEvery)
	}
	// A wake-up measured at an hour, in a burst, is measured again too.
	p.wakeNs.Store(int64(time.Hour))
	if n := count([]int64{500_000, 500_000}); n != 4 {
		t.Errorf("parts of 500 µs, wake-up an hour: on the pool %d times in %d, want 4", n, 4*probeEvery)
	}
	var unknown workRate
	if p.pays([]int64{500_000, 500_000}, nil, 2, &unknown) {
		t.Error("an unknown rate paid")
	}
}

// TestLongPhasesSpinByClock runs jobs of longPhases whose parts take up
// to 300 µs on a pool of two whose wake-up time is set to nothing, to 20
// µs and to a second (the waiting worker parks at once, soon, or spins up
// to PoolOptions.Spin): every part runs once per phase, after the phase
// before it.
func TestLongPhasesSpinByClock(t *testing.T) {
	pool := twoWorkers(t)
	if pool == nil {
		t.Skip("one core")
	}
	saved := pool.wakeNs.Load()
	defer pool.wakeNs.Store(saved)
	rng := rand.New(rand.NewPCG(5, 5))
	delays := make([]time.Duration, 16)
	for _, wake := range []int64{0, 20_000, int64(time.Second)} {
		pool.wakeNs.Store(wake)
		for round := range 5 {
			for i := range delays {
				delays[i] = time.Duration(rng.IntN(300)) * time.Microsecond
			}
			const phases = 8
			var ran [phases][2]int
			pool.longPhases(phases, func(ph, w int) {
				if ph > 0 && (ran[ph-1][0] != 1 || ran[ph-1][1] != 1) {
					t.Errorf("wake-up %d ns, round %d: part %d of phase %d began before phase %d ended", wake, round, w, ph, ph-1)
				}
				if d := delays[(ph*2+w)%len(delays)]; d > 0 {
					end := time.Now().Add(d)
					for time.Now().Before(end) {
					}
				}
				ran[ph][w]++
			})
			for ph := range ran {
				if ran[ph] != [2]int{1, 1} {
					t.Fatalf("wake-up %d ns, round %d: phase %d parts ran %v times, want once each", wake, round, ph, ran[ph])
				}
			}
		}
	}
}
