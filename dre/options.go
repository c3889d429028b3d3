package dre

import (
	"errors"
	"fmt"
	"math"

	"rnnserve/cachesim"
)

// Defaults applied by Options.EnsureDefaults.
const (
	// DefaultCacheSize is the 12 MB LRU cache of the paper's analytical
	// model (Section V), "chosen to mimic a modern day mobile SoC".
	DefaultCacheSize = 12 << 20
	// DefaultRuns is the number of back-to-back inferences the paper
	// averaged its measurements over.
	DefaultRuns = 100
	// DefaultOPTMaxAccesses bounds the line trace built for the MIN bound
	// (about 16 bytes per access, so some 800 MB at the limit).
	DefaultOPTMaxAccesses = 50_000_000
	// MaxRuns bounds Options.Runs.
	MaxRuns = 1_000_000
)

// ErrInvalidOptions is wrapped by every error Options.Validate returns.
var ErrInvalidOptions = errors.New("dre: invalid options")

// Options configure Analyze. Zero values mean the defaults; call
// EnsureDefaults and then Validate, or let Analyze do both.
type Options struct {
	// Cache is the simulated last-level cache. A zero Size means
	// DefaultCacheSize and a zero LineSize cachesim.DefaultLineSize; a zero
	// Ways means fully associative, the paper's model (unlike
	// cachesim.Config, whose default is set-associative).
	Cache cachesim.Config
	// Runs is the number of back-to-back inferences AvgRW averages over;
	// zero means DefaultRuns.
	Runs int
	// OPT adds Belady's MIN bound to the report when the trace for it has
	// at most OPTMaxAccesses line accesses (zero means
	// DefaultOPTMaxAccesses).
	OPT            bool
	OPTMaxAccesses int64
	// PrivateCache, when its Size is set, is one core's private cache:
	// Analyze then also replays each worker's steps through a cache of
	// this size (Report.Workers). Zero Ways means fully associative here
	// too.
	PrivateCache cachesim.Config
}

// DefaultOptions returns the paper's setting: a 12 MiB fully associative
// LRU with 64-byte lines, 100 runs, and the MIN bound when it is cheap
// enough.
func DefaultOptions() Options {
	o := Options{OPT: true}
	o.EnsureDefaults()
	return o
}

// EnsureDefaults replaces zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Cache.Size == 0 {
		o.Cache.Size = DefaultCacheSize
	}
	if o.Cache.Ways == 0 {
		o.Cache.Ways = cachesim.FullyAssociative
	}
	o.Cache.EnsureDefaults()
	if o.Runs == 0 {
		o.Runs = DefaultRuns
	}
	if o.OPTMaxAccesses == 0 {
		o.OPTMaxAccesses = DefaultOPTMaxAccesses
	}
	if o.PrivateCache.Size > 0 {
		if o.PrivateCache.Ways == 0 {
			o.PrivateCache.Ways = cachesim.FullyAssociative
		}
		o.PrivateCache.EnsureDefaults()
	}
}

// Validate reports the first invalid setting. It does not apply defaults.
func (o Options) Validate() error {
	if err := o.Cache.Validate(); err != nil {
		return fmt.Errorf("%w: cache: %w", ErrInvalidOptions, err)
	}
	if o.Runs < 1 || o.Runs > MaxRuns {
		return fmt.Errorf("%w: Runs = %d, want 1..%d", ErrInvalidOptions, o.Runs, MaxRuns)
	}
	if o.PrivateCache.Size > 0 {
		if err := o.PrivateCache.Validate(); err != nil {
			return fmt.Errorf("%w: private cache: %w", ErrInvalidOptions, err)
		}
	}
	if o.OPTMaxAccesses < 1 || o.OPTMaxAccesses >= math.MaxInt32 {
		return fmt.Errorf("%w: OPTMaxAccesses = %d, want 1..%d", ErrInvalidOptions, o.OPTMaxAccesses, math.MaxInt32-1)
	}
	return nil
}
