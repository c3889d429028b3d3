package schedule_test

import (
	"testing"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// TestPartitionedTraffic analyses dry partitioned plans with the traffic
// model: they must be accepted as they are, and the model must see what
// the schedule is for. In a cache that holds one layer's W_hh but not the
// model, the recurrent weights are read from DRAM once per layer, not per
// step; and bf16 storage halves the weight bytes the plan owns and moves,
// int8 storage quarters them (plus a scale and a sum, 8 bytes, a row)
// and then fits the cache.
func TestPartitionedTraffic(t *testing.T) {
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 128, Hidden: 128, Layers: 4}, true)
	if err != nil {
		t.Fatal(err)
	}
	const T = 20
	opt := dre.Options{Cache: cachesim.Config{Size: 1 << 20}, Runs: 3}
	reports := map[schedule.Precision]*dre.Report{}
	for _, prec := range []schedule.Precision{schedule.F32, schedule.BF16, schedule.Int8} {
		prog, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Workers: 2, Precision: prec})
		if err != nil {
			t.Fatal(err)
		}
		p, err := prog.Plan(schedule.Input{T: T, B: 1}, schedule.PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := dre.Analyze(p, dre.WorkingSetOfProgram(prog, p.T, p.B), opt)
		if err != nil {
			t.Fatal(err)
		}
		if r.Schedule != "P" {
			t.Errorf("report schedule %q, want P", r.Schedule)
		}
		reports[prec] = r
	}
	f32, bf16 := reports[schedule.F32], reports[schedule.BF16]
	t.Logf("DRAM reads per inference: f32 %.0f, bf16 %.0f bytes; plan weights %d, %d bytes", f32.AvgReadBytes, bf16.AvgReadBytes, f32.PlanBytes.Weights, bf16.PlanBytes.Weights)
	// Weights: 4 layers × (W_ih + W_hh) of 4·128×128 floats, plus biases.
	weights := int64(4 * 2 * 4 * 128 * 128 * 4)
	if f32.PlanBytes.Weights < weights || f32.PlanBytes.Weights > weights+weights/50 {
		t.Errorf("float32 plan weights %d bytes, want about %d", f32.PlanBytes.Weights, weights)
	}
	if got := float64(bf16.PlanBytes.Weights) / float64(f32.PlanBytes.Weights); got < 0.5 || got > 0.52 {
		t.Errorf("bf16/f32 plan weight bytes %.3f, want just over 0.5", got)
	}
	// Every weight once per inference (the 2 MiB model does not fit the
	// 1 MiB cache), but W_hh (256 KiB a layer) not once per step.
	if f32.AvgReadBytes < float64(weights) || f32.AvgReadBytes > 2*float64(weights) {
		t.Errorf("float32 DRAM reads %.0f bytes per inference, want between %d and %d", f32.AvgReadBytes, weights, 2*weights)
	}
	if ratio := bf16.AvgReadBytes / f32.AvgReadBytes; ratio > 0.6 {
		t.Errorf("bf16 reads %.2f of float32's, want about half", ratio)
	}
	i8 := reports[schedule.Int8]
	t.Logf("int8: DRAM reads %.0f bytes, plan weights %d bytes, working set weights %d bytes", i8.AvgReadBytes, i8.PlanBytes.Weights, i8.WorkingSet.Weights)
	// 4 layers × 2 matrices × 512 rows × (128 + 8) bytes, plus the biases.
	rows := int64(4 * 2 * 4 * 128 * (128 + 8))
	if i8.PlanBytes.Weights < rows || i8.PlanBytes.Weights > rows+rows/25 {
		t.Errorf("int8 plan weights %d bytes, want about %d", i8.PlanBytes.Weights, rows)
	}
	if i8.WorkingSet.Weights < rows || i8.WorkingSet.Weights > rows+rows/25 {
		t.Errorf("int8 working set weights %d bytes, want about %d", i8.WorkingSet.Weights, rows)
	}
	// The int8 model (about 560 KB) fits the 1 MiB cache: once it is in,
	// the warm runs read little of it.
	if ratio := i8.AvgReadBytes / f32.AvgReadBytes; ratio > 0.3 {
		t.Errorf("int8 reads %.2f of float32's, want under a quarter", ratio)
	}
}
