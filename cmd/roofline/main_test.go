package main

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/f32"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

func TestLevelOf(t *testing.T) {
	o := &options{l1: 32 << 10, l2: 1 << 20, l3: 32 << 20}
	for _, c := range []struct {
		perCore, total int64
		want           string
	}{
		{16 << 10, 32 << 10, "L1"},
		{64 << 10, 128 << 10, "L2"},
		{512 << 10, 1 << 20, "L2"},  // LSTM 256 on two cores: the superlinear case
		{1 << 20, 1 << 20, "L3"},    // the same on one core
		{8 << 20, 16 << 20, "DRAM"}, // LSTM 1024: more than half the shared L3
		{4 << 20, 8 << 20, "L3"},
	} {
		if got := levelOf(c.perCore, c.total, o); got != c.want {
			t.Errorf("levelOf(%d, %d) = %s, want %s", c.perCore, c.total, got, c.want)
		}
	}
}

// TestProjectionRoof checks that a shape's input projections are priced
// at the roof of its own precision and core count: an int8 model's at
// the int8 product's rate, not float32's.
func TestProjectionRoof(t *testing.T) {
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 64, Hidden: 128, Layers: 2}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := roofs{schedule.F32: {1: 100e9, 2: 200e9}, schedule.Int8: {1: 300e9, 2: 600e9}}
	const T = 10
	// Layer 0 reads 64 inputs, layer 1 the 128 outputs of layer 0.
	flops := 2 * T * float64(4*128*64+4*128*128)
	for _, c := range []struct {
		prec  schedule.Precision
		cores int
		rate  float64
	}{{schedule.F32, 1, 100e9}, {schedule.F32, 2, 200e9}, {schedule.Int8, 1, 300e9}, {schedule.Int8, 2, 600e9}} {
		if got, want := r.projSeconds(net, T, c.prec, c.cores), flops/c.rate; math.Abs(got-want) > want*1e-12 {
			t.Errorf("%v on %d cores: %g s, want %g", c.prec, c.cores, got, want)
		}
	}
}

// TestModel checks the roofline time against sums done by hand: W_hh at
// its bandwidth with its first pass at the model's when that is slower,
// plus the longer of the other weights' time and the projections'; and
// with some W_hh bytes hitting L2, those at L2's bandwidth.
func TestModel(t *testing.T) {
	const MB = 1e6
	s := shapeResult{hhBytes: 9 * 16 * MB, passBytes: 16 * MB, otherBytes: 16 * MB, hhMiss: -1}
	for _, c := range []struct {
		hhBW, otherBW, proj, want float64
	}{
		// A cold first pass: 16 MB at 25 GB/s, 8 passes at 100, W_ih at 25.
		{100e9, 25e9, 0, 16*MB/25e9 + 8*16*MB/100e9 + 16*MB/25e9},
		// The projections take longer than W_ih.
		{100e9, 25e9, 1e-3, 16*MB/25e9 + 8*16*MB/100e9 + 1e-3},
		// The model's footprint is read no slower than W_hh's: no cold pass.
		{100e9, 100e9, 0, 9*16*MB/100e9 + 16*MB/100e9},
	} {
		// Without a simulation every W_hh byte is a miss, whatever L2's rate.
		if got := s.model(c.hhBW, 400e9, c.otherBW, c.proj); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("model(%g, %g, %g) = %g, want %g", c.hhBW, c.otherBW, c.proj, got, c.want)
		}
	}
	// 40 MB of W_hh miss L2: 16 MB of them (the first pass) at the model's
	// 25 GB/s, 24 MB at 100; the other 104 MB hit, at 200.
	hit := s
	hit.hhMiss = 40 * MB
	if got, want := hit.model(100e9, 200e9, 25e9, 0), 16*MB/25e9+24*MB/100e9+104*MB/200e9+16*MB/25e9; math.Abs(got-want) > 1e-12 {
		t.Errorf("with hits: model %g, want %g", got, want)
	}
	// A simulation that counts more misses than reads is capped at the reads.
	hit.hhMiss = 1e3 * MB
	if got, want := hit.model(100e9, 200e9, 100e9, 0), s.model(100e9, 200e9, 100e9, 0); math.Abs(got-want) > 1e-12 {
		t.Errorf("misses past the reads: model %g, want %g", got, want)
	}
	// At T = 1 every weight is "other" (measureShape moves W_hh there).
	one := shapeResult{otherBytes: 32 * MB, passBytes: 16 * MB, hhMiss: -1}
	if got, want := one.model(100e9, 400e9, 25e9, 0), 32*MB/25e9; math.Abs(got-want) > 1e-12 {
		t.Errorf("T = 1: model %g, want %g", got, want)
	}
}

