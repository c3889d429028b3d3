package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"rnnserve/dre/counters"
	"rnnserve/models"
)

const measureHelp = `Runs a model's real inference and reports the measured DRAM traffic and
DRE beside the modelled ones. With a SWEEP (e.g. validate: configs/sweeps/
validate.yaml) it does so for every model, input length, schedule and
cache of the sweep's grid; without one, for the model of the flags.

--counters chooses the source:
  perf        LLC misses of the inference's thread (perf-utils): --runs
              inferences, the first cold, idle baseline subtracted
  uncore      DRAM bytes at the memory controller (uncore_imc_*, amd_umc_*)
  cachegrind  valgrind's cache simulation of the same inference (dresim
              re-runs itself under valgrind); the steady-state inference is
              (a run of --valgrind-runs inferences - a run of 1) / (n - 1)
  none        the modelled traffic only
  auto        perf and uncore if this machine has them, else cachegrind if
              valgrind is installed, else none; it says why`

type measureFlags struct {
	counters, format, sweeps, spec, schedules, cell, scope, cache string
	cachegrind, detect                                            bool
	opt                                                           MeasureOptions
	hidden, layers, vocab, t, b, ways, cpu                        int
	seed                                                          uint64
	line                                                          int64
}

func (f *measureFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.counters, "counters", "auto", "measured traffic from `source`: auto, perf, uncore, cachegrind or none")
	fs.BoolVar(&f.cachegrind, "cachegrind", false, "the same as --counters cachegrind")
	fs.BoolVar(&f.detect, "detect", false, "only print which hardware counters this machine has, and why not")
	fs.IntVar(&f.opt.Runs, "runs", 100, "inferences measured with hardware counters")
	fs.IntVar(&f.opt.ValgrindRuns, "valgrind-runs", defaultValgrindRuns, "inferences of the longer valgrind run (the shorter runs 1)")
	fs.StringVar(&f.opt.Valgrind.Path, "valgrind", "", "valgrind `executable` (default: valgrind on PATH)")
	fs.StringVar(&f.opt.Valgrind.Tool, "tool", counters.Callgrind, "valgrind tool: callgrind (counts write-backs) or cachegrind (misses only)")
	fs.StringVar(&f.scope, "scope", "thread", "hardware counters count the inference's `thread` or one cpu")
	fs.IntVar(&f.cpu, "cpu", 0, "the CPU counted with --scope cpu")
	fs.StringVar(&f.spec, "spec", "", "model spec `file` (weights are random from --seed); default: the grid flags")
	fs.StringVar(&f.cell, "cell", "lstm", "cell of a Table I model: lstm or gru")
	fs.IntVar(&f.hidden, "hidden", 512, "hidden (and embedding) size of a Table I model")
	fs.IntVar(&f.layers, "layers", 1, "layers of a Table I model")
	fs.IntVar(&f.vocab, "vocab", 60, "vocabulary of a Table I model (embedding and softmax head; 0: neither)")
	fs.IntVar(&f.t, "t", 10, "input length")
	fs.IntVar(&f.b, "b", 1, "batch")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the weights and token ids")
	fs.StringVar(&f.schedules, "schedules", "A,A+", "schedules, comma-separated")
	fs.StringVar(&f.cache, "cache", "12MiB", "modelled LLC `size`")
	fs.IntVar(&f.ways, "ways", 0, "modelled LLC associativity (0: fully associative)")
	fs.Int64Var(&f.line, "line", 64, "line size")
	fs.StringVar(&f.format, "format", "text", "output: text, markdown, csv or json")
	fs.StringVar(&f.sweeps, "sweeps", filepath.Join("configs", "sweeps"), "`directory` where a sweep NAME is looked up as NAME.yaml")
}

