package counters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"rnnserve/cachesim"
)

// Valgrind tools.
const (
	// Callgrind with --cache-sim=yes --simulate-wb=yes counts the LL's
	// dirty evictions, the write-backs; the default.
	Callgrind = "callgrind"
	// CachegrindTool counts LL misses only: no write-back traffic.
	CachegrindTool = "cachegrind"
)

// Defaults of ValgrindOptions.
const (
	// DefaultValgrindWays is the associativity given to an LL that is
	// fully associative in the model: valgrind searches a set linearly,
	// so hundreds of thousands of ways would make it crawl.
	DefaultValgrindWays = 16
	// MaxValgrindWays bounds the associativity LegalLL keeps.
	MaxValgrindWays = 64
)

// DefaultL1 is the 32 KiB, 8-way, 64-byte-line L1 (data and instruction)
// valgrind is told to simulate, so that its results do not depend on the
// host it runs on.
func DefaultL1() cachesim.Config { return cachesim.Config{Size: 32 << 10, LineSize: 64, Ways: 8} }

// ValgrindOptions configure valgrind runs. Zero values mean the defaults.
type ValgrindOptions struct {
	// Path is the valgrind executable; "" looks "valgrind" up on PATH.
	Path string
	// Tool is Callgrind (the default) or CachegrindTool.
	Tool string
	// LL is the last-level cache to simulate: its number of sets must be a
	// power of two (LegalLL finds the nearest such cache).
	LL cachesim.Config
	// D1 and I1 are the first-level caches; zero means DefaultL1.
	D1, I1 cachesim.Config
	// Dir receives the output files; "" means a temporary directory,
	// removed afterwards.
	Dir string
	// Env is added to the environment of the program valgrind runs.
	Env []string
}

// EnsureDefaults fills zero values with their defaults.
func (o *ValgrindOptions) EnsureDefaults() {
	if o.Tool == "" {
		o.Tool = Callgrind
	}
	if o.D1 == (cachesim.Config{}) {
		o.D1 = DefaultL1()
	}
	if o.I1 == (cachesim.Config{}) {
		o.I1 = DefaultL1()
	}
	for _, c := range []*cachesim.Config{&o.LL, &o.D1, &o.I1} {
		if c.LineSize == 0 {
			c.LineSize = cachesim.DefaultLineSize
		}
	}
}

// Validate reports the first setting valgrind would refuse.
func (o ValgrindOptions) Validate() error {
	if o.Tool != Callgrind && o.Tool != CachegrindTool {
		return fmt.Errorf("%w: valgrind tool %q (want %s or %s)", ErrInvalidOptions, o.Tool, Callgrind, CachegrindTool)
	}
	for _, c := range []struct {
		name string
		cfg  cachesim.Config
	}{{"LL", o.LL}, {"D1", o.D1}, {"I1", o.I1}} {
		if err := c.cfg.Validate(); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, c.name, err)
		}
		if sets := c.cfg.Sets(); bits.OnesCount64(uint64(sets)) != 1 {
			return fmt.Errorf("%w: %s: %d sets; valgrind needs a power of two (see LegalLL)", ErrInvalidOptions, c.name, sets)
		}
	}
	return nil
}

