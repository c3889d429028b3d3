package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"time"
	"unsafe"

	"rnnserve/internal/f32"
	"rnnserve/internal/hugepage"
	"rnnserve/schedule"
)

// kernelCase is one shape of the recurrent product: rows of A (the batch)
// times W [gates·hidden][hidden], in float32, bf16 or int8 (A quantized
// as each call runs, as P's int8 steps do), its rows split
// evenly over the workers as the partitioned schedule splits them. A
// float32 share is packed (f32.PackNT) where the schedule would pack it
// (schedule.PacksWHH), so the product is the one P runs.
type kernelCase struct {
	hidden, rows, gates int
	prec                schedule.Precision
	l2                  int64 // one core's L2, which P's packing bound is set from
}

// kernelWorker is one worker's share: its W rows (allocated and first
// touched on its thread), x and y.
type kernelWorker struct {
	n      int // W rows
	packed bool
	w      []float32
	w16    []uint16
	w8     []uint8   // int8: W packed by f32.PackI8, scales included
	q      []uint8   // int8: A quantized
	s      []float32 // int8: A's row scales
	x, y   []float32
	bytes  []float32 // W's bytes seen as float32, for the read loop
}

func newKernelWorker(c kernelCase, n int, seed uint64) *kernelWorker {
	r := rand.New(rand.NewPCG(seed, 1))
	k := &kernelWorker{n: n, x: make([]float32, c.rows*c.hidden), y: make([]float32, c.rows*n)}
	for i := range k.x {
		k.x[i] = float32(2*r.Float64() - 1)
	}
	w := make([]float32, n*c.hidden)
	for i := range w {
		// Never zero: two bf16 halves then always read as a normal float32.
		w[i] = float32(r.Float64() + 0.5)
		if i%2 == 1 {
			w[i] = -w[i]
		}
	}
	// W as P stores it, on the pages P's weights are on (internal/hugepage).
	switch {
	case c.prec == schedule.Int8:
		k.w8 = hugepage.Bytes(k, f32.PackedI8Bytes(n, c.hidden))
		f32.PackI8(k.w8, n, c.hidden, w, c.hidden)
		k.q, k.s = make([]uint8, c.rows*f32.I8Stride(c.hidden)), make([]float32, c.rows)
		k.bytes = unsafe.Slice((*float32)(unsafe.Pointer(&k.w8[0])), len(k.w8)/4)
	case c.prec == schedule.BF16:
		k.w16 = hugepage.Uint16s(k, len(w))
		f32.ToBF16(k.w16, w)
		k.bytes = unsafe.Slice((*float32)(unsafe.Pointer(&k.w16[0])), len(k.w16)/2)
	case schedule.PacksWHH(n, c.hidden, c.l2):
		k.packed = true
		k.w = hugepage.Floats(k, len(w))
		f32.PackNT(k.w, n, c.hidden, w, c.hidden)
		k.bytes = k.w
	default:
		k.w = hugepage.Floats(k, len(w))
		copy(k.w, w)
		k.bytes = k.w
	}
	return k
}

// call runs the product once.
func (k *kernelWorker) call(c kernelCase) {
	if k.w8 != nil {
		kq := f32.I8Stride(c.hidden)
		f32.QuantizeI8(c.rows, c.hidden, k.x, c.hidden, k.q, kq, k.s)
		f32.GemmNTI8(c.rows, k.n, c.hidden, k.q, kq, k.s, k.w8, 0, k.y, k.n)
		return
	}
	if k.w16 != nil {
		f32.GemmNTBF16(c.rows, k.n, c.hidden, k.x, c.hidden, k.w16, c.hidden, 0, k.y, k.n)
		return
	}
	if k.packed {
		f32.GemmNTPacked(c.rows, k.n, c.hidden, k.x, c.hidden, k.w, 0, k.y, k.n)
		return
	}
	f32.GemmNT(c.rows, k.n, c.hidden, k.x, c.hidden, k.w, c.hidden, 0, k.y, k.n)
}

// streamed is the W bytes one call reads.
func (k *kernelWorker) streamed() int64 { return int64(4 * len(k.bytes)) }

// forEach has every worker of p repeat f(w) for about d of wall time,
// independently (no barrier between calls), and returns the rate
// Σ_w calls_w·units(w) / seconds_w, each worker's seconds read on its own
// clock (thread CPU time with cpu, so a core taken by another tenant
// does not count against the kernel), and worker 0's seconds per call.
func forEach(p *schedule.Pool, d time.Duration, cpu bool, units func(w int) float64, f func(w int)) (rate, perCall float64) {
	n := p.Workers()
	calls := make([]int, n)
	secs := make([]float64, n)
	start := time.Now()
	p.Each(func(w int) {
		runtime.LockOSThread() // the thread CPU clock needs one thread
		defer runtime.UnlockOSThread()
		clk := threadClock(cpu)
		t0 := clk()
		deadline := start.Add(d)
		c := 0
		for time.Now().Before(deadline) {
			for i := 0; i < 8; i++ {
				f(w)
			}
			c += 8
		}
		calls[w], secs[w] = c, (clk() - t0).Seconds()
	})
	for w := range calls {
		if secs[w] > 0 {
			rate += float64(calls[w]) * units(w) / secs[w]
		}
	}
	return rate, secs[0] / float64(calls[0])
}