// TestHostModel checks the model with the projections overlapped only by
// the measured share: at 1 the model itself, at 0 (or below, clamped)
// the W_ih bytes and the arithmetic of every row but the first in turn,
// halfway between at 0.5; above 1 clamped to the model. The stepped
// factor stretches the W_hh time only, and never below the model's.
func TestHostModel(t *testing.T) {
	const MB = 1e6
	s := shapeResult{steps: 10, hhBytes: 9 * 16 * MB, passBytes: 16 * MB, otherBytes: 16 * MB, hhMiss: -1}
	model := s.model(100e9, 400e9, 25e9, 1e-3) // W_ih: 640 µs, the projections 1 ms
	for _, c := range []struct{ share, want float64 }{
		{1, model}, {1.5, model},
		{0, model + 16*MB/25e9}, {-0.4, model + 16*MB/25e9}, // the bytes are the shorter
		{0.5, model + 0.5*16*MB/25e9},
	} {
		if got := s.hostModel(100e9, 400e9, 25e9, 1e-3, c.share, 1); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("share %g: host model %g, want %g", c.share, got, c.want)
		}
	}
	// Where the rows after the first take less than the bytes, they are
	// what the two in turn add: 0.5 ms of 10 steps' projections, 0.45 ms
	// past the first row.
	if got, want := s.hostModel(100e9, 400e9, 25e9, 0.5e-3, 0, 1), s.model(100e9, 400e9, 25e9, 0.5e-3)+0.45e-3; math.Abs(got-want) > 1e-12 {
		t.Errorf("short projections: host model %g, want %g", got, want)
	}
	// Steps that wait for each other stretch the W_hh time alone: 9 passes
	// of 16 MB, the first from DRAM (25 GB/s), the others at 100 GB/s.
	hh := 16*MB/25e9 + 8*16*MB/100e9
	if got, want := s.hostModel(100e9, 400e9, 25e9, 1e-3, 1, 1.25), model+0.25*hh; math.Abs(got-want) > 1e-12 {
		t.Errorf("step 1.25: host model %g, want %g", got, want)
	}
	if got := s.hostModel(100e9, 400e9, 25e9, 1e-3, 1, 0.9); math.Abs(got-model) > 1e-12 {
		t.Errorf("step 0.9: host model %g, want the model's %g (clamped to 1)", got, model)
	}
	// At T = 1 the one row multiplies as it pulls, and there are no steps:
	// nothing to add.
	one := shapeResult{steps: 1, otherBytes: 32 * MB, passBytes: 16 * MB, hhMiss: -1}
	if got, want := one.hostModel(100e9, 400e9, 25e9, 1e-4, 0, 1.3), one.model(100e9, 400e9, 25e9, 1e-4); got != want {
		t.Errorf("T = 1: host model %g, want the model's %g", got, want)
	}
}

