package sweep

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/dre/counters"
	"rnnserve/models"
)

// MeasureOptions configure Measure. Zero values mean the defaults.
type MeasureOptions struct {
	// Counters is the source of measured traffic (default counters.Auto:
	// the hardware counters if this machine has some, else valgrind if
	// it is installed, else none).
	Counters counters.Source
	// Runs is how many inferences the hardware counters measure, the
	// first one cold (default dre.DefaultRuns, as the paper).
	Runs int
	// ValgrindRuns is how many inferences the longer of the two valgrind
	// runs does (default 3); the shorter does one, and their difference
	// per extra inference is the steady state.
	ValgrindRuns int
	// Exe is the binary valgrind runs with ChildArgs: dresim, or any
	// program whose main hands ChildCommand's arguments to RunChild
	// (default: this executable).
	Exe string
	// Valgrind sets valgrind's path and tool; its caches are set per row.
	Valgrind counters.ValgrindOptions
	// Hardware sets the counters' scope; its Source is set from Counters.
	Hardware counters.Options
	// Progress, if set, gets a line per row.
	Progress io.Writer
}

// DefaultValgrindRuns is the default of MeasureOptions.ValgrindRuns.
const DefaultValgrindRuns = 3

// valgrindNoise is the per-inference traffic below which two valgrind runs
// of dresim cannot tell an inference's traffic from the Go runtime's
// run-to-run differences (a few hundred lines of scheduler and sysmon
// activity; docs/measured-traffic.md).
const valgrindNoise = 512 << 10

// EnsureDefaults fills zero values.
func (o *MeasureOptions) EnsureDefaults() {
	if o.Counters == "" {
		o.Counters = counters.Auto
	}
	if o.Runs == 0 {
		o.Runs = dre.DefaultRuns
	}
	if o.ValgrindRuns == 0 {
		o.ValgrindRuns = DefaultValgrindRuns
	}
}

// Validate reports the first invalid setting.
func (o MeasureOptions) Validate() error {
	if _, err := counters.ParseSource(string(o.Counters)); err != nil {
		return optionErr("--counters: %v", err)
	}
	if o.Runs < 1 || o.Runs > dre.MaxRuns {
		return optionErr("--runs %d: want 1..%d", o.Runs, dre.MaxRuns)
	}
	if t := o.Valgrind.Tool; t != "" && t != counters.Callgrind && t != counters.CachegrindTool {
		return optionErr("--tool %q: want %s or %s", t, counters.Callgrind, counters.CachegrindTool)
	}
	if o.ValgrindRuns < 2 || o.ValgrindRuns > 100 {
		return optionErr("--valgrind-runs %d: want 2..100 (the steady state is the difference from a run of 1)", o.ValgrindRuns)
	}
	return nil
}

// MeasureItem is one row to measure: a target through one cache.
type MeasureItem struct {
	Target
	Model string
	Cache CacheSpec
	Runs  int // the model's back-to-back inferences (AvgRW)
}

// MeasureRow is one model, input and schedule through one cache: its
// modelled traffic and what was measured. Byte counts are per inference;
// a measured value that is missing is null (not zero).
type MeasureRow struct {
	Model    string `json:"model"`
	Cell     string `json:"cell"`
	Hidden   int    `json:"hidden"`
	Layers   int    `json:"layers"`
	Vocab    int    `json:"vocab"`
	T        int    `json:"t"`
	B        int    `json:"b"`
	Schedule string `json:"schedule"`
	Cache    string `json:"cache"` // the sweep's cache, as modelled
	Runs     int    `json:"runs"`  // modelled back-to-back inferences

	WorkingSetBytes int64   `json:"working_set_bytes"`
	ModelAvgRW      float64 `json:"model_avg_rw_bytes"` // over Runs, the first one cold
	ModelDRE        float64 `json:"model_dre"`

	// Source is where the measured values come from: perf, uncore,
	// cachegrind (valgrind's simulation), or none.
	Source string `json:"source"`
	// MeasuredCache is the cache the measurement had: valgrind's LL, or
	// the host's.
	MeasuredCache string `json:"measured_cache"`
	// ModelCompared is the modelled traffic the measurement is compared
	// with: for valgrind, the steady-state inference through valgrind's
	// LL (set-associative, which the sweep's cache may not be); for
	// hardware counters, ModelAvgRW.
	ModelCompared float64  `json:"model_compared_bytes"`
	MeasuredRead  *float64 `json:"measured_read_bytes"`
	MeasuredWrite *float64 `json:"measured_write_bytes"`
	MeasuredRW    *float64 `json:"measured_rw_bytes"`
	MeasuredDRE   *float64 `json:"measured_dre"`
	DiffPercent   *float64 `json:"diff_percent"` // (measured - compared) / compared
	MeasuredRuns  int      `json:"measured_runs"`
	// Counts are the per-inference counter values (hardware), or the
	// valgrind events the bytes come from.
	Counts  map[string]float64 `json:"counts,omitempty"`
	Seconds float64            `json:"seconds"`
	Note    string             `json:"note,omitempty"`
}

