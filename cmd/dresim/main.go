package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/term"

	"rnnserve/dre/sweep"
	"rnnserve/internal/host"
	"rnnserve/models"
)

const usageHead = `dresim replays the DRE paper's benchmarks (Thakker et al., "Measuring
scheduling efficiency of RNNs for NLP applications") through a simulated
last-level cache and writes their DRAM traffic, working sets and Data Reuse
Efficiency as CSV, JSON and figures.

Usage:

  dresim run [flags] SWEEP         run a sweep file (or NAME: configs/sweeps/NAME.yaml)
  dresim NAME [flags]              the same as dresim run NAME, e.g. dresim table1
  dresim merge [flags] DIR...      join the output directories of shards
  dresim plot [flags] DIR          (re)draw the figures of an output directory
  dresim report DIR                print the numbers of docs/dre-reproduction.md (Markdown)
  dresim validate SWEEP            check a sweep file and count its rows, doing no work
  dresim measure [flags] [SWEEP]   measure real inferences (hardware counters or valgrind)
                                   beside the model (dresim measure -h; -detect)
  dresim trees [flags]             tree models: DRE per tree shape, batch and executor
  dresim apps                      list the application catalog

Flags may come before or after the other arguments.
`

const usageTail = `
Output directory:

  sweep.json     the resolved sweep, its fingerprint and shard (written first)
  rows.csv       one row per model, input length, schedule and cache, flushed as
                 rows complete, in sweep order (valid after Ctrl-C or a crash)
  rows.jsonl     the same rows as JSON lines (what merge and plot read)
  results.json   sweep, how the run ended, wall time and every row (written at
                 the end, also on Ctrl-C)
  figures/       fig3..fig6 as PNG, SVG and PDF (the paper's Figures 3-6)

Columns: index kind model cell hidden proj layers bidirectional vocab head_out
t b schedule cache cache_bytes line_size ways(-1 = fully associative) runs
avg_read_bytes avg_write_bytes avg_rw_bytes working_set_bytes dre
footprint_bytes opt_read_bytes opt_skipped sim_seconds note.

Sweep file (YAML; unknown keys are errors):

  name: table1             # default: the file name
  runs: 100                # back-to-back inferences averaged (default 100)
  seed: 1                  # token ids (default 1)
  batch: 1
  schedules: [A, A+]       # default both
  caches:                  # default one 12MiB fully associative LRU, 64 B lines
    - {name: 12MB, size: 12MiB}
    - {name: 25MB-20way, size: 25MiB, ways: 20, line_size: 64}
  opt: true                # Belady MIN bound where the trace has at most
  opt_max_accesses: 200000   # this many line accesses
  grid:                    # the paper's Table I: every combination
    cells: [lstm, gru]
    hidden: [64, 128, 256, 512, 1024]
    layers: [1, 2, 3, 4, 5, 6, 7, 8]
    input_lengths: [1, 10, 50, 100]
    vocab: [60, 10000]     # embedding (width hidden) and softmax head
  apps:                    # the catalog of package models (dresim apps)
    names: [gnmt, deepspeech1, lm, lm-dre, bytener]
    input_lengths: [10, 20, 50, 100]
    no_head: [lm-dre]      # these apps again without their softmax head
  plots: {dre_cache: 25MB, traffic_cache: 12MB, thresholds: [1, 2, 4, 10, 20, 50], cell: lstm}

Sizes take B, KiB, MiB, GiB (KB, MB, GB mean the same powers of 1024).

Exit status: 0 done, 1 error, 2 bad usage or sweep file, 130 interrupted
(the finished rows are written).
`

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// errUsage marks errors for which the usage is printed and the exit status is 2.
var errUsage = errors.New("usage")

func run(args []string, env lookupEnv, stdout, stderr io.Writer) int {
	err := checkHostEnv(env)
	if err == nil {
		err = dispatch(args, env, stdout, stderr)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, sweep.ErrInterrupted):
		fmt.Fprintln(stderr, err)
		return 130
	case errors.Is(err, errUsage), errors.Is(err, sweep.ErrSweep), errors.Is(err, sweep.ErrInvalidOption):
		msg := strings.TrimPrefix(err.Error(), "usage: ")
		if !strings.HasPrefix(msg, "dresim: ") {
			msg = "dresim: " + msg
		}
		fmt.Fprintln(stderr, msg)
		return 2
	}
	fmt.Fprintln(stderr, "dresim:", strings.TrimPrefix(err.Error(), "dresim: "))
	return 1
}