func cmdMeasure(args []string, stdout, stderr io.Writer) error {
	var f measureFlags
	fs := newFlagSet("measure", "[flags] [SWEEP]", measureHelp, stderr)
	f.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return usageErr("measure takes at most one sweep file")
	}
	src, err := counters.ParseSource(f.counters)
	if err != nil {
		return usageErr("--counters: %v", err)
	}
	if f.cachegrind {
		src = counters.Cachegrind
	}
	f.opt.Counters = src
	switch f.scope {
	case "thread":
	case "cpu":
		f.opt.Hardware.Scope, f.opt.Hardware.CPU = counters.CPU, f.cpu
	default:
		return usageErr("--scope %q: want thread or cpu", f.scope)
	}
	switch f.format {
	case "text", "markdown", "csv", "json":
	default:
		return usageErr("--format %q: want text, markdown, csv or json", f.format)
	}
	if f.detect {
		hw := f.opt.Hardware
		hw.Source = counters.Auto
		d, err := counters.Detect(hw)
		if d != nil {
			d.Write(stdout)
		}
		if _, verr := counters.LookValgrind(f.opt.Valgrind.Path); verr != nil {
			fmt.Fprintf(stdout, "valgrind: %v\n", verr)
		} else {
			fmt.Fprintln(stdout, "valgrind: available (--counters cachegrind)")
		}
		return err
	}
	items, err := f.items(pos)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f.opt.Progress = stderr
	rows, info, err := Measure(ctx, items, f.opt)
	if info != nil {
		w := stdout
		if f.format == "csv" || f.format == "json" {
			w = stderr
		}
		writeMeasureInfo(w, info, f.format == "markdown")
	}
	if len(rows) > 0 {
		if werr := writeMeasureRows(stdout, rows, f.format); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// items lists the rows to measure: the sweep's, or the flags' model.
func (f *measureFlags) items(pos []string) ([]measureItem, error) {
	if len(pos) == 1 {
		sw, _, err := loadSweep(pos[0], f.sweeps)
		if err != nil {
			return nil, err
		}
		var items []measureItem
		for _, u := range sw.units() {
			if u.App != nil && u.App.Decoder != nil {
				continue // an encoder-decoder plan is not one Program's plan: not measured
			}
			for _, c := range sw.Caches {
				items = append(items, measureItem{
					target: target{Spec: u.Spec, T: u.T, B: sw.Batch, Schedule: u.Schedule, Seed: sw.Seed},
					Model:  u.Model, Cache: c, Runs: sw.Runs,
				})
			}
		}
		if len(items) == 0 {
			return nil, usageErr("sweep %s has nothing measure can run (encoder-decoder applications are skipped)", sw.Name)
		}
		return items, nil
	}
	var spec models.Spec
	name := "table1"
	if f.spec != "" {
		data, err := os.ReadFile(f.spec)
		if err != nil {
			return nil, err
		}
		s, err := models.ParseSpec(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.spec, err)
		}
		spec, name = *s, baseName(f.spec)
		spec.Weights = ""
	} else {
		spec = models.Spec{Cell: f.cell, InputSize: f.hidden, HiddenSize: f.hidden, NumLayers: f.layers}
		if f.vocab > 0 {
			spec.Embedding = &models.Embedding{VocabSize: f.vocab}
			spec.Head = &models.Head{OutFeatures: f.vocab, Activation: "softmax"}
		}
		if err := spec.Validate(); err != nil {
			return nil, usageErr("%v", err)
		}
	}
	size, err := ParseSize(f.cache)
	if err != nil {
		return nil, usageErr("--cache: %v", err)
	}
	ways := f.ways
	if ways == 0 {
		ways = -1
	}
	c := CacheSpec{Size: Size(size), LineSize: f.line, Ways: ways}
	c.Name = c.Size.String()
	if e := c.validate("--cache"); e != nil {
		return nil, usageErr("%v", e)
	}
	scheds, err := parseSchedules(strings.Split(f.schedules, ","))
	if err != nil {
		return nil, usageErr("--schedules: %v", err)
	}
	if f.t < 1 || f.b < 1 {
		return nil, usageErr("-t %d -b %d: want at least 1", f.t, f.b)
	}
	var items []measureItem
	for _, s := range scheds {
		items = append(items, measureItem{target: target{Spec: spec, T: f.t, B: f.b, Schedule: s, Seed: f.seed},
			Model: name, Cache: c, Runs: f.opt.Runs})
	}
	return items, nil
}

func writeMeasureInfo(w io.Writer, info *MeasureInfo, markdown bool) {
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

func writeMeasureRows(w io.Writer, rows []MeasureRow, format string) error {
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
