package main

import (
	"math"
	"strings"
	"testing"

	"rnnserve/internal/f32"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// testMachine is a host with round rates: L2 100 GB/s per core, and past
// it 50 for footprints up to 16 MiB (half the L3) and 10 beyond, 100
// GFLOP/s in float32 and bf16 and 400 in int8, 1 ns of gates a unit, a barrier of 100 ns on two cores and 10
// more for each core beyond, a 1 MiB L2 per core and a 32 MiB L3 per 8
// cores.
func testMachine() *machine {
	past := func(b int64) float64 {
		if b <= 16<<20 {
			return 50e9
		}
		return 10e9
	}
	return &machine{l2BW: 100e9, past: past,
		flops:    map[schedule.Precision]float64{schedule.F32: 100e9, schedule.BF16: 100e9, schedule.Int8: 400e9},
		gate:     map[rnn.CellKind]float64{rnn.LSTM: 1e-9, rnn.GRU: 1e-9},
		barrier2: 100e-9, step: 10e-9, l2: 1 << 20, l3: 32 << 20, l2Ways: 8, l3Ways: 16, l3Cores: 8}
}

func dryLSTM(t *testing.T, input, hidden, layers int) *rnn.Network {
	t.Helper()
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: input, Hidden: hidden, Layers: layers}, true)
	if err != nil {
		t.Fatal(err)
	}
	return net
}

