package choice

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/hugepage"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// TestBuilds: Builds makes each candidate's program once; P on one core is
// the Serial form of P across all Cores (the same weight buffers, the
// same answers bit for bit) when those weights are larger than the LLC,
// a program of its own when they fit or when there is one core; and a
// timed choice (Choose with a budget) leaves the programs it timed for
// the caller.
func TestBuilds(t *testing.T) {
	net, pools := smallModel(t, 2)
	in := ReferenceInput(net, 5)
	run := func(p *schedule.Program) []float32 {
		t.Helper()
		pl, err := p.Plan(in, schedule.PlanOptions{Head: true})
		if err != nil {
			t.Fatal(err)
		}
		res, err := pl.Run()
		if err != nil {
			t.Fatal(err)
		}
		return append(append([]float32(nil), res.Output...), res.Head...)
	}
	for _, prec := range []schedule.Precision{schedule.F32, schedule.BF16} {
		for _, c := range []struct {
			cores  int
			llc    int64
			serial bool
		}{{2, 16 << 10, true}, {2, 1 << 30, false}, {1, 16 << 10, false}} {
			t.Run(fmt.Sprintf("%v/cores=%d/llc=%d", prec, c.cores, c.llc), func(t *testing.T) {
				b := &Builds{Net: net, Pools: pools, Cores: c.cores, LLC: c.llc}
				one := Candidate{Sched: schedule.Partitioned, Prec: prec, Workers: 1}
				p, err := b.Program(one)
				if err != nil {
					t.Fatal(err)
				}
				if again, err := b.Program(one); err != nil || again != p {
					t.Errorf("a second call built a new program (%v)", err)
				}
				if Of(p) != one {
					t.Errorf("the program runs %v on %d cores, want %v on 1", Of(p), p.Workers(), one)
				}
				serial, err := b.Serial(one)
				if err != nil || serial != c.serial {
					t.Errorf("Serial = %v (%v), want %v", serial, err, c.serial)
				}
				if c.cores == 1 {
					if len(b.progs) != 1 {
						t.Errorf("%d programs built for one core, want 1", len(b.progs))
					}
					return
				}
				wide, err := b.Program(Candidate{Sched: schedule.Partitioned, Prec: prec, Workers: 2})
				if err != nil {
					t.Fatal(err)
				}
				if Shares(wide, c.llc) != c.serial {
					t.Errorf("Shares = %v, want %v", !c.serial, c.serial)
				}
				if same := sameWeights(p, wide); same != c.serial {
					t.Fatalf("one core reads the wide form's weight buffers: %v, want %v", same, c.serial)
				}
				if !c.serial {
					return
				}
				got, want := run(p), run(wide)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("value %d: %v on one core, %v on two", i, got[i], want[i])
					}
				}
			})
		}
	}
	t.Run("timed", func(t *testing.T) {
		b := &Builds{Net: net, Pools: pools, Cores: 2, LLC: 16 << 10}
		h := Host{LLC: 16 << 10, Private: PrivateOrDefault(0), Workers: 1, Steps: 5}
		if _, _, _, err := Choose(net, 0, schedule.F32, h, b, 1); err != nil {
			t.Fatal(err)
		}
		one := Candidate{Sched: schedule.Partitioned, Workers: 1}
		timed, ok := b.progs[one]
		if !ok {
			t.Fatalf("the clock did not time %v on one core (built: %v)", one, len(b.progs))
		}
		if p, err := b.Program(one); err != nil || p != timed {
			t.Errorf("the program served is not the one timed (%v)", err)
		}
		wide := b.progs[Candidate{Sched: schedule.Partitioned, Workers: 2}]
		if wide == nil || !sameWeights(timed, wide) {
			t.Error("the one-core P timed does not read P across two cores' weights")
		}
	})
}

// sameWeights reports whether a and b read the same weight buffers.
func sameWeights(a, b *schedule.Program) bool {
	wa, wb := a.Weights(), b.Weights()
	if len(wa) != len(wb) {
		return false
	}
	for i := range wa {
		if wa[i] != wb[i] {
			return false
		}
	}
	return true
}

