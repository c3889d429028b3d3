package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"rnnserve/internal/hugepage"
	"rnnserve/rnn"
)

// sameResult fails t unless got and want are equal bit for bit.
func sameResult(t *testing.T, what string, got, want Result) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"output", got.Output, want.Output}, {"h_n", got.HN, want.HN}, {"c_n", got.CN, want.CN}, {"head", got.Head, want.Head}} {
		if len(c.got) != len(c.want) {
			t.Fatalf("%s: %d %s values, want %d", what, len(c.got), c.name, len(c.want))
		}
		for i := range c.got {
			if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
				t.Fatalf("%s: %s[%d] = %v, want %v", what, c.name, i, c.got[i], c.want[i])
			}
		}
	}
}

// TestSerialSharesWeights: a Serial program runs on one core over its
// source's weight buffers (the same buffers, no new mapping) and gives
// its source's results bit for bit (within 1e-5 of a one-worker P's), over
// random shapes of every cell type, direction, projection, embedding and
// head, on 2 and 3 workers, in every precision.
func TestSerialSharesWeights(t *testing.T) {
	pools := map[int]*Pool{2: testPool(t, 2), 3: testPool(t, 3)}
	r := rand.New(rand.NewPCG(31, 37))
	precs := []Precision{F32, BF16, Int8}
	for i := 0; i < cases(36); i++ {
		cfg := randomConfig(r, i, 1+r.IntN(70), 1+r.IntN(3), 60)
		T := 1 + r.IntN(12)
		B := []int{1, 1 + r.IntN(5)}[r.IntN(2)]
		states := r.IntN(2) == 0
		workers := 2 + i%2
		prec := precs[i%3]
		name := fmt.Sprintf("%d/%v/h=%d/p=%d/L=%d/bi=%v/V=%d/head=%d/T=%d/B=%d/workers=%d/%v",
			i, cfg.Cell, cfg.Hidden, cfg.Proj, cfg.Layers, cfg.Bidirectional, cfg.Vocab, cfg.HeadOut, T, B, workers, prec)
		t.Run(name, func(t *testing.T) {
			net := randomNet(t, cfg, uint64(i))
			if prec == Int8 && i8Fits(net) != nil {
				t.Skip("int8 does not fit this shape")
			}
			in := randomInput(net, T, B, states, r)
			wide, err := NewPartitioned(net, PartitionOptions{Workers: workers, Pool: pools[workers], Precision: prec})
			if err != nil {
				t.Fatal(err)
			}
			before := hugepage.Mapped()
			one := wide.Serial()
			if got := hugepage.Mapped() - before; got != 0 {
				t.Errorf("Serial mapped %d bytes", got)
			}
			if one.Workers() != 1 || one.Precision() != prec || one.Schedule != Partitioned {
				t.Errorf("Serial is %v-%v on %d workers, want P-%v on 1", one.Schedule, one.Precision(), one.Workers(), prec)
			}
			if one.Serial() != one {
				t.Error("Serial of a Serial program is a new program")
			}
			ws, ww := one.Weights(), wide.Weights()
			if len(ws) != len(ww) {
				t.Fatalf("Serial has %d weight buffers, its source %d", len(ws), len(ww))
			}
			for k := range ws {
				if ws[k] != ww[k] {
					t.Fatalf("weight %s is not its source's buffer", ww[k].Name)
				}
			}
			p, err := one.Plan(in, PlanOptions{Head: true})
			if err != nil {
				t.Fatal(err)
			}
			if p.Workers() != 1 {
				t.Errorf("Serial's plan runs on %d workers, want 1", p.Workers())
			}
			solo, err := NewPartitioned(net, PartitionOptions{Workers: 1, Precision: prec})
			if err != nil {
				t.Fatal(err)
			}
			want := runProgram(t, wide, in)
			for rep := 0; rep < 2; rep++ {
				sameResult(t, "Serial against its source", runProgram(t, one, in), want)
			}
			// A one-worker P is not bit for bit a wide one (its gate
			// kernels meet other unit boundaries), only within A+'s bound.
			compareResults(t, runProgram(t, one, in), runProgram(t, solo, in), 1e-5)
		})
	}
}