// MeasureInfo says which source Measure used and why.
type MeasureInfo struct {
	Source    counters.Source
	Detection *counters.Detection // the hardware counters found, when looked for
	Why       []string            // how the source was chosen, and what is missing
	Caches    map[string]string   // per cache name: how valgrind's LL differs, when it does
}

// chooseSource resolves opt.Counters to the source Measure uses.
func chooseSource(opt *MeasureOptions, info *MeasureInfo) error {
	want := opt.Counters
	if want == counters.Auto || want == counters.Perf || want == counters.Uncore {
		hw := opt.Hardware
		hw.Source = want
		d, err := counters.Detect(hw)
		if err != nil && d == nil {
			return err
		}
		info.Detection = d
		if derr := d.Err(); derr == nil {
			info.Source = want
			if want == counters.Auto {
				info.Source = counters.Perf
				if d.Has(counters.DRAMReadBytes) {
					info.Source = counters.Uncore
				}
			}
			return nil
		} else if want != counters.Auto {
			return derr
		} else {
			info.Why = append(info.Why, derr.Error())
		}
	}
	if want == counters.Auto || want == counters.Cachegrind {
		_, err := counters.LookValgrind(opt.Valgrind.Path)
		if err == nil {
			if want == counters.Auto {
				info.Why = append(info.Why, "measuring with valgrind's cache simulation instead")
			}
			info.Source = counters.Cachegrind
			return nil
		}
		if want == counters.Cachegrind {
			return err
		}
		info.Why = append(info.Why, err.Error())
	}
	info.Source = counters.None
	info.Why = append(info.Why, "reporting the modelled traffic only")
	return nil
}

// Measure models each item and measures its real inference with the
// source opt chooses.
func Measure(ctx context.Context, items []MeasureItem, opt MeasureOptions) ([]MeasureRow, *MeasureInfo, error) {
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, nil, err
	}
	info := &MeasureInfo{Caches: map[string]string{}}
	if err := chooseSource(&opt, info); err != nil {
		return nil, info, err
	}
	if info.Source == counters.Cachegrind && opt.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, info, fmt.Errorf("the dresim executable to run under valgrind: %w", err)
		}
		opt.Exe = exe
	}
	var rows []MeasureRow
	for i, it := range items {
		if err := ctx.Err(); err != nil {
			return rows, info, fmt.Errorf("%w after %d of %d rows", ErrInterrupted, len(rows), len(items))
		}
		start := time.Now()
		row, err := measureOne(ctx, &it, &opt, info)
		if err != nil {
			return rows, info, fmt.Errorf("%s T=%d %v cache %s: %w", it.Model, it.T, it.Schedule, it.Cache.Name, err)
		}
		row.Seconds = time.Since(start).Seconds()
		rows = append(rows, *row)
		if opt.Progress != nil {
			fmt.Fprintf(opt.Progress, "dresim: measured %d/%d: %s\n", i+1, len(items), row.String())
		}
	}
	return rows, info, nil
}

// String is the row in one line: the model, the modelled traffic and
// what was measured.
func (r *MeasureRow) String() string {
	s := fmt.Sprintf("%s %s h=%d l=%d v=%d T=%d %s %s: model %s", r.Model, r.Cell, r.Hidden, r.Layers, r.Vocab, r.T, r.Schedule, r.Cache, mibStr(r.ModelCompared))
	if r.MeasuredRW != nil {
		s += ", " + r.Source + " " + mibStr(*r.MeasuredRW)
		if r.DiffPercent != nil {
			s += fmt.Sprintf(" (%+.1f%%)", *r.DiffPercent)
		}
	}
	return s
}

func mibStr(b float64) string { return fmt.Sprintf("%.3f MiB", b/(1<<20)) }

