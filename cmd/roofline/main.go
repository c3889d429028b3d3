// Command roofline measures this machine's read bandwidth from each level
// of the memory hierarchy, on one core and on all of them, and then how
// close the partitioned schedule comes to it: for every Table I shape
// (batch 1, input size = hidden size) the weight bytes it streams per
// second, beside the bandwidth of the level its weights live in.
//
//	go run ./cmd/roofline                       # everything, Markdown to stdout
//	go run ./cmd/roofline -hidden 512,1024 -layers 1 -lengths 100 -precision f32,bf16,int8
//	go run ./cmd/roofline -no-shapes -rows 1,2 -kernel-hidden 512,1024,2048
//	go run ./cmd/roofline -no-kernels -hidden 256,1024 -layers 1,4 -lengths 10,100 -predict 4,8,16,32,64 -l3-cores 8
//
// # Bandwidth
//
// One worker per core (schedule.Pool, pinned) sums its own buffer with the
// assembly of internal/f32, which does nothing but load and add, over and
// over for -time; the rate is bytes summed per second, all workers
// together. Every rate is per second of each worker thread's own CPU time
// (-clock cpu, the default: on a shared machine a core taken by another
// tenant then does not count against us) or of wall time (-clock wall). Buffer sizes per worker: half a core's L1d (L1), half
// its L2 (L2), the shared L3 over twice the most workers measured, so that
// all of them together stay inside half of it (L3: 8 MiB on a 32 MiB L3
// and two cores), 512 MiB (DRAM), and with -sweep a sweep from 16 KiB to
// 64 MiB that shows where each level ends on this host. The cache sizes
// are the host's (internal/host: sysfs, else CPUID and defaults, and
// RNNSERVE_HOST_CACHES) unless -l1, -l2 and -l3 say
// otherwise; the report's first lines name the CPU and its caches. A measurement is repeated
// -reps times and the best and median rates are reported: on a shared
// machine the best is the hardware and the median what other tenants left.
//
// # Recurrent product
//
// The kernels on their own: for each hidden size (-kernel-hidden), batch
// (-rows) and precision, W [4H][H] split by rows across the workers as the
// partitioned schedule splits it, each worker multiplying its own rows
// (allocated on its thread) by its rows of A over and over for -time, with
// no barrier between them. Interleaved with it, repetition by repetition,
// f32.Sum reads the very same bytes on the same workers: the fraction is
// the kernel's rate over that read rate, so it holds wherever the bytes
// live and whatever load the machine carries. ns/call is worker 0's best
// time per call, the per-call floor at the small shapes.
//
// # Weight streaming
//
// For each shape the plan of one inference is run back to back. Its
// weight reads (from the plan itself) fall in two classes: W_hh slices,
// re-read at every step, whose footprint is one worker's slice of one
// layer per worker (it fits a core's private L2 up to 1 MiB); and
// everything else (W_ih, read once per layer, and W_hh too when T = 1),
// whose footprint is the whole model, re-read only by the next inference.
// Each class's bandwidth is measured as above with every worker summing a
// buffer of that class's footprint: the bandwidth of wherever data of that
// size lives on this host, whatever the nominal cache sizes. The roofline
// time is each class's bytes over its bandwidth (the best one measured);
// the fraction is roofline time / best measured time, 1.0 being the
// hardware's limit for that traffic. The first pass over W_hh in an
// inference is the exception: it reads W_hh from wherever the whole
// model lives (DRAM when the model does not fit this host's share of
// L3), so when that is slower, one pass is priced at the model's
// bandwidth and the others at W_hh's. Where a worker's W_hh slice is
// larger than its L2, how much of each step's W_hh L2 still holds depends
// on the order the plan reads it in (P reads it forwards and backwards in
// turn at some sizes, so a step starts on the rows the step before read
// last): the plan's own regions, each worker's steps of two inferences
// replayed through an LRU the size of one core's L2 (-l2, -l2-ways; the
// second inference counted), give the W_hh bytes that miss it. Those are
// priced at the bandwidth of the slice's footprint and the rest at L2's
// (the rate measured with half of -l2 per worker); "footprint model µs"
// prices every W_hh byte at the footprint's, as the model did before the
// plans read W_hh backwards. At T > 1 the input projections
// (W_ih times all T inputs) are arithmetic, not traffic: the model takes
// the longer of the other weights' bytes at their bandwidth and the
// projections' flops at f32.GemmNT's rate measured on L2-resident
// operands in the same run. That assumes a core can stream W from DRAM
// while it multiplies; the host model does not: a probe on every worker
// at once passes its own packed W from DRAM (-dram bytes) in 256 KiB
// pieces, a one-row product over each (the pull), nine rows against a
// piece in L2 (the rest of a ten-step projection), and the two
// alternating, and takes the share of the shorter the host hid (best of
// -reps); the host model adds the shorter of the W_ih bytes' time and
// the arithmetic of every projection row but the first, times one less
// that share (overlap.go). Where the share is near 0 the host model is
// the projections' pull and arithmetic in turn. The rates above are
// each worker's on its own, added up; P's steps end at a barrier, so
// each waits for its slowest worker. On more than one core a second
// probe (stepped.go) has every worker read a buffer of its W_hh slice's
// size forwards and backwards in turn, first each on its own and then
// one pass a phase of the pool, as P's steps run; the host model's W_hh
// time is the model's times the stepped time a pass over the free one
// (stepped/free, best of -reps, at least 1): one core slower than the
// other, the spread of each pass and the barrier, measured on the
// bytes and the order P reads, with no arithmetic of ours in it.
//
// # More cores than this host has
//
// With -predict, a last table models P on each of those core counts (and
// on the ones measured, to hold the model against them) from P's own
// plan for that many workers: each worker's reads replayed through an
// LRU the size of one core's L2, what misses there through one the size
// of the L3 shared by each group of -l3-cores cores, and the bytes from
// each level priced at one core's rate for it, measured in the same run
// (DRAM's shared under -dram-gbs), against the arithmetic of each step;
// a phase takes its slowest worker's time, plus a barrier timed on two
// cores here and grown by -barrier-step-ns a core beyond (predict.go).
// What it cannot know: how the L3's and DRAM's bandwidth per core hold
// up on a host with many cores, and how the barrier grows; both are
// assumptions the flags state, not measurements.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/internal/f32"
	"rnnserve/internal/host"
	"rnnserve/internal/hugepage"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "roofline:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	cores     []int
	hidden    []int
	layers    []int
	lengths   []int
	cells     []rnn.CellKind
	precision []schedule.Precision
	time      time.Duration
	reps      int
	sweep     bool
	noShapes  bool
	noKernels bool
	cpu       bool    // rates over thread CPU time, not wall time
	khidden   []int   // hidden sizes of the kernel table
	rows      []int   // batch rows of the kernel table
	l1, l2    int64   // private L1d and L2 per core, bytes
	l2Ways    int     // associativity of the private L2, for the simulated one
	l3        int64   // shared L3, bytes
	dram      int64   // buffer per worker for the DRAM row
	hz        float64 // core clock estimated by coreClock; 0 when unknown
	// The prediction past this host's cores (predict.go).
	predict     []int   // core counts to predict P on; none: no prediction
	l3Cores     int     // cores sharing one L3
	dramGBs     float64 // all cores' DRAM bandwidth; 0: no cap
	barrierNs   float64 // the barrier on two cores; 0: measured
	barrierStep float64 // ns each core beyond two adds to it
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("roofline", flag.ContinueOnError)
	cores := fs.String("cores", "", "core counts to measure (default: 1 and GOMAXPROCS)")
	hidden := fs.String("hidden", "64,128,256,512,1024", "hidden sizes")
	layers := fs.String("layers", "1,2,3,4,5,6,7,8", "layer counts")
	lengths := fs.String("lengths", "1,10,50,100", "input lengths T")
	cells := fs.String("cells", "lstm,gru", "cell types")
	prec := fs.String("precision", "f32", "weight precisions (f32, bf16, int8)")
	t := fs.Duration("time", 100*time.Millisecond, "time per repetition of one measurement")
	reps := fs.Int("reps", 5, "repetitions of each measurement (best and median reported)")
	sweep := fs.Bool("sweep", false, "also sweep buffer sizes from 16 KiB to 64 MiB")
	noShapes := fs.Bool("no-shapes", false, "skip the schedule's weight-streaming table")
	noKernels := fs.Bool("no-kernels", false, "skip the recurrent-product table")
	khidden := fs.String("kernel-hidden", "64,128,256,512,1024,2048", "hidden sizes of the recurrent-product table")
	rows := fs.String("rows", "1,2,4", "batch rows of the recurrent-product table")
	clock := fs.String("clock", "cpu", "what rates are per: cpu (each thread's CPU time; robust on a shared machine) or wall")
	h := host.Get()
	l1 := fs.Int64("l1", h.L1D(), "private L1d bytes per core (default: this host's)")
	l2 := fs.Int64("l2", h.L2(), "private L2 bytes per core (default: this host's)")
	l2Ways := fs.Int("l2-ways", h.L2Ways(), "associativity of the private L2, the simulated L2 the W_hh misses come from (default: this host's)")
	l3 := fs.Int64("l3", h.L3(), "shared last-level cache bytes (default: this host's)")
	dram := fs.Int64("dram", 512<<20, "bytes per worker for the DRAM measurement")
	predict := fs.String("predict", "", "core counts to predict P's time and traffic on, e.g. 4,8,16,32,64 (after the shapes table)")
	l3Cores := fs.Int("l3-cores", max(h.LastLevelCores(), 1), "cores that share one L3, for -predict (default: this host's, as sysfs counts them)")
	dramGBs := fs.Float64("dram-gbs", 0, "DRAM bandwidth of all cores together in GB/s, for -predict (0: no cap, each core at the one-core rate)")
	barrierNs := fs.Float64("barrier-ns", 0, "the barrier ending a phase on two cores in ns, for -predict (0: timed here, or 100 on one core)")
	barrierStep := fs.Float64("barrier-step-ns", 10, "what each core beyond two adds to the barrier, in ns, for -predict")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{time: *t, reps: *reps, sweep: *sweep, noShapes: *noShapes, noKernels: *noKernels, l1: *l1, l2: *l2, l2Ways: *l2Ways, l3: *l3, dram: *dram,
		l3Cores: *l3Cores, dramGBs: *dramGBs, barrierNs: *barrierNs, barrierStep: *barrierStep}
	switch *clock {
	case "cpu":
		o.cpu = true
	case "wall":
	default:
		return nil, fmt.Errorf("-clock %q: want cpu or wall", *clock)
	}
	var err error
	procs := runtime.GOMAXPROCS(0)
	if *cores == "" {
		o.cores = []int{1}
		if procs > 1 {
			o.cores = append(o.cores, procs)
		}
	} else if o.cores, err = ints("cores", *cores); err != nil {
		return nil, err
	}
	for _, c := range o.cores {
		if c > procs {
			return nil, fmt.Errorf("-cores %d exceeds GOMAXPROCS %d", c, procs)
		}
	}
	if o.hidden, err = ints("hidden", *hidden); err != nil {
		return nil, err
	}
	if *predict != "" {
		if o.predict, err = ints("predict", *predict); err != nil {
			return nil, err
		}
		if o.noShapes {
			return nil, errors.New("-predict needs the shapes table (no -no-shapes)")
		}
		for _, c := range o.predict {
			if c > schedule.MaxWorkers {
				return nil, fmt.Errorf("-predict %d: at most %d cores", c, schedule.MaxWorkers)
			}
		}
	}
	if o.l3Cores < 1 || o.dramGBs < 0 || o.barrierNs < 0 || o.barrierStep < 0 {
		return nil, errors.New("-l3-cores must be positive; -dram-gbs, -barrier-ns and -barrier-step-ns not negative")
	}
	if o.khidden, err = ints("kernel-hidden", *khidden); err != nil {
		return nil, err
	}
	if o.rows, err = ints("rows", *rows); err != nil {
		return nil, err
	}
	if o.layers, err = ints("layers", *layers); err != nil {
		return nil, err
	}
	if o.lengths, err = ints("lengths", *lengths); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(*cells, ",") {
		c, err := rnn.ParseCell(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		o.cells = append(o.cells, c)
	}
	for _, s := range strings.Split(*prec, ",") {
		p, err := schedule.ParsePrecision(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		o.precision = append(o.precision, p)
	}
	if o.reps < 1 || o.time <= 0 || o.l1 <= 0 || o.l2 <= 0 || o.l3 <= 0 || o.dram < 1<<10 {
		return nil, errors.New("-reps, -time, -l1, -l2 and -l3 must be positive, -dram at least 1 KiB")
	}
	if err := (cachesim.Config{Size: o.l2, LineSize: cachesim.DefaultLineSize, Ways: o.l2Ways}).Validate(); o.l2Ways < 1 || err != nil {
		return nil, fmt.Errorf("-l2 %d with -l2-ways %d is not a cache: %v", o.l2, o.l2Ways, err)
	}
	return o, nil
}

func ints(name, s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", name, f)
		}
		v = append(v, n)
	}
	return v, nil
}

