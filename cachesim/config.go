package cachesim

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Defaults applied by Config.EnsureDefaults.
const (
	DefaultLineSize = 64 // bytes
	DefaultWays     = 16
)

// FullyAssociative as Config.Ways makes every line of the cache one set.
// Ways equal to the number of lines means the same.
const FullyAssociative = -1

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("cachesim: invalid config")

// Config describes one cache level.
//
// The zero value of LineSize and Ways means the default; call EnsureDefaults
// and then Validate, or let NewLRU do both.
type Config struct {
	// Size is the capacity in bytes, a positive multiple of LineSize.
	Size int64
	// LineSize is the line (block) size in bytes, a power of two.
	// Zero means DefaultLineSize.
	LineSize int64
	// Ways is the associativity: the number of lines per set. It must
	// divide Size/LineSize. Zero means DefaultWays; FullyAssociative (or
	// Ways == Size/LineSize) means one set.
	//
	// The number of sets need not be a power of two (a 12 MiB 16-way cache
	// has 12288 sets): line L goes to set L mod sets. Real caches whose
	// set count is not a power of two hash addresses to slices instead,
	// which this model does not try to copy.
	Ways int
}

// EnsureDefaults replaces zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.LineSize == 0 {
		c.LineSize = DefaultLineSize
	}
	if c.Ways == 0 {
		c.Ways = DefaultWays
	}
}

// Validate reports the first invalid field, naming it and its value. It
// does not apply defaults: a zero LineSize or Ways is an error here.
func (c Config) Validate() error {
	if err := validateLineSize(c.LineSize); err != nil {
		return err
	}
	switch {
	case c.Size <= 0:
		return fmt.Errorf("%w: Size %d is not positive", ErrInvalidConfig, c.Size)
	case c.Size < c.LineSize:
		return fmt.Errorf("%w: Size %d is smaller than one line (LineSize %d)", ErrInvalidConfig, c.Size, c.LineSize)
	case c.Size%c.LineSize != 0:
		return fmt.Errorf("%w: Size %d is not a multiple of LineSize %d", ErrInvalidConfig, c.Size, c.LineSize)
	}
	lines := c.Size / c.LineSize
	if lines > math.MaxInt32 {
		return fmt.Errorf("%w: Size %d holds %d lines, more than %d", ErrInvalidConfig, c.Size, lines, math.MaxInt32)
	}
	switch {
	case c.Ways == FullyAssociative:
	case c.Ways <= 0:
		return fmt.Errorf("%w: Ways %d is neither positive nor FullyAssociative", ErrInvalidConfig, c.Ways)
	case int64(c.Ways) > lines:
		return fmt.Errorf("%w: Ways %d exceeds the %d lines of Size %d", ErrInvalidConfig, c.Ways, lines, c.Size)
	case lines%int64(c.Ways) != 0:
		return fmt.Errorf("%w: Ways %d does not divide the %d lines of Size %d", ErrInvalidConfig, c.Ways, lines, c.Size)
	}
	return nil
}

// Lines is the number of lines the cache holds.
func (c Config) Lines() int64 { return c.Size / c.LineSize }

// Sets is the number of sets: 1 when fully associative.
func (c Config) Sets() int64 {
	if c.Ways == FullyAssociative {
		return 1
	}
	return c.Lines() / int64(c.Ways)
}

func validateLineSize(lineSize int64) error {
	if lineSize <= 0 || bits.OnesCount64(uint64(lineSize)) != 1 {
		return fmt.Errorf("%w: LineSize %d is not a positive power of two", ErrInvalidConfig, lineSize)
	}
	return nil
}

// lineShift returns log2(lineSize) for a valid line size.
func lineShift(lineSize int64) uint {
	return uint(bits.TrailingZeros64(uint64(lineSize)))
}

// lineRange returns the first and last line touched by n bytes at addr, and
// false if n is zero. Negative addresses or lengths, and ranges past the end
// of the address space, are programmer errors.
func lineRange(addr, n int64, shift uint) (first, last uint64, ok bool) {
	if addr < 0 || n < 0 || addr > math.MaxInt64-n {
		panic("cachesim: negative or overflowing byte range")
	}
	if n == 0 {
		return 0, 0, false
	}
	return uint64(addr) >> shift, uint64(addr+n-1) >> shift, true
}