func measureOne(ctx context.Context, it *MeasureItem, opt *MeasureOptions, info *MeasureInfo) (*MeasureRow, error) {
	shape, err := models.Shape(&it.Spec)
	if err != nil {
		return nil, err
	}
	prog, plan, err := dre.DryVariantPlan(shape, it.Schedule, it.T, it.B, it.Seed)
	if err != nil {
		return nil, err
	}
	cfg := it.Cache.config()
	progWS := dre.WorkingSetOfProgram(prog, it.T, it.B)
	rep, err := analyzePlan(plan, progWS, dre.Options{Cache: cfg, Runs: it.Runs})
	if err != nil {
		return nil, err
	}
	row := &MeasureRow{
		Model: it.Model, Cell: shape.Cell.String(), Hidden: shape.Hidden, Layers: shape.NumLayers, Vocab: shape.Vocab,
		T: it.T, B: it.B, Schedule: it.Schedule.String(), Cache: it.Cache.Name, Runs: it.Runs,
		WorkingSetBytes: rep.WorkingSet.Total, ModelAvgRW: rep.AvgRW, ModelDRE: rep.DRE,
		Source: string(info.Source), ModelCompared: rep.AvgRW,
	}
	ws := float64(rep.WorkingSet.Total)
	set := func(read, write *float64, rw float64) {
		row.MeasuredRead, row.MeasuredWrite = read, write
		row.MeasuredRW = &rw
		dre := rw / ws
		row.MeasuredDRE = &dre
		if row.ModelCompared > 0 {
			d := 100 * (rw - row.ModelCompared) / row.ModelCompared
			row.DiffPercent = &d
		}
	}
	switch info.Source {
	case counters.None:
		row.MeasuredCache = "-"
		return row, nil
	case counters.Cachegrind:
		ll, note := counters.LegalLL(cfg)
		if note != "" {
			info.Caches[it.Cache.Name] = note
		}
		row.MeasuredCache = "valgrind LL " + describeCache(ll)
		steadyModel, err := analyzePlan(plan, progWS, dre.Options{Cache: ll, Runs: 2})
		if err != nil {
			return nil, err
		}
		row.ModelCompared = float64(steadyModel.Steady.Read + steadyModel.Steady.Write)
		vopt := opt.Valgrind
		vopt.LL = ll
		// One P, and no preemption by signal: sysmon preempts a goroutine
		// every 10ms of wall time, which valgrind stretches 50-100 times,
		// so preemptions (and their traffic) would differ between runs.
		vopt.Env = append(vopt.Env, "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1")
		vg, err := counters.NewValgrind(vopt)
		if err != nil {
			return nil, err
		}
		var argErr error
		st, err := vg.MeasureSteadyState(ctx, opt.ValgrindRuns, func(runs int) []string {
			args, err := it.ChildArgs(runs)
			argErr = errors.Join(argErr, err)
			return append([]string{opt.Exe}, args...)
		})
		if err = errors.Join(argErr, err); err != nil {
			return nil, err
		}
		pr := st.PerRun
		read := pr.ReadBytes
		row.MeasuredRuns = st.Runs
		row.Counts = map[string]float64{"ll_misses": pr.LLMisses, "d1_misses": pr.D1Misses, "data_refs": pr.DataRefs, "code_fill_bytes": pr.CodeBytes}
		if pr.Writes {
			write := pr.WriteBytes
			set(&read, &write, read+write)
		} else {
			set(&read, nil, read)
			row.Note = "cachegrind counts no write-backs: measured is reads only"
		}
		if math.Abs(*row.MeasuredRW) < valgrindNoise && row.ModelCompared < valgrindNoise {
			row.DiffPercent = nil
			row.Note = "model and measurement both below valgrind's run-to-run noise: no difference to speak of"
		}
		return row, nil
	}
	// Hardware counters: the real inference, Runs times, the first cold.
	row.MeasuredCache = "host LLC"
	p, err := it.realPlan()
	if err != nil {
		return nil, err
	}
	hw := opt.Hardware
	hw.Source = opt.Counters // perf, uncore or auto (both)
	var runErr error
	m, _, err := counters.Measure(hw, it.Runs, func() {
		if _, err := p.Run(); err != nil && runErr == nil {
			runErr = err
		}
	})
	if err = errors.Join(runErr, err); err != nil {
		return nil, err
	}
	per := m.PerRun()
	row.MeasuredRuns = m.Runs
	row.Counts = map[string]float64{}
	for _, e := range per.Events() {
		v, _ := per.Get(e)
		row.Counts[e.String()] = v
	}
	if b, ok := per.DRAMBytes(); ok {
		r, _ := per.Get(counters.DRAMReadBytes)
		w, _ := per.Get(counters.DRAMWriteBytes)
		set(&r, &w, b)
		row.Source = string(counters.Uncore)
		row.Note = "memory-controller bytes of the whole machine during the runs, idle baseline subtracted"
	} else if misses, ok := per.LLCMisses(); ok {
		r := misses * float64(cfg.LineSize)
		set(&r, nil, r)
		row.Source = string(counters.Perf)
		row.Note = "LLC misses x line size of the inference's thread: reads only (write-backs are not misses)"
	} else {
		row.Note = "the counters gave no LLC miss or DRAM value (see the detection)"
	}
	return row, nil
}