// LegalLL returns the cache valgrind can simulate that is nearest to c,
// and a sentence saying how it differs ("" when it is c). Valgrind needs
// a power-of-two number of sets, and its cost grows with the ways. The
// size is kept when some power-of-two number of sets divides it into
// between half and twice the wanted ways (16 for a fully associative c,
// at most MaxValgrindWays), taking the ways nearest the wanted ones;
// otherwise the ways are kept and the size rounded to the nearest
// power-of-two number of sets.
func LegalLL(c cachesim.Config) (cachesim.Config, string) {
	if c.LineSize == 0 {
		c.LineSize = cachesim.DefaultLineSize
	}
	lines := c.Size / c.LineSize
	want := c.Ways
	if want == cachesim.FullyAssociative || want <= 0 || int64(want) >= lines || want > MaxValgrindWays {
		want = DefaultValgrindWays
	}
	if c.Ways != cachesim.FullyAssociative && c.Ways > 0 && c.Sets() > 0 && bits.OnesCount64(uint64(c.Sets())) == 1 && c.Ways <= MaxValgrindWays {
		return c, ""
	}
	best := 0
	for sets := int64(1); sets <= lines; sets *= 2 {
		if lines%sets != 0 {
			break
		}
		w := int(lines / sets)
		if best == 0 || absInt(w-want) < absInt(best-want) || absInt(w-want) == absInt(best-want) && w > best {
			best = w
		}
	}
	out := c
	if best >= (want+1)/2 && best <= 2*want && best <= MaxValgrindWays {
		out.Ways = best
	} else {
		sets := int64(1) << max(0, bits.Len64(uint64(max(lines/int64(want), 1)))-1) // power of two <= lines/want
		if up := sets * 2; up*int64(want)-lines < lines-sets*int64(want) {
			sets = up
		}
		out.Ways = want
		out.Size = sets * int64(want) * c.LineSize
	}
	return out, fmt.Sprintf("valgrind needs a power-of-two number of sets: the %s LL is simulated as %s",
		describe(c), describe(out))
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// describe formats a cache as "12 MiB fully associative" or
// "12 MiB 12-way (16384 sets)".
func describe(c cachesim.Config) string {
	size := strconv.FormatInt(c.Size, 10) + " B"
	switch {
	case c.Size%(1<<20) == 0:
		size = fmt.Sprintf("%d MiB", c.Size>>20)
	case c.Size%(1<<10) == 0:
		size = fmt.Sprintf("%d KiB", c.Size>>10)
	}
	if c.Ways == cachesim.FullyAssociative || c.LineSize > 0 && int64(c.Ways) == c.Size/c.LineSize {
		return size + " fully associative"
	}
	if c.Ways <= 0 || c.LineSize <= 0 {
		return size
	}
	return fmt.Sprintf("%s %d-way (%d sets)", size, c.Ways, c.Size/c.LineSize/int64(c.Ways))
}

// Valgrind runs programs under valgrind's cache simulation.
type Valgrind struct {
	opt  ValgrindOptions
	path string
}

// NewValgrind finds valgrind and checks opt. Without valgrind it returns
// an *UnavailableError whose cause is ErrNoValgrind.
func NewValgrind(opt ValgrindOptions) (*Valgrind, error) {
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	path, err := LookValgrind(opt.Path)
	if err != nil {
		return nil, err
	}
	return &Valgrind{opt: opt, path: path}, nil
}

// LookValgrind finds the valgrind executable: path, or "valgrind" on PATH
// when path is "". Without it, it returns an *UnavailableError whose cause
// is ErrNoValgrind.
func LookValgrind(path string) (string, error) {
	if path == "" {
		path = "valgrind"
	}
	found, err := exec.LookPath(path)
	if err != nil {
		return "", unavailable(Cachegrind, "", ErrNoValgrind, "%v (Debian: apt-get install valgrind)", err)
	}
	return found, nil
}

// Options returns the options in use, defaults applied.
func (v *Valgrind) Options() ValgrindOptions { return v.opt }

// ErrValgrind is wrapped when valgrind or the program under it fails.
var ErrValgrind = errors.New("counters: valgrind run failed")

// Run runs argv (the program and its arguments) under valgrind and
// returns the totals of its output file.
func (v *Valgrind) Run(ctx context.Context, argv ...string) (*ValgrindTotals, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no program", ErrValgrind)
	}
	dir := v.opt.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "rnnserve-valgrind-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	f, err := os.CreateTemp(dir, v.opt.Tool+".out.")
	if err != nil {
		return nil, err
	}
	out := f.Name()
	f.Close()
	cache := func(c cachesim.Config) string {
		return fmt.Sprintf("%d,%d,%d", c.Size, c.Ways, c.LineSize)
	}
	args := []string{"--tool=" + v.opt.Tool, "--cache-sim=yes",
		"--I1=" + cache(v.opt.I1), "--D1=" + cache(v.opt.D1), "--LL=" + cache(v.opt.LL)}
	if v.opt.Tool == Callgrind {
		args = append(args, "--simulate-wb=yes", "--callgrind-out-file="+out)
	} else {
		args = append(args, "--cachegrind-out-file="+out)
	}
	cmd := exec.CommandContext(ctx, v.path, append(args, argv...)...)
	cmd.Env = GoUnderValgrind(append(os.Environ(), v.opt.Env...))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s %q: %w\n%s", ErrValgrind, filepath.Base(v.path), argv, err, headTail(stderr.Bytes(), 1500))
	}
	rf, err := os.Open(out)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValgrind, err)
	}
	defer rf.Close()
	t, err := ParseValgrindOutput(rf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	if t.LL != (CacheDesc{}) && (t.LL.Size != v.opt.LL.Size || t.LL.LineSize != v.opt.LL.LineSize || t.LL.Ways != v.opt.LL.Ways) {
		return nil, fmt.Errorf("%w: valgrind simulated an LL of %+v, not the %+v asked for", ErrValgrind, t.LL, v.opt.LL)
	}
	return t, nil
}

// headTail keeps the first and last n bytes of b.
func headTail(b []byte, n int) string {
	if len(b) <= 2*n {
		return string(b)
	}
	return string(b[:n]) + "\n[...]\n" + string(b[len(b)-n:])
}