// TestSerialOutlivesSource: the weight slices a Serial program shares stay
// mapped and read the same after its source program (and the source's
// pool) are dropped, and are unmapped once the Serial program goes too.
func TestSerialOutlivesSource(t *testing.T) {
	was := hugepage.Enable(true)
	defer hugepage.Enable(was)
	settle()
	base := hugepage.Mapped()
	// Two workers' W_hh slices of 2048×1024 floats (8 MiB each) are mapped.
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 1024, Layers: 1, HeadOut: 4}, 9)
	in := randomInput(net, 3, 1, false, rand.New(rand.NewPCG(9, 9)))
	netMapped := hugepage.Mapped() - base
	one, want, progMapped := func() (*Program, Result, int64) {
		pool, err := NewPool(PoolOptions{Workers: 2, NoPin: true})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		before := hugepage.Mapped()
		wide, err := NewPartitioned(net, PartitionOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		return wide.Serial(), runProgram(t, wide, in), hugepage.Mapped() - before
	}()
	if progMapped == 0 {
		t.Skip("no huge pages here")
	}
	settle()
	if got := hugepage.Mapped() - base; got != netMapped+progMapped {
		t.Fatalf("%d bytes mapped with the source dropped, want the network's %d and the slices' %d", got, netMapped, progMapped)
	}
	sameResult(t, "Serial after its source was dropped", runProgram(t, one, in), want)
	one = nil
	settle()
	if got := hugepage.Mapped() - base; got != netMapped {
		t.Errorf("%d bytes mapped with no program left, want the network's %d", got, netMapped)
	}
	runtime.KeepAlive(net)
}

// BenchmarkSerial times P on one core in its two forms at batch 1: a
// one-worker program over slices cut and packed for one worker (solo)
// and Program.Serial of a two-worker program over that program's slices
// (serial, one call per part of each step), which a server holding its
// weights once runs. Pair the two within one run: -bench
// 'Serial/.*/form=' -count 5.
func BenchmarkSerial(b *testing.B) {
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		for _, hidden := range []int{64, 256, 1024} {
			for _, layers := range []int{1, 4} {
				net := randomNet(b, rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, 1)
				solo, err := NewPartitioned(net, PartitionOptions{Workers: 1})
				if err != nil {
					b.Fatal(err)
				}
				wide := filledOnTwo(b, net)
				for _, T := range []int{1, 100} {
					for _, f := range []struct {
						name string
						prog *Program
					}{{"solo", solo}, {"serial", wide.Serial()}} {
						b.Run(fmt.Sprintf("cell=%v/hidden=%d/layers=%d/T=%d/form=%s", cell, hidden, layers, T, f.name), func(b *testing.B) {
							benchProgram(b, f.prog, T)
						})
					}
				}
			}
		}
	}
}

// filledOnTwo builds net's P on two workers, on a pool that is closed
// again once the slices are filled (with GOMAXPROCS raised to 2 for it
// if need be): only the program's Serial form runs.
func filledOnTwo(b *testing.B, net *rnn.Network) *Program {
	old := runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	defer runtime.GOMAXPROCS(old)
	pool, err := NewPool(PoolOptions{Workers: 2, NoPin: true})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	wide, err := NewPartitioned(net, PartitionOptions{Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	return wide
}

// TestCopyBytes: a program's CopyBytes counts the weights it made itself
// and none of the model's slices it reads in place: A its G and summed
// biases, A+ its summed biases, P every recurrent matrix and bias in its
// precision, and a Serial program its source's, on real and dry networks
// alike.
func TestCopyBytes(t *testing.T) {
	pool := testPool(t, 2)
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 12, Hidden: 20, Proj: 8, Layers: 2, Vocab: 9, HeadOut: 9, Activation: rnn.ActLogSoftmax}
	for _, dry := range []bool{false, true} {
		net, err := rnn.NewNetwork(cfg, dry)
		if err != nil {
			t.Fatal(err)
		}
		var g, whr, bias int64
		for _, dirs := range net.Layers {
			for _, l := range dirs {
				g += 4 * int64(l.Rows()*(l.Input+l.Out()))
				whr += 4 * int64(l.Proj*l.Hidden)
				bias += 4 * int64(l.Rows())
			}
		}
		a, err := NewProgram(net, A)
		if err != nil {
			t.Fatal(err)
		}
		ap, err := NewProgram(net, APlus)
		if err != nil {
			t.Fatal(err)
		}
		opt := PartitionOptions{Workers: 2, Pool: pool}
		if dry {
			opt.Pool = nil
		}
		p, err := NewPartitioned(net, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			got  int64
			want int64
		}{{"A", a.CopyBytes(), g + bias}, {"A+", ap.CopyBytes(), bias}, {"P", p.CopyBytes(), g + whr + bias},
			{"P.Serial", p.Serial().CopyBytes(), g + whr + bias}} {
			if c.got != c.want {
				t.Errorf("dry=%v: %s copies %d bytes, want %d", dry, c.name, c.got, c.want)
			}
		}
	}
}