// describeCache formats a cache for a table.
func describeCache(c cachesim.Config) string {
	s := CacheSpec{Size: Size(c.Size)}
	if c.Ways == cachesim.FullyAssociative {
		return s.Size.String() + " fully associative"
	}
	return fmt.Sprintf("%v %d-way", s.Size, c.Ways)
}

// MeasureItems lists the rows of the sweep Measure can run: every unit
// through every cache, but for encoder-decoder applications, whose plan is
// not one Program's.
func (s *Sweep) MeasureItems() []MeasureItem {
	var items []MeasureItem
	for _, u := range s.units() {
		if u.App != nil && u.App.Decoder != nil {
			continue
		}
		for _, c := range s.Caches {
			items = append(items, MeasureItem{
				Target: Target{Spec: u.Spec, T: u.T, B: s.Batch, Schedule: u.Schedule, Seed: s.Seed},
				Model:  appKey{u.Model, u.NoHead}.label(" "), Cache: c, Runs: s.Runs,
			})
		}
	}
	return items
}

// WriteMeasureInfo writes which source Measure used and why, one line
// each (Markdown list items if markdown is set).
func WriteMeasureInfo(w io.Writer, info *MeasureInfo, markdown bool) {
	bullet := ""
	if markdown {
		bullet = "- "
	}
	fmt.Fprintf(w, "%smeasured traffic: %s\n", bullet, info.Source)
	for _, why := range info.Why {
		fmt.Fprintf(w, "%s%s\n", bullet, why)
	}
	for name, note := range info.Caches {
		fmt.Fprintf(w, "%scache %s: %s\n", bullet, name, note)
	}
	if markdown {
		fmt.Fprintln(w)
	}
}

// optMiB formats an optional byte count in MiB, "-" when missing.
func optMiB(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v/(1<<20), 'f', 3, 64)
}

func optF(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// WriteMeasureRows writes rows as format: text (aligned columns),
// markdown, csv or json.
func WriteMeasureRows(w io.Writer, rows []MeasureRow, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write([]string{"model", "cell", "hidden", "layers", "vocab", "t", "b", "schedule", "cache", "runs",
			"working_set_bytes", "model_avg_rw_bytes", "model_dre", "source", "measured_cache", "model_compared_bytes",
			"measured_read_bytes", "measured_write_bytes", "measured_rw_bytes", "measured_dre", "diff_percent", "measured_runs", "seconds", "note"})
		opt := func(v *float64) string {
			if v == nil {
				return ""
			}
			return ftoa(*v)
		}
		for _, r := range rows {
			i := strconv.Itoa
			cw.Write([]string{r.Model, r.Cell, i(r.Hidden), i(r.Layers), i(r.Vocab), i(r.T), i(r.B), r.Schedule, r.Cache, i(r.Runs),
				strconv.FormatInt(r.WorkingSetBytes, 10), ftoa(r.ModelAvgRW), ftoa(r.ModelDRE), r.Source, r.MeasuredCache, ftoa(r.ModelCompared),
				opt(r.MeasuredRead), opt(r.MeasuredWrite), opt(r.MeasuredRW), opt(r.MeasuredDRE), opt(r.DiffPercent), i(r.MeasuredRuns),
				ftoa(r.Seconds), r.Note})
		}
		cw.Flush()
		return cw.Error()
	}
	head := []string{"model", "cell", "hidden", "layers", "vocab", "T", "sched", "cache", "WS MiB",
		"model AvgRW MiB", "model DRE", "measured on", "model there MiB", "measured MiB (R+W)", "diff", "model DRE there", "measured DRE"}
	line := func(r MeasureRow) []string {
		rw := optMiB(r.MeasuredRW)
		if r.MeasuredRead != nil {
			rw += fmt.Sprintf(" (%s+%s)", optMiB(r.MeasuredRead), optMiB(r.MeasuredWrite))
		}
		ws := float64(r.WorkingSetBytes)
		return []string{r.Model, r.Cell, strconv.Itoa(r.Hidden), strconv.Itoa(r.Layers), strconv.Itoa(r.Vocab), strconv.Itoa(r.T), r.Schedule, r.Cache,
			fmt.Sprintf("%.3f", ws/(1<<20)), fmt.Sprintf("%.3f", r.ModelAvgRW/(1<<20)), fmt.Sprintf("%.3f", r.ModelDRE),
			r.Source + ": " + r.MeasuredCache, fmt.Sprintf("%.3f", r.ModelCompared/(1<<20)), rw, optF(r.DiffPercent, "%+.1f%%"),
			fmt.Sprintf("%.3f", r.ModelCompared/ws), optF(r.MeasuredDRE, "%.3f")}
	}
	if format == "markdown" {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		for _, r := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(line(r), " | "))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(line(r), "\t"))
		if r.Note != "" {
			fmt.Fprintf(tw, "  note: %s\n", r.Note)
		}
	}
	return tw.Flush()
}