// TestPredictTraffic checks where the model's bytes come from: a model
// inside one core's L2 reads nothing past it once warm; LSTM 512's 4 MiB
// W_hh (with 8 inputs, so that W_ih is small) misses one core's L2 at
// every step but fits eight cores' (512 KiB each), where little leaves L2;
// and a model larger than the L3s comes from DRAM.
func TestPredictTraffic(t *testing.T) {
	m := testMachine()
	small, err := predict(dryLSTM(t, 32, 32, 1), rnn.LSTM, schedule.F32, 10, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	if small.pastBytes != 0 || small.dramBytes != 0 {
		t.Errorf("lstm/32 on one core: %d bytes past L2, %d from DRAM, want none", small.pastBytes, small.dramBytes)
	}
	const T = 10
	whh := int64(4 * 512 * 512 * 4)
	one, err := predict(dryLSTM(t, 8, 512, 1), rnn.LSTM, schedule.F32, T, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	eight, err := predict(dryLSTM(t, 8, 512, 1), rnn.LSTM, schedule.F32, T, 8, m)
	if err != nil {
		t.Fatal(err)
	}
	// Where the slice alternates (f32.WidePacked), a step's first L2's
	// worth is what the step before read last.
	past := 0.9
	if f32.WidePacked() {
		past = 0.7
	}
	if float64(one.pastBytes) < past*float64((T-1)*whh) || one.dramBytes != 0 {
		t.Errorf("lstm/512 on one core: %d bytes past L2 (want at least %.1f of %d), %d from DRAM (want none: 8 MiB fit the L3)",
			one.pastBytes, past, (T-1)*whh, one.dramBytes)
	}
	if eight.pastBytes > whh/4 {
		t.Errorf("lstm/512 on 8 cores: %d bytes past L2, want at most a quarter of W_hh (%d)", eight.pastBytes, whh)
	}
	if one.slice != whh || eight.slice != whh/8 {
		t.Errorf("lstm/512 W_hh slice: %d bytes on one core, %d on 8; want %d and %d", one.slice, eight.slice, whh, whh/8)
	}
	// int8 stores a byte a weight and a scale a row: its slice is a
	// quarter of float32's and a little more.
	q, err := predict(dryLSTM(t, 8, 512, 1), rnn.LSTM, schedule.Int8, T, 8, m)
	if err != nil {
		t.Fatal(err)
	}
	if q.slice < eight.slice/4 || q.slice > eight.slice/4+eight.slice/40 {
		t.Errorf("lstm/512 int8 W_hh slice on 8 cores: %d bytes, want a little over %d", q.slice, eight.slice/4)
	}
	if eight.seconds > one.seconds/8 {
		t.Errorf("lstm/512: %.1f µs on 8 cores, %.1f on one: want more than 8x (W_hh leaves L3 for L2)", eight.seconds*1e6, one.seconds*1e6)
	}
	big, err := predict(dryLSTM(t, 1024, 1024, 4), rnn.LSTM, schedule.F32, 2, 2, m)
	if err != nil {
		t.Fatal(err)
	}
	if big.dramBytes < 4*16<<20 {
		t.Errorf("lstm/1024/4 on two cores: %d bytes from DRAM, want at least its 64 MiB of W_hh", big.dramBytes)
	}
}

// TestPredictTime checks the sum: with every rate far beyond the work,
// a phase costs its barrier; a DRAM cap slows a shape that streams from
// DRAM when more cores share it.
func TestPredictTime(t *testing.T) {
	m := testMachine()
	m.l2BW = 1e30
	m.flops = map[schedule.Precision]float64{schedule.F32: 1e30}
	m.past = func(int64) float64 { return 1e30 }
	m.gate = map[rnn.CellKind]float64{rnn.LSTM: 0, rnn.GRU: 0}
	pr, err := predict(dryLSTM(t, 64, 64, 2), rnn.LSTM, schedule.F32, 5, 4, m)
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(pr.phases) * 120e-9; math.Abs(pr.seconds-want) > 1e-12 || pr.barrier != pr.seconds || pr.phases < 2*5 {
		t.Errorf("barriers only: %g s over %d phases, barrier %g; want %g", pr.seconds, pr.phases, pr.barrier, want)
	}
	if one, _ := predict(dryLSTM(t, 64, 64, 2), rnn.LSTM, schedule.F32, 5, 1, m); one.seconds > 1e-15 {
		t.Errorf("one core, no barrier, infinite rates: %g s", one.seconds)
	}
	m = testMachine()
	m.dramCap = 20e9
	if m.pastRate(8<<20, 4) != 50e9 || m.pastRate(64<<20, 1) != 10e9 || m.pastRate(64<<20, 4) != 5e9 {
		t.Errorf("pastRate: %g (in L3), %g (DRAM, 1 core), %g (DRAM, 4 cores)", m.pastRate(8<<20, 4), m.pastRate(64<<20, 1), m.pastRate(64<<20, 4))
	}
	// lstm/512 (4 MiB of W_hh, 8 inputs) on one core streams W_hh past L2
	// at 50 GB/s: about (T-1)·4 MiB / 50 GB/s, down to about three
	// quarters of that where the slice alternates (f32.WidePacked).
	m = testMachine()
	m.gate = map[rnn.CellKind]float64{rnn.LSTM: 0, rnn.GRU: 0}
	one, err := predict(dryLSTM(t, 8, 512, 1), rnn.LSTM, schedule.F32, 10, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	want := 9 * 4 << 20 / 50e9
	lo := want
	if f32.WidePacked() {
		lo = 0.7 * want
	}
	if one.seconds < lo || one.seconds > 1.1*want || one.foot < 4<<20 {
		t.Errorf("lstm/512 on one core: %g s (footprint %d), want %g-%g", one.seconds, one.foot, lo, 1.1*want)
	}
}

func TestRunPredict(t *testing.T) {
	var out strings.Builder
	err := run([]string{"-cores", "1", "-hidden", "16", "-layers", "1", "-lengths", "3", "-cells", "gru",
		"-time", "1ms", "-reps", "1", "-dram", "65536", "-no-kernels", "-predict", "4,2", "-barrier-ns", "100",
		"-l1", "32768", "-l2", "1048576", "-l3", "33554432", "-l3-cores", "8"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"## P on more cores: predicted", "the barrier 100 ns on two cores", "| gru | 16 | 1 | 3 | f32 | 1 | 3 KiB |",
		"| gru | 16 | 1 | 3 | f32 | 2 | 1 KiB |", "| gru | 16 | 1 | 3 | f32 | 4 | 768 B |"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, bad := range [][]string{{"-predict", "0"}, {"-predict", "4", "-no-shapes"}, {"-predict", "100000"}, {"-l3-cores", "0"}, {"-dram-gbs", "-1"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestPredictProducts checks that a shape's products go at its
// precision's rate: with memory and gates free, one core takes the
// products' arithmetic at 100 GFLOP/s in float32 and at 400 in int8
// (whose packed rows carry a few bytes of scales and sums more).
func TestPredictProducts(t *testing.T) {
	m := testMachine()
	m.l2BW = 1e30
	m.past = func(int64) float64 { return 1e30 }
	m.gate = map[rnn.CellKind]float64{rnn.LSTM: 0, rnn.GRU: 0}
	const T = 5
	net := dryLSTM(t, 256, 256, 1)
	f, err := predict(net, rnn.LSTM, schedule.F32, T, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	// W_ih for T rows, W_hh for the T-1 steps with a previous state.
	want := 2 * float64(4*256*256) * (T + T - 1) / 100e9
	if math.Abs(f.seconds-want) > want*1e-9 {
		t.Errorf("float32: %g s, want %g", f.seconds, want)
	}
	q, err := predict(net, rnn.LSTM, schedule.Int8, T, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	if r := q.seconds / (want / 4); r < 1 || r > 1.1 {
		t.Errorf("int8: %g s, %.3f of float32's arithmetic at the int8 rate, want 1 to 1.1", q.seconds, r)
	}
}