// kernelResult is one kernel case's measurement on one core count.
type kernelResult struct {
	kernel, read rate    // W bytes per second, all workers together
	paired       float64 // median over repetitions of kernel/read
	nsPerCall    float64 // worker 0's best time per call
	packed       bool    // worker 0's float32 W is packed
	perCore      int64   // W bytes per worker (the largest share)
	total        int64   // W bytes, all workers
}

// measureKernel times the product and, interleaved with it repetition by
// repetition, f32.Sum over the very same bytes on the same workers: the
// bandwidth of wherever those bytes live, taken under the same load.
func measureKernel(p *schedule.Pool, c kernelCase, o *options) kernelResult {
	nw := p.Workers()
	ws := make([]*kernelWorker, nw)
	total := c.gates * c.hidden
	p.Each(func(w int) {
		ws[w] = newKernelWorker(c, total*(w+1)/nw-total*w/nw, uint64(w)+1)
	})
	res := kernelResult{packed: ws[0].packed}
	for _, k := range ws {
		res.perCore = max(res.perCore, k.streamed())
		res.total += k.streamed()
	}
	bytes := func(w int) float64 { return float64(ws[w].streamed()) }
	sink := make([]float32, nw)
	var kr, rr, ratios []float64
	res.nsPerCall = 1e300
	for r := 0; r < o.reps; r++ {
		rate, perCall := forEach(p, o.time, o.cpu, bytes, func(w int) { ws[w].call(c) })
		kr = append(kr, rate)
		res.nsPerCall = min(res.nsPerCall, perCall*1e9)
		rate, _ = forEach(p, o.time, o.cpu, bytes, func(w int) { sink[w] += f32.Sum(ws[w].bytes) })
		rr = append(rr, rate)
		ratios = append(ratios, kr[len(kr)-1]/rr[len(rr)-1])
	}
	res.kernel, res.read = summarize(kr), summarize(rr)
	res.paired = summarize(ratios).median
	return res
}

// kernelTable prints, for every hidden size, batch and precision, how fast
// the recurrent product streams W on each core count, beside the read
// bandwidth measured over the same bytes in the same run.
func kernelTable(out io.Writer, pools map[int]*schedule.Pool, o *options) {
	fmt.Fprintln(out, "## Recurrent product: W [4H][H] streamed by f32.GemmNT / GemmNTPacked / GemmNTBF16")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Each worker multiplies its own rows of W (the partitioned schedule's split, allocated on its core) by rows of A (the batch), with no barrier between calls; \"f32 packed\": W stored in panels read as one stream (f32.PackNT, f32.GemmNTPacked), as P stores a W_hh slice larger than 1 MiB. GB/s: W bytes read per second, all workers; read GB/s: f32.Sum (a plain AVX2 load-and-add loop) over the same bytes on the same workers, interleaved with the kernel repetition by repetition; fraction: best kernel over best read, and the median of the per-repetition ratios; B/cycle: the best kernel and read rates per core and cycle of the clock above.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| hidden | rows | weights | cores | W/core | level | ns/call | GB/s (best / median) | read GB/s (best / median) | fraction (best, paired median) | B/cycle (kernel / read) |")
	fmt.Fprintln(out, "|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")
	for _, h := range o.khidden {
		for _, m := range o.rows {
			for _, prec := range o.precision {
				for _, cores := range o.cores {
					c := kernelCase{hidden: h, rows: m, gates: 4, prec: prec, l2: o.l2}
					r := measureKernel(pools[cores], c, o)
					weights := prec.String()
					if r.packed {
						weights += " packed"
					}
					fmt.Fprintf(out, "| %d | %d | %s | %d | %s | %s | %.0f | %.1f / %.1f | %.1f / %.1f | %.2f, %.2f | %s / %s |\n",
						h, m, weights, cores, size(r.perCore), levelOf(r.perCore, r.total, o), r.nsPerCall,
						r.kernel.best/1e9, r.kernel.median/1e9, r.read.best/1e9, r.read.median/1e9,
						r.kernel.best/r.read.best, r.paired,
						bytesPerCycle(r.kernel.best/float64(cores), o.hz), bytesPerCycle(r.read.best/float64(cores), o.hz))
				}
			}
		}
	}
	fmt.Fprintln(out)
}

// gemmRate measures the arithmetic rate of the product P runs in
// precision prec (kernelWorker.call: f32.GemmNT for float32,
// f32.GemmNTBF16 for bf16, f32.QuantizeI8 then f32.GemmNTI8 for int8),
// with every worker of p multiplying 100 rows by its own 256×256 W (in
// its L2): the rate a compute-bound product (the input projections of 100
// steps) can reach in that precision. It returns multiply-adds ×2 per
// second, all workers together.
func gemmRate(p *schedule.Pool, o *options, prec schedule.Precision) float64 {
	const n = 256
	c := kernelCase{hidden: 256, rows: 100, gates: 1, prec: prec, l2: o.l2}
	ws := make([]*kernelWorker, p.Workers())
	p.Each(func(w int) { ws[w] = newKernelWorker(c, n, uint64(w)) }) // first touched by the worker that reads it
	flops := func(int) float64 { return 2 * float64(c.rows) * n * float64(c.hidden) }
	var v []float64
	for r := 0; r < o.reps; r++ {
		rate, _ := forEach(p, o.time, o.cpu, flops, func(w int) { ws[w].call(c) })
		v = append(v, rate)
	}
	return summarize(v).best
}