// checkHostEnv refuses an RNNSERVE_HOST_CACHES the process's cache
// sizes could not take (internal/host reads it as the process starts and
// would otherwise go on with the host's own).
func checkHostEnv(env lookupEnv) error {
	v, _ := env(host.EnvCaches)
	if err := host.CheckEnv(v); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// parseInterleaved parses flags anywhere among the arguments, as users
// write "dresim run sweep.yaml -o dresim-out/".
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageErr("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

type runFlags struct {
	out      string
	shard    string
	count    int
	jobs     int
	progress string
	figures  bool
	quiet    bool
	sweeps   string
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.out, "o", "dresim-out", "output `directory`")
	fs.StringVar(&f.shard, "shard", "", "run only shard `k/N` of the sweep (units i with i mod N == k, k from 0)")
	fs.IntVar(&f.count, "shard-count", 0, "number of shards `N` when the shard index comes from the environment (below)")
	fs.IntVar(&f.jobs, "j", runtime.NumCPU(), "parallel workers")
	fs.StringVar(&f.progress, "progress", "auto", "progress bar on stderr: auto (when it is a terminal), always or never")
	fs.BoolVar(&f.figures, "figures", true, "write the figures when the run ends")
	fs.BoolVar(&f.quiet, "q", false, "no summary line")
	fs.StringVar(&f.sweeps, "sweeps", filepath.Join("configs", "sweeps"), "`directory` where a sweep NAME is looked up as NAME.yaml")
}

// newFlagSet makes a subcommand's flag set. Its usage goes to stderr; a
// parse error is printed once, by run.
func newFlagSet(name, args, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: dresim %s %s\n\n%s\n\nFlags:\n", name, args, help)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

func dispatch(args []string, env lookupEnv, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usageErr("no command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return nil
	case "run":
		return cmdRun("", rest, env, stderr)
	case "merge":
		return cmdMerge(rest, stderr)
	case "plot":
		return cmdPlot(rest, stdout, stderr)
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "report":
		return cmdReport(rest, stdout, stderr)
	case "measure":
		return cmdMeasure(rest, stdout, stderr)
	case "trees":
		return cmdTrees(rest, stdout, stderr)
	case sweep.ChildCommand:
		return sweep.RunChild(rest, stdout, stderr)
	case "apps":
		for _, a := range models.Apps() {
			fmt.Fprintf(stdout, "%-12s %s\n", a.Name, a.Title)
		}
		return nil
	}
	if strings.HasPrefix(cmd, "-") {
		printUsage(stderr)
		return usageErr("unknown flag %s before a command", cmd)
	}
	return cmdRun(cmd, rest, env, stderr)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	for _, c := range []struct {
		name string
		reg  func(*flag.FlagSet)
	}{
		{"run", func(fs *flag.FlagSet) { new(runFlags).register(fs) }},
		{"merge", func(fs *flag.FlagSet) { new(mergeFlags).register(fs) }},
		{"plot", func(fs *flag.FlagSet) { fs.String("o", "", "figures `directory` (default DIR/figures)") }},
	} {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.reg(fs)
		fs.SetOutput(w)
		fmt.Fprintf(w, "\nFlags of %s:\n", c.name)
		fs.PrintDefaults()
	}
	fmt.Fprint(w, shardUsage)
	fmt.Fprint(w, usageTail)
}

// loadSweep reads a sweep file, or configs/sweeps/NAME.yaml for a bare name.
func loadSweep(arg, dir string) (*sweep.Sweep, string, error) {
	path := arg
	if _, err := os.Stat(path); err != nil && !strings.ContainsAny(arg, `/\.`) {
		path = filepath.Join(dir, arg+".yaml")
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", usageErr("no sweep file %s (a NAME is looked up as %s)", arg, filepath.Join(dir, "NAME.yaml"))
		}
		return nil, "", err
	}
	// One byte past the limit is enough for ParseSweep to refuse the file.
	data, err := io.ReadAll(io.LimitReader(f, sweep.MaxSweepBytes+1))
	f.Close()
	if err != nil {
		return nil, "", err
	}
	sw, err := sweep.ParseSweep(path, data)
	return sw, path, err
}

func cmdRun(name string, args []string, env lookupEnv, stderr io.Writer) error {
	var f runFlags
	fs := newFlagSet("run", "[flags] SWEEP", "Runs the sweep file SWEEP (or configs/sweeps/SWEEP.yaml) on all cores and writes rows, results and figures to -o.\nWithout --shard, a Kubernetes Indexed Job or a Slurm array task runs its shard (JOB_COMPLETION_INDEX with\n--shard-count or DRESIM_SHARD_COUNT; SLURM_ARRAY_TASK_*; dresim -h says more).", stderr)
	f.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if name != "" {
		pos = append([]string{name}, pos...)
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("run needs exactly one sweep file, got %d arguments", len(pos))
	}
	// Everything is checked before any work starts.
	sh, shardFrom, err := resolveShard(f.shard, f.count, env)
	if err != nil {
		return err
	}
	if f.jobs < 1 {
		return usageErr("-j %d: want at least 1", f.jobs)
	}
	var bar io.Writer
	switch f.progress {
	case "auto":
		if file, ok := stderr.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
			bar = stderr
		}
	case "always":
		bar = stderr
	case "never":
	default:
		return usageErr("-progress %q: want auto, always or never", f.progress)
	}
	sw, path, err := loadSweep(pos[0], f.sweeps)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process at once
	}()
	sum, err := sweep.Run(ctx, sw, sweep.RunOptions{Out: f.out, File: path, Shard: sh, Jobs: f.jobs, Figures: f.figures, Progress: bar})
	if errors.Is(err, sweep.ErrInterrupted) {
		return fmt.Errorf("%w after %.1fs: %d of %d rows written to %s", sweep.ErrInterrupted, sum.Wall.Seconds(), sum.Rows, sum.Want, f.out)
	}
	if err != nil {
		return err
	}
	if !f.quiet {
		shard := ""
		if sh.N > 1 {
			shard = " (shard " + sh.String() + ")"
			if shardFrom != "" {
				shard = " (shard " + sh.String() + " from " + shardFrom + ")"
			}
		}
		fmt.Fprintf(stderr, "dresim: %s%s: %d rows in %.1fs on %d workers -> %s\n", sw.Name, shard, sum.Rows, sum.Wall.Seconds(), f.jobs, f.out)
	}
	return nil
}