// ValgrindTraffic is the DRAM traffic valgrind's simulated LL implies:
// every LL miss fills a line, every eviction of a dirty line writes one.
type ValgrindTraffic struct {
	ReadBytes  float64 // (ILmr + DLmr + DLmw) × line size
	WriteBytes float64 // (ILdmr + DLdmr + DLdmw) × line size: callgrind only
	Writes     bool    // WriteBytes was counted (callgrind --simulate-wb=yes)
	CodeBytes  float64 // the instruction part of ReadBytes, ILmr × line size
	LLMisses   float64 // ILmr + DLmr + DLmw
	D1Misses   float64 // D1mr + D1mw: what the LL saw of the data
	DataRefs   float64 // Dr + Dw
}

// RW is ReadBytes + WriteBytes.
func (t ValgrindTraffic) RW() float64 { return t.ReadBytes + t.WriteBytes }

// Traffic derives the DRAM traffic of t, an LL of lineSize-byte lines.
func (t *ValgrindTotals) Traffic(lineSize int64) (ValgrindTraffic, error) {
	var tr ValgrindTraffic
	ls := float64(lineSize)
	fills, ok := t.sum("ILmr", "DLmr", "DLmw")
	if !ok {
		return tr, fmt.Errorf("%w: no LL miss counts (events %q): was --cache-sim=yes given?", ErrValgrindOutput, t.Events)
	}
	code, _ := t.Get("ILmr")
	d1, _ := t.sum("D1mr", "D1mw")
	refs, _ := t.sum("Dr", "Dw")
	tr.LLMisses, tr.ReadBytes, tr.CodeBytes = float64(fills), float64(fills)*ls, float64(code)*ls
	tr.D1Misses, tr.DataRefs = float64(d1), float64(refs)
	if wb, ok := t.sum("ILdmr", "DLdmr", "DLdmw"); ok {
		tr.WriteBytes, tr.Writes = float64(wb)*ls, true
	}
	return tr, nil
}

// SteadyState is a program's per-run traffic under valgrind, from two
// runs of it that differ only in how many times they repeat the work.
type SteadyState struct {
	Runs      int // repetitions in the longer run (the shorter has 1)
	One, Many ValgrindTraffic
	// PerRun is (Many - One) / (Runs - 1): one repetition after the
	// first, with the program's start-up, set-up and first (cold)
	// repetition cancelled out.
	PerRun ValgrindTraffic
}

// MeasureSteadyState runs argv(1) and argv(runs) under v and returns the
// difference per extra repetition. runs must be at least 2.
func (v *Valgrind) MeasureSteadyState(ctx context.Context, runs int, argv func(runs int) []string) (*SteadyState, error) {
	if runs < 2 {
		return nil, fmt.Errorf("%w: %d runs: the steady state needs at least 2", ErrInvalidOptions, runs)
	}
	s := &SteadyState{Runs: runs}
	for _, r := range []struct {
		n   int
		dst *ValgrindTraffic
	}{{1, &s.One}, {runs, &s.Many}} {
		t, err := v.Run(ctx, argv(r.n)...)
		if err != nil && ctx.Err() == nil {
			// Valgrind 3.19 now and then dies of an internal error while
			// the Go runtime starts its threads; a second try is cheap.
			var again error
			if t, again = v.Run(ctx, argv(r.n)...); again != nil {
				err = errors.Join(err, fmt.Errorf("and again: %w", again))
			} else {
				err = nil
			}
		}
		if err != nil {
			return nil, err
		}
		if *r.dst, err = t.Traffic(v.opt.LL.LineSize); err != nil {
			return nil, err
		}
	}
	k := 1 / float64(runs-1)
	d := func(a, b float64) float64 { return (a - b) * k }
	s.PerRun = ValgrindTraffic{
		ReadBytes: d(s.Many.ReadBytes, s.One.ReadBytes), WriteBytes: d(s.Many.WriteBytes, s.One.WriteBytes),
		Writes: s.Many.Writes, CodeBytes: d(s.Many.CodeBytes, s.One.CodeBytes),
		LLMisses: d(s.Many.LLMisses, s.One.LLMisses), D1Misses: d(s.Many.D1Misses, s.One.D1Misses),
		DataRefs: d(s.Many.DataRefs, s.One.DataRefs),
	}
	return s, nil
}

// GoUnderValgrind returns env (KEY=value entries, the last of a key
// winning, as os/exec takes them) with cpu.rdtscp=off added to GODEBUG.
// Valgrind's CPU (its emulated CPUID) offers RDTSCP whatever the host,
// but valgrind decodes the instruction only where the host has it; the
// Go runtime reads its clock with RDTSCP where CPUID offers it, so a Go
// program under valgrind on a host without RDTSCP (virtual machines that
// hide it, as one of the project's AMD VMs does) dies on an unrecognised
// instruction. Without it the runtime uses LFENCE and RDTSC, which
// valgrind decodes everywhere.
func GoUnderValgrind(env []string) []string {
	const off = "cpu.rdtscp=off"
	godebug := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			godebug = v
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(slices.Clone(env), "GODEBUG="+godebug+off)
}