func run(args []string, out io.Writer) error {
	// internal/host read it as the process started and, refused, went on
	// with the host's own sizes: say so rather than model them.
	if err := host.CheckEnv(os.Getenv(host.EnvCaches)); err != nil {
		return err
	}
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	h := host.Get()
	fmt.Fprintf(out, "# Roofline\n\nHost: %s; features %s.\n\n", h, strings.Join(h.Features, " "))
	fmt.Fprintf(out, "%s/%s, GOMAXPROCS %d, kernels %s; modelled: L1d %s and L2 %s (%d-way) per core, L3 %s.\n\n",
		runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), f32.Impl(), size(o.l1), size(o.l2), o.l2Ways, size(o.l3))
	o.hz = coreClock(o.time, o.reps, o.cpu)
	if o.hz > 0 {
		fmt.Fprintf(out, "Core clock: %.2f GHz (a chain of dependent integer adds, one a cycle; best of %d runs).\n\n", o.hz/1e9, o.reps)
	} else {
		fmt.Fprintln(out, "Core clock: not estimated (no assembly to time on this build); bytes per cycle are n/a.")
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "## Read bandwidth (GB/s, all workers together; best / median; B/cycle: the best per core and cycle)")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| level | bytes per worker | "+joinCores(o.cores, " cores")+" | "+joinCores(o.cores, " cores B/cycle")+" |")
	fmt.Fprintln(out, "|---|---:|"+strings.Repeat("---:|", 2*len(o.cores)))
	levels := []struct {
		name  string
		bytes int64
	}{{"L1", o.l1 / 2 &^ 255}, {"L2", o.l2 / 2 &^ 255}, {"L3", o.l3 / int64(2*slices.Max(o.cores)) &^ 255}, {"DRAM", o.dram &^ 255}}
	if o.sweep {
		for b := int64(16 << 10); b <= 64<<20; b *= 2 {
			levels = append(levels, struct {
				name  string
				bytes int64
			}{"sweep", b})
		}
	}
	pools := map[int]*schedule.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, c := range o.cores {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: c})
		if err != nil {
			return err
		}
		pools[c] = p
	}
	for _, lv := range levels {
		row := fmt.Sprintf("| %s | %s |", lv.name, size(lv.bytes))
		perCycle := ""
		for _, c := range o.cores {
			r := readBandwidth(pools[c], lv.bytes, o)
			row += fmt.Sprintf(" %.1f / %.1f |", r.best/1e9, r.median/1e9)
			perCycle += " " + bytesPerCycle(r.best/float64(c), o.hz) + " |"
		}
		fmt.Fprintln(out, row+perCycle)
	}
	fmt.Fprintln(out)
	if !o.noKernels {
		kernelTable(out, pools, o)
	}
	if o.noShapes {
		return nil
	}
	memo := map[[2]int64]float64{}
	at := func(cores int, bytesPerWorker int64) float64 {
		bytesPerWorker = max(bytesPerWorker, 16<<10) &^ 255
		k := [2]int64{int64(cores), bytesPerWorker}
		if v, ok := memo[k]; ok {
			return v
		}
		v := readBandwidth(pools[cores], bytesPerWorker, o).best
		memo[k] = v
		return v
	}
	// The arithmetic roof of each precision's product: an int8 or bf16
	// model's input projections run at their own kernel's rate, not
	// float32's.
	flops := roofs{}
	for _, prec := range o.precision {
		flops[prec] = map[int]float64{}
		for _, c := range o.cores {
			flops[prec][c] = gemmRate(pools[c], o, prec)
		}
	}
	fmt.Fprintln(out, "## Weight streaming, partitioned schedule, batch 1")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Arithmetic roof: the product P runs in each precision, 100 rows × 256×256 W per worker (in L2), multiply-adds ×2 per second:")
	fmt.Fprintln(out)
	for _, prec := range o.precision {
		fmt.Fprintf(out, "- %v (%s): %s", prec, productName(prec), joinRates(o.cores, flops[prec]))
		if o.hz > 0 {
			fmt.Fprintf(out, " (%.1f per cycle and core on one core", flops[prec][o.cores[0]]/float64(o.cores[0])/o.hz)
			if prec == schedule.F32 {
				// The packed products' lanes on this host: sixteen where
				// 512-bit operations run whole, else eight.
				lanes := 8
				if f32.WidePacked() {
					lanes = 16
				}
				fmt.Fprintf(out, "; %d is two %d-wide FMAs a cycle", 4*lanes, lanes)
			}
			fmt.Fprint(out, ")")
		}
		fmt.Fprintln(out, ".")
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Stream beside arithmetic: every worker passes its own %s of packed W (rows of %d, past the L3) in pieces of %d rows: a one-row product over each piece (stream, as a projection's first row pulls W in), %d rows against a piece held in L2 as often (arith, the other rows of a ten-step projection), and the two alternating piece by piece (both); µs per 16 MiB of W on each worker's clock, and the share of the shorter that the host hid: (stream + arith - both) / the shorter, best / median of %d runs (1: the two at once, as the model assumes; 0: one after the other):\n\n",
		size(overlapBytes(o.dram)), overlapK, overlapPiece, overlapRows, o.reps)
	overlap := map[int]float64{}
	for _, c := range o.cores {
		r := measureOverlap(pools[c], o)
		overlap[c] = r.share.best
		fmt.Fprintf(out, "- %d core(s): stream %.0f µs, arith %.0f, both %.0f; share %.2f / %.2f.\n", c, r.stream, r.arith, r.both, r.share.best, r.share.median)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "W_hh/worker: one worker's W_hh slice of one layer, and the level that holds the re-read weights (the whole model at T = 1); GB/s: weight bytes read per second (best run); level GB/s: read bandwidth measured at that footprint; W_hh past L2: the share of W_hh's bytes that miss a simulated %s %d-way LRU L2 per core in a warm inference of the plan; model µs: those bytes at the bandwidth of W_hh's footprint (its first pass in an inference at the whole model's, where slower) and the rest at L2's, plus the other weights' bytes at theirs or the input projections' arithmetic at the precision's roof above, whichever takes longer; footprint model µs: the same with every W_hh byte at its footprint's bandwidth; roofline: model time over the best measured time; host model µs: the model with the other weights' bytes and the projections' arithmetic overlapped only by the best share measured above (clamped to 0..1): the longer plus the shorter times one less the share, and its W_hh time times stepped/free; stepped/free (best and median of %d runs; on more than one core, at T > 1): every worker reads a buffer of its W_hh slice's size, forwards and backwards in turn as P reads W_hh, one pass a phase with a barrier after each as P's steps run, against the same passes each worker makes on its own (the time a pass the rates above imply); above 1 is what the workers lose waiting for the slowest at every step.\n", size(o.l2), o.l2Ways, o.reps)
	fmt.Fprintln(out)
	measured := map[shapeKey]float64{}
	fmt.Fprintln(out, "| cell | hidden | layers | T | weights | cores | W_hh/worker | level | µs/inference (best / median) | GB/s | level GB/s | W_hh past L2 | footprint model µs | model µs | roofline | host model µs | stepped/free (best / median) |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	steps := map[[2]int64]rate{}
	stepped := func(cores int, bytesPerWorker int64) rate {
		k := [2]int64{int64(cores), bytesPerWorker}
		if r, ok := steps[k]; ok {
			return r
		}
		r := measureStepped(pools[cores], bytesPerWorker, o)
		steps[k] = r
		return r
	}
	for _, cell := range o.cells {
		for _, h := range o.hidden {
			for _, L := range o.layers {
				net, err := rnn.NewNetwork(rnn.Config{Cell: cell, Input: h, Hidden: h, Layers: L}, false)
				if err != nil {
					return err
				}
				models.Randomize(net, 1)
				for _, T := range o.lengths {
					for _, prec := range o.precision {
						for _, c := range o.cores {
							s, err := measureShape(net, pools[c], prec, T, o)
							if err != nil {
								return err
							}
							measured[shapeKey{cell, h, L, T, c, prec}] = s.best
							hhBW := at(c, s.sliceBytes)
							hitBW := at(c, min(s.sliceBytes, o.l2/2))
							otherBW := at(c, s.modelBytes/int64(c))
							proj := flops.projSeconds(net, T, prec, c)
							model := s.model(hhBW, hitBW, otherBW, proj)
							flat := s.model(hhBW, hhBW, otherBW, proj) // every W_hh byte at the footprint's rate
							levelBW, past := otherBW, "-"
							if s.hhBytes > 0 {
								levelBW = hhBW
								past = fmt.Sprintf("%.0f%%", 100*float64(s.missed())/float64(s.hhBytes))
							}
							step, stepCol := 1.0, "-"
							if s.hhBytes > 0 && c > 1 {
								r := stepped(c, s.sliceBytes)
								step, stepCol = r.best, fmt.Sprintf("%.2f / %.2f", r.best, r.median)
							}
							host := s.hostModel(hhBW, hitBW, otherBW, proj, overlap[c], step)
							fmt.Fprintf(out, "| %v | %d | %d | %d | %v | %d | %s | %s | %.1f / %.1f | %.1f | %.1f | %s | %.1f | %.1f | %.2f | %.1f | %s |\n",
								cell, h, L, T, prec, c, size(s.sliceBytes), s.level(c, o), s.best*1e6, s.median*1e6,
								float64(s.hhBytes+s.otherBytes)/s.best/1e9, levelBW/1e9, past, flat*1e6, model*1e6, model/s.best, host*1e6, stepCol)
						}
					}
				}
			}
		}
	}
	if len(o.predict) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	c0 := o.cores[0]
	m := &machine{
		l2BW: at(c0, o.l2/2) / float64(c0),
		past: func(b int64) float64 {
			// Measured at the next power of two, from twice L2 to -dram.
			p := 2 * o.l2
			for p < b && p < o.dram {
				p *= 2
			}
			return at(c0, min(p, o.dram)) / float64(c0)
		},
		dramCap: o.dramGBs * 1e9,
		flops:   map[schedule.Precision]float64{},
		gate:    map[rnn.CellKind]float64{rnn.LSTM: gateCost(rnn.LSTM, o), rnn.GRU: gateCost(rnn.GRU, o)},
		step:    o.barrierStep * 1e-9,
		l2:      o.l2, l3: o.l3, l2Ways: o.l2Ways, l3Ways: 16, l3Cores: o.l3Cores,
	}
	for prec, r := range flops {
		m.flops[prec] = r[c0] / float64(c0)
	}
	if llc, ok := host.Get().LastLevel(); ok && llc.Ways > 0 && llc.Bytes == o.l3 {
		m.l3Ways = llc.Ways
	}
	switch p, ok := pools[2]; {
	case o.barrierNs > 0:
		m.barrier2 = o.barrierNs * 1e-9
	case ok:
		m.barrier2 = barrierCost(p, o)
	default:
		m.barrier2 = 100e-9
	}
	return predictTable(out, m, measured, o)
}

// bytesPerCycle formats a rate per core in bytes per cycle of a clock of
// hz, or n/a when the clock is unknown.
func bytesPerCycle(rate, hz float64) string {
	if hz <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", rate/hz)
}

// projFlops is the arithmetic of one inference's input projections at
// batch 1: W_ih times the T inputs of every layer and direction.
func projFlops(net *rnn.Network, T int) float64 {
	var f float64
	for _, dirs := range net.Layers {
		for _, l := range dirs {
			f += 2 * float64(T) * float64(l.Rows()) * float64(l.Input)
		}
	}
	return f
}

// roofs is the arithmetic roof of each precision's product on each
// core count measured: multiply-adds ×2 per second, all cores together.
type roofs map[schedule.Precision]map[int]float64

// projSeconds is the time one inference's input projections (projFlops)
// take at the roof of precision prec on c cores.
func (r roofs) projSeconds(net *rnn.Network, T int, prec schedule.Precision, c int) float64 {
	return projFlops(net, T) / r[prec][c]
}

// productName names the kernels gemmRate times for prec.
func productName(prec schedule.Precision) string {
	switch prec {
	case schedule.BF16:
		return "f32.GemmNTBF16"
	case schedule.Int8:
		return "f32.QuantizeI8 and f32.GemmNTI8, " + f32.I8Impl()
	}
	return "f32.GemmNT"
}

func joinRates(cores []int, r map[int]float64) string {
	var s []string
	for _, c := range cores {
		s = append(s, fmt.Sprintf("%.0f GFLOP/s on %d core(s)", r[c]/1e9, c))
	}
	return strings.Join(s, ", ")
}

func joinCores(cores []int, suffix string) string {
	var s []string
	for _, c := range cores {
		s = append(s, strconv.Itoa(c)+suffix)
	}
	return strings.Join(s, " | ")
}

func size(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// rate is a measured rate in bytes (or inferences) per second.
type rate struct{ best, median float64 }

// readBandwidth has every worker of p sum its own buffer of the given size
// for about -time, -reps times, and returns the bytes per second, all
// workers together. The buffers are on the pages P's weights are on
// (internal/hugepage).
func readBandwidth(p *schedule.Pool, bytes int64, o *options) rate {
	owner := new(int) // the buffers live until the measurement is done
	defer runtime.KeepAlive(owner)
	bufs := ownBuffers(p, owner, bytes)
	sink := make([]float32, p.Workers())
	var rates []float64
	for r := 0; r < o.reps; r++ {
		rate, _ := forEach(p, o.time, o.cpu, func(int) float64 { return float64(bytes) },
			func(w int) { sink[w] += f32.Sum(bufs[w]) })
		rates = append(rates, rate)
	}
	return summarize(rates)
}

// ownBuffers gives every worker of p a buffer of its own of the given
// size (at least one float) on huge pages, allocated and first touched
// by the worker that will read it, kept until owner is collected.
func ownBuffers(p *schedule.Pool, owner *int, bytes int64) [][]float32 {
	bufs := make([][]float32, p.Workers())
	p.Each(func(w int) {
		bufs[w] = hugepage.Floats(owner, int(max(bytes/4, 1)))
		for i := range bufs[w] {
			bufs[w][i] = 1
		}
	})
	return bufs
}

func summarize(v []float64) rate {
	slices.Sort(v)
	return rate{best: v[len(v)-1], median: v[len(v)/2]}
}

// shapeResult is one shape's measurement.
type shapeResult struct {
	best, median float64 // seconds per inference
	steps        int     // T
	hhBytes      int64   // W_hh bytes read per inference
	otherBytes   int64   // all other weight bytes read per inference
	sliceBytes   int64   // the largest W_hh slice of one worker and layer
	passBytes    int64   // every W_hh buffer once: one step of every layer
	modelBytes   int64   // all weight buffers
	// hhMiss is the W_hh bytes a warm inference reads past a private L2
	// (all workers together, hhMisses), or -1 when not simulated: every
	// W_hh byte then counts as a miss.
	hhMiss int64
}

// missed is the W_hh bytes the model prices at the footprint's bandwidth.
func (s shapeResult) missed() int64 {
	if s.hhMiss < 0 {
		return s.hhBytes
	}
	return min(s.hhMiss, s.hhBytes)
}

// model is the roofline time of one inference, in seconds: the W_hh
// bytes that miss L2 at hhBW and the others at hitBW, the first pass at
// otherBW instead when that is slower (the bandwidth of the whole model's
// footprint, where W_hh comes from at the start of an inference), plus the
// longer of the other weights' bytes at otherBW and the input
// projections' arithmetic (proj seconds).
func (s shapeResult) model(hhBW, hitBW, otherBW, proj float64) float64 {
	return max(float64(s.otherBytes)/otherBW, proj) + s.hhTime(hhBW, hitBW, otherBW)
}

// hhTime is the model's time for the W_hh bytes: those that miss L2 at
// hhBW and the others at hitBW, the first pass at otherBW instead when
// that is slower.
func (s shapeResult) hhTime(hhBW, hitBW, otherBW float64) float64 {
	if s.hhBytes == 0 {
		return 0
	}
	miss := s.missed()
	t := float64(miss)/hhBW + float64(s.hhBytes-miss)/hitBW
	if otherBW < hhBW {
		cold := float64(min(s.passBytes, miss))
		t += cold/otherBW - cold/hhBW
	}
	return t
}

// hhMisses replays each worker's steps of two inferences of p in a row
// through an LRU of its own the size of one core's L2 and returns the
// W_hh bytes the second inference misses, all workers together.
func hhMisses(p *schedule.Plan, o *options) (int64, error) {
	l := dre.NewLayout(p.Buffers)
	var hh [][2]int64
	for _, b := range p.Buffers {
		if isHH(b) {
			a, _ := l.Addr(b)
			hh = append(hh, [2]int64{a, a + b.Bytes()})
		}
	}
	var total int64
	for w := range p.Workers() {
		c, err := cachesim.NewLRU(cachesim.Config{Size: o.l2, LineSize: cachesim.DefaultLineSize, Ways: o.l2Ways})
		if err != nil {
			return 0, err
		}
		s := &hhSink{c: c, hh: hh}
		for run := range 2 {
			s.count = run == 1
			if err := dre.ReplayWorker(p, l, w, s); err != nil {
				return 0, err
			}
		}
		total += s.missed * c.Config().LineSize
	}
	return total, nil
}

// hhSink passes every access on to an LRU and, while count is set, adds
// up the lines that reads inside a W_hh buffer miss.
type hhSink struct {
	c      *cachesim.LRU
	hh     [][2]int64 // W_hh buffers' address ranges
	count  bool
	missed int64 // lines
}

func (s *hhSink) Read(a, n int64) {
	if !s.count || !slices.ContainsFunc(s.hh, func(r [2]int64) bool { return a >= r[0] && a < r[1] }) {
		s.c.Read(a, n)
		return
	}
	before := s.c.Stats().Misses
	s.c.Read(a, n)
	s.missed += s.c.Stats().Misses - before
}

func (s *hhSink) Write(a, n int64) { s.c.Write(a, n) }

// isHH reports whether b is a layer's recurrent weights.
func isHH(b *schedule.Buffer) bool {
	return b.Role == schedule.RoleWHH
}

// level names the nominal level that holds the weights re-read most
// often: one worker's W_hh slice (per core) and all workers' slices of a
// layer (shared L3), or at T = 1 the whole model.
func (s shapeResult) level(cores int, o *options) string {
	if s.hhBytes == 0 {
		return levelOf(s.modelBytes/int64(cores), s.modelBytes, o)
	}
	return levelOf(s.sliceBytes, s.sliceBytes*int64(cores), o)
}

// levelOf is the smallest level that holds perCore bytes in every core
// (total together), leaving room for the activations: L1 up to 3/4 of a
// core's L1d, L2 up to 7/8 of its L2, the shared L3 below half its size
// (other tenants use the rest on a shared host, and measured bandwidth
// falls by half at 16 MiB on the 32 MiB L3 of our benchmark machine), else
// DRAM.
func levelOf(perCore, total int64, o *options) string {
	switch {
	case perCore <= o.l1*3/4:
		return "L1"
	case perCore <= o.l2*7/8:
		return "L2"
	case total < o.l3/2:
		return "L3"
	}
	return "DRAM"
}

func measureShape(net *rnn.Network, pool *schedule.Pool, prec schedule.Precision, T int, o *options) (shapeResult, error) {
	prog, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Pool: pool, Precision: prec, PrivateCacheBytes: o.l2})
	if err != nil {
		return shapeResult{}, err
	}
	r := rand.New(rand.NewPCG(1, 1))
	in := schedule.Input{T: T, B: 1, Features: make([]float32, T*net.Input)}
	for i := range in.Features {
		in.Features[i] = float32(2*r.Float64() - 1)
	}
	p, err := prog.Plan(in, schedule.PlanOptions{})
	if err != nil {
		return shapeResult{}, err
	}
	s := shapeResult{steps: T}
	for _, st := range p.Steps {
		for _, reg := range st.Reads() {
			if reg.Buf.Kind != schedule.KindWeight {
				continue
			}
			if isHH(reg.Buf) {
				s.hhBytes += reg.Bytes()
				s.sliceBytes = max(s.sliceBytes, reg.Buf.Bytes())
			} else {
				s.otherBytes += reg.Bytes()
			}
		}
	}
	s.modelBytes = p.BufferBytes(schedule.KindWeight)
	for _, b := range p.Buffers {
		if isHH(b) {
			s.passBytes += b.Bytes()
		}
	}
	s.hhMiss = -1
	if T == 1 {
		// Each worker's W_hh is read once per inference: it lives where the model does.
		s.otherBytes += s.hhBytes
		s.hhBytes = 0
	} else if s.hhMiss, err = hhMisses(p, o); err != nil {
		return shapeResult{}, err
	}
	runtime.LockOSThread() // the thread's CPU clock is read on this thread
	defer runtime.UnlockOSThread()
	runs := 1
	for {
		start := time.Now()
		for i := 0; i < runs; i++ {
			if _, err := p.Run(); err != nil {
				return shapeResult{}, err
			}
		}
		if el := time.Since(start); el >= o.time || runs >= 1<<20 {
			var v []float64
			for rep := 0; rep < o.reps; rep++ {
				clk := threadClock(o.cpu)
				t0 := clk()
				for i := 0; i < runs; i++ {
					if _, err := p.Run(); err != nil {
						return shapeResult{}, err
					}
				}
				v = append(v, float64(runs)/(clk()-t0).Seconds())
			}
			rt := summarize(v)
			s.best, s.median = 1/rt.best, 1/rt.median
			return s, nil
		}
		runs *= 2
	}
}