type mergeFlags struct {
	out     string
	partial bool
	figures bool
}

func (f *mergeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.out, "o", "", "output `directory` (required)")
	fs.BoolVar(&f.partial, "partial", false, "write the rows present even if some are missing")
	fs.BoolVar(&f.figures, "figures", true, "write the figures")
}

func cmdMerge(args []string, stderr io.Writer) error {
	var f mergeFlags
	fs := newFlagSet("merge", "[flags] DIR...", "Joins the output directories of shards (dresim run --shard k/N) of one sweep into -o.", stderr)
	f.register(fs)
	dirs, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if f.out == "" || len(dirs) == 0 {
		fs.Usage()
		return usageErr("merge needs -o and at least one directory")
	}
	res, err := sweep.Merge(dirs, f.partial)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	if err := sweep.WriteDir(f.out, res); err != nil {
		return err
	}
	if f.figures && len(res.Rows) > 0 {
		if _, err := sweep.Plot(res.Sweep, res.Rows, filepath.Join(f.out, sweep.FiguresDir)); err != nil {
			return fmt.Errorf("figures: %w", err)
		}
	}
	fmt.Fprintf(stderr, "dresim: merged %d directories: %d of %d rows -> %s\n", len(dirs), len(res.Rows), res.TotalRows, f.out)
	return nil
}

func cmdPlot(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plot", "[flags] DIR", "Draws the figures of an output directory's rows.", stderr)
	out := fs.String("o", "", "figures `directory` (default DIR/figures)")
	dir, m, rows, err := readOutput(fs, args, "plot")
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(dir, sweep.FiguresDir)
	}
	files, err := sweep.Plot(m.Sweep, rows, *out)
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return err
}

func cmdReport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", "DIR", "Prints, as Markdown, the A+ savings, the shares of benchmarks above each DRE and the checks of the paper's observations, from an output directory.", stderr)
	_, m, rows, err := readOutput(fs, args, "report")
	if err != nil {
		return err
	}
	sweep.Report(stdout, m.Sweep, rows)
	return nil
}

// readOutput parses the flags and the one output directory of command
// name and reads the directory's manifest and rows.
func readOutput(fs *flag.FlagSet, args []string, name string) (string, *sweep.Manifest, []sweep.Row, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", nil, nil, err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", nil, nil, usageErr("%s needs exactly one directory", name)
	}
	m, rows, err := sweep.ReadOutput(pos[0])
	if err != nil {
		return "", nil, nil, err
	}
	return pos[0], m, rows, nil
}

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", "SWEEP", "Checks a sweep file and prints what it would run.", stderr)
	dir := fs.String("sweeps", filepath.Join("configs", "sweeps"), "`directory` where a sweep NAME is looked up")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("validate needs exactly one sweep file")
	}
	sw, path, err := loadSweep(pos[0], *dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: sweep %q, %d units x %d caches = %d rows, fingerprint %s\n",
		path, sw.Name, sw.Units(), len(sw.Caches), sw.Rows(), sw.Fingerprint())
	return nil
}