// TestChooseLoadPeak: a timed choice over a model whose weights are larger
// than the last-level cache maps, while it decides, at most the largest
// weight copy any one schedule makes (here A's G or P's slices, each as
// large as the network's matrices) and the cache's size: it does not time
// A's copy beside P's. The program kept is one the clock timed (building
// it again maps nothing). Mappings are read from internal/hugepage, so the
// test needs a host with transparent huge pages.
func TestChooseLoadPeak(t *testing.T) {
	net, weights, pool := mappedModel(t, 5)
	const llc = 1 << 20
	b := &Builds{Net: net, Pools: Pools{2: pool}, Cores: 2, LLC: llc}
	h := Host{LLC: llc, Private: PrivateOrDefault(0), Workers: 2, Steps: 5}
	before := hugepage.MappedTotal()
	chosen, why, traffic, err := Choose(net, 0, schedule.F32, h, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	during := hugepage.MappedTotal() - before
	if !strings.Contains(why, "timed on this host") {
		t.Fatalf("the clock did not run: %s", why)
	}
	if during > weights+llc {
		t.Errorf("the timed choice mapped %d bytes beside the network's %d, want at most %d (the largest copy and the LLC): %s",
			during, weights, weights+llc, why)
	}
	var measured int
	for _, tr := range traffic {
		if tr.MeasuredSeconds != nil {
			measured++
		}
	}
	if measured < 2 {
		t.Errorf("%d schedules timed, want at least 2: %s", measured, why)
	}
	kept, ok := b.progs[chosen]
	if !ok {
		t.Fatalf("the chosen %v was not built", chosen)
	}
	mark := hugepage.MappedTotal()
	if p, err := b.Program(chosen); err != nil || p != kept || hugepage.MappedTotal() != mark {
		t.Errorf("the program served is not the one timed (%v)", err)
	}
}

// TestBuildsRelease: after a timed choice over a model whose copies all fit
// the bound (A's G and P's slices both timed), Release with the program
// kept unmaps the other copies at once: the bytes mapped fall back to
// what the kept program holds.
func TestBuildsRelease(t *testing.T) {
	net, weights, pool := mappedModel(t, 7)
	// Unmap what earlier tests dropped, so that only Release moves Mapped.
	settle := func() int64 {
		runtime.GC()
		last := hugepage.Mapped()
		for range 200 {
			time.Sleep(5 * time.Millisecond)
			m := hugepage.Mapped()
			if m == last {
				return m
			}
			last = m
		}
		return last
	}
	before := settle()
	const llc = 64 << 20
	b := &Builds{Net: net, Pools: Pools{2: pool}, Cores: 2, LLC: llc}
	h := Host{LLC: llc, Private: PrivateOrDefault(0), Workers: 2, Steps: 5}
	chosen, why, _, err := Choose(net, 0, schedule.F32, h, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	held := hugepage.Mapped() - before
	if held < 2*weights {
		t.Fatalf("the timed choice holds %d bytes mapped, want A's and P's copies (%d each) timed: %s", held, weights, why)
	}
	kept, err := b.Program(chosen)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Release(kept) {
		t.Fatalf("Release dropped no copy (kept %v of %d programs)", chosen, len(b.progs))
	}
	var now int64
	for range 200 {
		if now = hugepage.Mapped() - before; now <= weights {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if now > weights {
		t.Errorf("after Release %d bytes stay mapped for %v, want at most its copy, %d", now, chosen, weights)
	}
	runtime.KeepAlive(kept)
}

// mappedModel is a seeded 1-layer hidden-512 LSTM whose matrices are
// mapped (the test is skipped on a host without transparent huge pages),
// the bytes mapped for them, and a pool of two workers for P.
func mappedModel(t *testing.T, seed uint64) (*rnn.Network, int64, *schedule.Pool) {
	t.Helper()
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 512, Hidden: 512, Layers: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.Randomize(net, seed)
	weights := net.Memory().Mapped()
	if weights == 0 {
		t.Skip("no transparent huge pages on this host: the network's matrices are not mapped")
	}
	pool, err := schedule.NewPool(schedule.PoolOptions{Workers: 2, NoPin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return net, weights, pool
}

// TestTimeWideQuit: TimeWide asks quit before every run and ends with
// ErrQuit, having run no more, once it says yes; without quit it decides.
func TestTimeWideQuit(t *testing.T) {
	net, pools := smallModel(t, 1)
	b := &Builds{Net: net, Pools: pools, Cores: 2, LLC: 1 << 30}
	narrow, err := b.Program(Candidate{Sched: schedule.Partitioned, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	wide, err := b.Program(Candidate{Sched: schedule.Partitioned, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	chosen, err := b.Program(Candidate{Sched: schedule.APlus, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []int{0, 1, 5} {
		asked := 0
		_, _, err := TimeWide(net, narrow, wide, 5, time.Millisecond, func() bool {
			asked++
			return asked > after
		})
		if !errors.Is(err, ErrQuit) || asked != after+1 {
			t.Errorf("quit after %d: err %v after %d questions, want ErrQuit after %d", after, err, asked, after+1)
		}
		asked = 0
		_, _, err = PreferWide(net, chosen, narrow, wide, 5, time.Millisecond, func() bool {
			asked++
			return asked > after
		})
		if !errors.Is(err, ErrQuit) || asked != after+1 {
			t.Errorf("PreferWide, quit after %d: err %v after %d questions, want ErrQuit after %d", after, err, asked, after+1)
		}
	}
	if _, says, err := PreferWide(net, chosen, narrow, wide, 5, time.Millisecond, nil); err != nil || !strings.Contains(says, "against P across all 2 cores") {
		t.Errorf("PreferWide without quit: %q %v", says, err)
	}
	if _, says, err := TimeWide(net, narrow, wide, 5, time.Millisecond, nil); err != nil || !strings.Contains(says, "cores free") {
		t.Errorf("TimeWide without quit: %q %v", says, err)
	}
}

// TestHoldBeside: programs may stay built beside those served while the
// smaller of the two sets' weight copies fits the last-level cache; a
// Serial form's weights count once; Unheld sees a dropped copy that no
// kept program reads, and none in a Serial form whose source is kept.
func TestHoldBeside(t *testing.T) {
	net, pools := smallModel(t, 1)
	// An LLC of one byte: P on one core is the Serial form of P on two.
	b := &Builds{Net: net, Pools: pools, Cores: 2, LLC: 1}
	var progs [3]*schedule.Program
	for i, c := range []Candidate{{Sched: schedule.APlus, Workers: 1}, {Sched: schedule.Partitioned, Workers: 1}, {Sched: schedule.Partitioned, Workers: 2}} {
		p, err := b.Program(c)
		if err != nil {
			t.Fatal(err)
		}
		progs[i] = p
	}
	served, p := progs[0], progs[1:]
	a, w := served.CopyBytes(), progs[2].CopyBytes()
	if a == 0 || w == 0 || progs[1].CopyBytes() != w {
		t.Fatalf("copies: A+ %d, P on 1 core %d, P on 2 %d: want A+'s and one P's shared by both", a, progs[1].CopyBytes(), w)
	}
	if n := copyBytes(p); n != w {
		t.Errorf("the two P forms hold %d bytes of copies, want %d (the Serial form's counted once)", n, w)
	}
	for _, c := range []struct {
		llc  int64
		want bool
	}{{min(a, w) - 1, false}, {min(a, w), true}, {1 << 30, true}} {
		ok, why := HoldBeside([]*schedule.Program{served}, p, c.llc)
		if ok != c.want || ok != (why == "") {
			t.Errorf("LLC %d (copies %d beside %d): %v %q, want %v", c.llc, w, a, ok, why, c.want)
		}
	}
	if !Unheld(p, []*schedule.Program{served}) {
		t.Error("Unheld: P's slices dropped beside A+ are not seen")
	}
	if Unheld(progs[1:2], progs[2:]) || Unheld(progs[2:], progs[1:2]) {
		t.Error("Unheld: a Serial form and its source read the same weights")
	}
	if Unheld([]*schedule.Program{nil}, nil) {
		t.Error("Unheld: a nil program holds nothing")
	}
}

// smallModel is a seeded hidden-48 LSTM of layers layers over a 30-token
// embedding with a log-softmax head, and a pool of two workers for P, with
// GOMAXPROCS at least 2 for the test.
func smallModel(t *testing.T, layers int) (*rnn.Network, Pools) {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		old := runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 8, Hidden: 48, Layers: layers, Vocab: 30, HeadOut: 30, Activation: rnn.ActLogSoftmax}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.Randomize(net, 3)
	pool, err := schedule.NewPool(schedule.PoolOptions{Workers: 2, NoPin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return net, Pools{2: pool}
}
