package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"rnnserve/dre/counters"
	"rnnserve/dre/sweep"
	"rnnserve/models"
	"rnnserve/schedule"
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
	opt                                                           sweep.MeasureOptions
	hidden, layers, vocab, t, b, ways, cpu                        int
	seed                                                          uint64
	line                                                          int64
}

func (f *measureFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.counters, "counters", "auto", "measured traffic from `source`: auto, perf, uncore, cachegrind or none")
	fs.BoolVar(&f.cachegrind, "cachegrind", false, "the same as --counters cachegrind")
	fs.BoolVar(&f.detect, "detect", false, "only print which hardware counters this machine has, and why not")
	fs.IntVar(&f.opt.Runs, "runs", 100, "inferences measured with hardware counters")
	fs.IntVar(&f.opt.ValgrindRuns, "valgrind-runs", sweep.DefaultValgrindRuns, "inferences of the longer valgrind run (the shorter runs 1)")
	fs.StringVar(&f.opt.Valgrind.Path, "valgrind", "", "valgrind `executable` (default: valgrind on PATH)")
	fs.StringVar(&f.opt.Valgrind.Tool, "tool", counters.Callgrind, "valgrind tool: callgrind (counts write-backs) or cachegrind (misses only)")
	fs.StringVar(&f.scope, "scope", "thread", "hardware counters count the inference's `thread` or one cpu")
	fs.IntVar(&f.cpu, "cpu", 0, "the CPU counted with --scope cpu")
	fs.StringVar(&f.spec, "spec", "", "model spec `file` (weights are random from --seed); default: the grid flags")
	fs.StringVar(&f.cell, "cell", "lstm", "cell of a Table I model: lstm, gru, rnn_tanh or rnn_relu")
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
	rows, info, err := sweep.Measure(ctx, items, f.opt)
	if info != nil {
		w := stdout
		if f.format == "csv" || f.format == "json" {
			w = stderr
		}
		sweep.WriteMeasureInfo(w, info, f.format == "markdown")
	}
	if len(rows) > 0 {
		if werr := sweep.WriteMeasureRows(stdout, rows, f.format); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// items lists the rows to measure: the sweep's, or the flags' model.
func (f *measureFlags) items(pos []string) ([]sweep.MeasureItem, error) {
	if len(pos) == 1 {
		sw, _, err := loadSweep(pos[0], f.sweeps)
		if err != nil {
			return nil, err
		}
		items := sw.MeasureItems()
		if len(items) == 0 {
			return nil, usageErr("sweep %s has nothing measure can run (encoder-decoder applications are skipped)", sw.Name)
		}
		return items, nil
	}
	var spec models.Spec
	name := "table1"
	if f.spec != "" {
		s, err := models.ReadSpecFile(f.spec)
		if err != nil {
			return nil, err
		}
		spec = *s
		name = strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f.spec), ".yaml"), ".yml")
		spec.Weights = ""
	} else {
		spec = sweep.TableISpec(f.cell, f.hidden, f.layers, f.vocab, "softmax")
		if err := spec.Validate(); err != nil {
			return nil, usageErr("%v", err)
		}
	}
	size, err := sweep.ParseSize(f.cache)
	if err != nil {
		return nil, usageErr("--cache: %v", err)
	}
	ways := f.ways
	if ways == 0 {
		ways = -1
	}
	c := sweep.CacheSpec{Size: sweep.Size(size), LineSize: f.line, Ways: ways}
	c.Name = c.Size.String()
	if err := c.Validate("--cache"); err != nil {
		return nil, usageErr("%v", err)
	}
	scheds, err := parseSchedules(strings.Split(f.schedules, ","))
	if err != nil {
		return nil, usageErr("--schedules: %v", err)
	}
	if f.t < 1 || f.b < 1 {
		return nil, usageErr("-t %d -b %d: want at least 1", f.t, f.b)
	}
	var items []sweep.MeasureItem
	for _, s := range scheds {
		items = append(items, sweep.MeasureItem{Target: sweep.Target{Spec: spec, T: f.t, B: f.b, Schedule: s, Seed: f.seed},
			Model: name, Cache: c, Runs: f.opt.Runs})
	}
	return items, nil
}

// parseSchedules reads schedule names (A, A+, P, P-bf16, P-int8).
func parseSchedules(list []string) ([]schedule.Variant, error) {
	var out []schedule.Variant
	for _, s := range list {
		sc, err := schedule.ParseVariant(s)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}