// TestHHMisses simulates the W_hh misses of P's plans against a 1 MiB
// 8-way L2: a 1 MiB slice on one core, read forwards and backwards in
// turn, misses well under half of its bytes; the same model on two cores
// (512 KiB each) misses a few per cent once warm; a 4 MiB slice misses
// all, or about three quarters where it alternates too (hosts with the
// AVX-512 packed products: the last L2's worth of a step is read first by
// the next).
func TestHHMisses(t *testing.T) {
	o := &options{l2: 1 << 20, l2Ways: 8}
	far := [2]float64{0.95, 1}
	if f32.WidePacked() {
		far = [2]float64{0.7, 0.9}
	}
	for _, c := range []struct {
		hidden, workers int
		lo, hi          float64 // bounds on the share of W_hh bytes missed
	}{
		{256, 1, 0.02, 0.5},
		{256, 2, 0, 0.1},
		{512, 1, far[0], far[1]},
	} {
		net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: c.hidden, Hidden: c.hidden, Layers: 1}, false)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := schedule.NewPool(schedule.PoolOptions{Workers: c.workers})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		prog, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Pool: pool, PrivateCacheBytes: o.l2})
		if err != nil {
			t.Fatal(err)
		}
		const T = 6
		p, err := prog.Plan(schedule.Input{T: T, B: 1, Features: make([]float32, T*c.hidden)}, schedule.PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		miss, err := hhMisses(p, o)
		if err != nil {
			t.Fatal(err)
		}
		read := float64(T-1) * float64(4*c.hidden*c.hidden*4) // the first step skips W_hh (zero initial state)
		t.Logf("lstm/%d on %d workers: %.3f of W_hh missed", c.hidden, c.workers, float64(miss)/read)
		if share := float64(miss) / read; share < c.lo || share > c.hi {
			t.Errorf("lstm/%d on %d workers: %d W_hh bytes missed of %.0f read (%.3f), want %.2f-%.2f", c.hidden, c.workers, miss, read, share, c.lo, c.hi)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, bad := range [][]string{{"-hidden", "0"}, {"-rows", "x"}, {"-kernel-hidden", "-1"}, {"-cells", "rnn"}, {"-precision", "int4"}, {"-reps", "0"}, {"-l2-ways", "0"}, {"-l2", "1000", "-l2-ways", "3"}, {"-cores", "1000"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	o, err := parseFlags([]string{"-hidden", "8,16", "-cells", "gru", "-precision", "f32,bf16", "-cores", "1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.hidden) != 2 || len(o.cells) != 1 || len(o.precision) != 2 || len(o.cores) != 1 {
		t.Errorf("parsed %+v", o)
	}
}

// TestRunSmall runs the whole command on tiny buffers and one tiny shape
// and checks the tables it prints, with the recurrent product of hidden
// 512 (a 4 MiB W on one core) on the packed W P would store.
func TestRunSmall(t *testing.T) {
	var out strings.Builder
	err := run([]string{"-cores", "1", "-hidden", "16", "-layers", "2", "-lengths", "1,3", "-cells", "lstm",
		"-precision", "f32,bf16,int8", "-time", "1ms", "-reps", "2", "-dram", "65536", "-kernel-hidden", "16,512", "-rows", "1,3",
		"-l1", "32768", "-l2", "1048576", "-l3", "33554432"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	small := "f32" // hidden 16's 4 KiB W_hh: packed where P packs every slice
	if schedule.PacksWHH(64, 16, 1048576) {
		small = "f32 packed"
	}
	for _, want := range []string{"| L1 | 16 KiB |", "| DRAM | 64 KiB |", "| lstm | 16 | 2 | 1 | f32 | 1 |", "| lstm | 16 | 2 | 3 | bf16 | 1 |",
		"| 16 | 1 | " + small + " | 1 | 4 KiB | L1 |", "| 16 | 3 | bf16 | 1 | 2 KiB | L1 |", "Arithmetic roof: ",
		"- f32 (f32.GemmNT): ", "- bf16 (f32.GemmNTBF16): ", "- int8 (f32.QuantizeI8 and f32.GemmNTI8, " + f32.I8Impl() + "): ",
		"| 512 | 1 | f32 packed | 1 | 4 MiB |", "| 512 | 3 | f32 packed | 1 | 4 MiB |", "| 512 | 1 | bf16 | 1 | 2 MiB |",
		"| lstm | 16 | 2 | 3 | int8 | 1 |", "| 512 | 1 | int8 | 1 | 1.02 MiB |",
		"Stream beside arithmetic: every worker passes its own 256 KiB of packed W", "- 1 core(s): stream ", "| roofline | host model µs | stepped/free (best / median) |"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

// TestCoreClock checks the clock estimate where there is assembly to time
// it: a sane frequency, and the same figure (within a factor 2, the
// machine is shared) from the thread's CPU time and, in one of up to ten
// tries, from the wall clock.
// Without the assembly it must say so by returning 0.
func TestCoreClock(t *testing.T) {
	hz := coreClock(5*time.Millisecond, 3, true)
	if chainAdds == 0 {
		if hz != 0 {
			t.Fatalf("coreClock without assembly = %g, want 0", hz)
		}
		return
	}
	if hz < 0.3e9 || hz > 8e9 {
		t.Fatalf("coreClock = %.3g Hz, outside 0.3-8 GHz", hz)
	}
	// The wall clock counts time the thread was not running: under go
	// test ./..., other packages' tests share the cores, so a run may
	// lose its slices. The best of a few tries is the unhindered one.
	var wall float64
	for try := 0; try < 10 && (wall < hz/2 || wall > hz*2); try++ {
		wall = coreClock(5*time.Millisecond, 5, false)
	}
	if wall < hz/2 || wall > hz*2 {
		t.Errorf("coreClock: %.3g Hz from CPU time, %.3g from the wall clock", hz, wall)
	}
	if got := addChain(1000); got != chainAdds*1000 {
		t.Errorf("addChain(1000) = %d, want %d", got, chainAdds*1000)
	}
}

// TestHostCachesEnv: roofline refuses an RNNSERVE_HOST_CACHES the
// process could not take rather than model the host's own sizes.
func TestHostCachesEnv(t *testing.T) {
	t.Setenv("RNNSERVE_HOST_CACHES", "l2=1M,l2=2M")
	err := run([]string{"-no-kernels", "-no-shapes"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "environment variable RNNSERVE_HOST_CACHES: l2 given twice") {
		t.Errorf("got %v", err)
	}
}

// TestPass checks that a backward pass reads every element once: on
// integers the two orders sum to the same, for buffers of whole pieces,
// a part of one, and more.
func TestPass(t *testing.T) {
	for _, n := range []int{1, 1000, steppedChunk, 3*steppedChunk + 17} {
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = float32(i % 7)
		}
		if f, b := pass(buf, false), pass(buf, true); f != b {
			t.Errorf("n %d: forwards %g, backwards %g", n, f, b)
		}
	}
}

// TestMeasureStepped runs the stepped probe on one worker and on two: a
// positive, finite factor whose best is at most its median, and on one
// worker (no barrier, no one to wait for) near 1.
func TestMeasureStepped(t *testing.T) {
	o := &options{time: 5 * time.Millisecond, reps: 3, cpu: true}
	for _, n := range []int{1, 2} {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			t.Fatal(err)
		}
		r := measureStepped(p, 256<<10, o)
		p.Close()
		if !(r.best > 0) || math.IsInf(r.median, 0) || r.best > r.median {
			t.Errorf("%d workers: stepped/free best %g, median %g", n, r.best, r.median)
		}
		if n == 1 && (r.best < 0.5 || r.best > 2) {
			t.Errorf("one worker: stepped/free %g, want about 1", r.best)
		}
	}
}
