package host

import (
	"fmt"
	"slices"
	"strings"

	"github.com/klauspost/cpuid/v2"
)

// EnvCaches is the environment variable that overrides the cache sizes
// the host reports or hides: comma-separated l1d=, l2= and l3= with
// sizes as sysfs writes them ("48K", "1M", "32M" or bytes).
const EnvCaches = "RNNSERVE_HOST_CACHES"

// maxEnvCaches bounds the override's length: three sizes fit in far less.
const maxEnvCaches = 256

// cpuidCaches are the sizes CPUID gives, 0 or less where it gives none.
type cpuidCaches struct{ L1D, L1I, L2, L3, Line int }

// cpuidSizes asks this CPU; tests call fromCPUID with sizes of their own.
func cpuidSizes() cpuidCaches {
	c := cpuid.CPU.Cache
	return cpuidCaches{L1D: c.L1D, L1I: c.L1I, L2: c.L2, L3: c.L3, Line: cpuid.CPU.CacheLine}
}

// fromCPUID lists caches from CPUID's sizes for a host whose sysfs has
// none: L1d and L2 private to the core, L3 shared; a level CPUID does not
// give is assumed at its default size (FromAssumed). The instruction
// cache is listed only when given.
func fromCPUID(s cpuidCaches) []Cache {
	level := func(lvl int, typ string, size int, def int64, private bool) Cache {
		c := Cache{Level: lvl, Type: typ, Bytes: int64(size), Private: private, From: FromCPUID}
		if s.Line > 0 {
			c.LineBytes = s.Line
		}
		if size <= 0 {
			c.Bytes, c.From = def, FromAssumed
		}
		return c
	}
	caches := []Cache{level(1, "Data", s.L1D, DefaultL1D, true)}
	if s.L1I > 0 {
		caches = append(caches, level(1, "Instruction", s.L1I, 0, true))
	}
	return append(caches, level(2, "Unified", s.L2, DefaultL2, true), level(3, "Unified", s.L3, DefaultL3, false))
}

// Assumed lists the data cache levels whose size the host did not give
// ("L3"), nil when it gave them all (or RNNSERVE_HOST_CACHES did).
func (d *Description) Assumed() []string {
	var levels []string
	for _, c := range d.Caches {
		if c.From == FromAssumed {
			levels = append(levels, fmt.Sprintf("L%d", c.Level))
		}
	}
	if len(d.Caches) == 0 {
		levels = []string{"L1d", "L2", "L3"}
	}
	return levels
}

// CheckEnv reports, for a program about to start, whether value, the
// environment's RNNSERVE_HOST_CACHES ("" when unset), is an override this
// host accepts (Override on a copy of Get's description). Get ignores a
// refused one and goes on with the host's own sizes; the programs refuse
// to start instead.
func CheckEnv(value string) error {
	if value == "" {
		return nil
	}
	d := *Get()
	d.Caches = slices.Clone(d.Caches)
	if err := d.Override(value); err != nil {
		return fmt.Errorf("environment variable %w", err)
	}
	return nil
}

// Override sets cache sizes from s, RNNSERVE_HOST_CACHES' syntax
// ("l1d=48K,l2=1M,l3=32M", any of the three). It checks all of s before
// it changes anything: each key at most once, sizes whole multiples of
// the 64-byte line from 4 KiB to 1 TiB, and L1d <= L2 <= L3 once set.
func (d *Description) Override(s string) error {
	if len(s) > maxEnvCaches {
		return fmt.Errorf("%s: %d bytes, at most %d", EnvCaches, len(s), maxEnvCaches)
	}
	sizes := map[string]int64{}
	for _, part := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || (key != "l1d" && key != "l2" && key != "l3") {
			return fmt.Errorf("%s: %q, want l1d=, l2= or l3= (as in l1d=48K,l2=1M,l3=32M)", EnvCaches, part)
		}
		if _, dup := sizes[key]; dup {
			return fmt.Errorf("%s: %s given twice", EnvCaches, key)
		}
		n, err := parseCacheSize(val)
		if err != nil || n < 4<<10 || n%64 != 0 {
			return fmt.Errorf("%s: %s=%q, want a size from 4K to 1024G, a multiple of 64 bytes", EnvCaches, key, val)
		}
		sizes[key] = n
	}
	l1, l2, l3 := d.L1D(), d.L2(), d.L3()
	if n, ok := sizes["l1d"]; ok {
		l1 = n
	}
	if n, ok := sizes["l2"]; ok {
		l2 = n
	}
	if n, ok := sizes["l3"]; ok {
		l3 = n
	}
	if l1 > l2 || l2 > l3 {
		return fmt.Errorf("%s: L1d %s, L2 %s, L3 %s: want each at most the next", EnvCaches, Size(l1), Size(l2), Size(l3))
	}
	set := func(key string, match func(Cache) bool, add Cache) {
		n, ok := sizes[key]
		if !ok {
			return
		}
		for i := range d.Caches {
			if d.Caches[i].Type != "Instruction" && match(d.Caches[i]) {
				d.Caches[i].Bytes, d.Caches[i].From = n, FromEnv
				return
			}
		}
		add.Bytes, add.From = n, FromEnv
		d.Caches = append(d.Caches, add)
	}
	set("l1d", func(c Cache) bool { return c.Level == 1 }, Cache{Level: 1, Type: "Data", Private: true})
	set("l2", func(c Cache) bool { return c.Level == 2 }, Cache{Level: 2, Type: "Unified", Private: true})
	set("l3", func(c Cache) bool { return c.Level >= 3 }, Cache{Level: 3, Type: "Unified"})
	sortCaches(d.Caches)
	return nil
}
