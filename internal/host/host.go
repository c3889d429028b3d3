// Package host describes the machine the process runs on: its CPU's model
// and the instructions the kernels may use, and its caches as Linux
// describes them in sysfs (size, line, ways, which CPUs share each). The
// kernels' blocking, the partitioned schedule's bounds, the server's
// traffic model and cmd/roofline all take their cache sizes from here,
// read once per process (Get), so that nothing assumes the CPU the code
// was tuned on.
//
// Some virtual machines list no caches in sysfs. Get then asks the CPU
// (CPUID, through github.com/klauspost/cpuid/v2): a core's L1d and L2
// come out right on the hosts seen, but a hypervisor may report the L3
// of the whole package or none, so an L3 that CPUID's per-cache leaves
// (Intel's leaf 4, AMD's 0x8000001D) do not give is assumed
// (DefaultL3), never taken from AMD's package-wide 0x80000006. The
// environment variable RNNSERVE_HOST_CACHES (for example
// "l1d=48K,l2=1M,l3=32M") overrides any of the three for such hosts.
package host

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/cpu"
)

// Cache is one cache of CPU 0.
type Cache struct {
	Level int
	Type  string // Data, Instruction or Unified
	Bytes int64
	// LineBytes and Ways are 0 where sysfs does not say.
	LineBytes int
	Ways      int
	// SharedBy is the number of CPUs (logical, SMT siblings counted)
	// that share the cache, 0 where sysfs does not say.
	SharedBy int
	// Private is true for a cache no other core shares: the CPUs of its
	// shared_cpu_list are all SMT siblings of CPU 0
	// (topology/thread_siblings_list). Where sysfs does not list the
	// sharing CPUs, every level below the highest counts as private.
	Private bool
	// From says where the size came from when not from sysfs: FromCPUID,
	// FromAssumed or FromEnv.
	From string
}

// Where a cache's size came from, when sysfs did not list it.
const (
	FromCPUID   = "CPUID"
	FromAssumed = "assumed"
	FromEnv     = "RNNSERVE_HOST_CACHES"
)

// Description is what the process knows of its host.
type Description struct {
	// Model is the CPU's model name (/proc/cpuinfo), Vendor its vendor
	// id (GenuineIntel, AuthenticAMD), Family and ModelNumber its family
	// and model numbers; empty or 0 where not known.
	Model       string
	Vendor      string
	Family      int
	ModelNumber int
	// Features are the instruction sets the kernels choose between, as
	// the CPU and the operating system grant them (golang.org/x/sys/cpu):
	// avx2, fma, avx512f, avx512bw, avx512vl, avx512dq, avx512bf16,
	// avx512vnni, avxvnni; and amx-tile, amx-bf16, amx-int8 as CPUID
	// reports them, for the report only: no kernel uses AMX, and using it
	// would also take the kernel's grant (on Linux, arch_prctl
	// ARCH_REQ_XCOMP_PERM for XTILEDATA), which nothing asks for
	// (docs/performance.md, "AMX").
	Features []string
	// Caches are CPU 0's caches, smallest level first. Read leaves them
	// nil when sysfs has none (CacheErr says why); Get then fills them
	// from CPUID and the defaults, and applies RNNSERVE_HOST_CACHES.
	Caches   []Cache
	CacheErr error
	// EnvErr is why RNNSERVE_HOST_CACHES was refused (Get ignores it
	// then; cmd/serve refuses to start).
	EnvErr error
}

// Sizes assumed where the host does not say: a core's L1d and L2 and the
// shared last level of the smallest machines the project runs on.
const (
	DefaultL1D = 32 << 10
	DefaultL2  = 1 << 20
	DefaultL3  = 12 << 20
)

// Get returns this host's description, read on the first call.
func Get() *Description { return get() }

var get = sync.OnceValue(func() *Description {
	d := Read("/")
	d.Features = features()
	if d.Caches == nil {
		d.Caches = fromCPUID(cpuidSizes())
	}
	if s := os.Getenv(EnvCaches); s != "" {
		d.EnvErr = d.Override(s)
	}
	return d
})

// Read describes the host whose /proc and /sys are under root ("/" on a
// real host; tests pass a directory of their own). Features are left
// empty: they come from the CPU, not from files.
func Read(root string) *Description {
	d := &Description{}
	d.Caches, d.CacheErr = readCaches(root)
	f, err := os.Open(filepath.Join(root, "proc/cpuinfo"))
	if err != nil {
		return d
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			if strings.TrimSpace(sc.Text()) == "" && d.Model != "" {
				break // the first processor's block is enough
			}
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "model name":
			d.Model = val
		case "vendor_id":
			d.Vendor = val
		case "cpu family":
			d.Family, _ = strconv.Atoi(val)
		case "model":
			d.ModelNumber, _ = strconv.Atoi(val)
		}
	}
	return d
}

func features() []string {
	x := cpu.X86
	var fs []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"avx2", x.HasAVX2}, {"fma", x.HasFMA}, {"avx512f", x.HasAVX512F}, {"avx512bw", x.HasAVX512BW},
		{"avx512vl", x.HasAVX512VL}, {"avx512dq", x.HasAVX512DQ}, {"avx512bf16", x.HasAVX512BF16},
		{"avx512vnni", x.HasAVX512VNNI}, {"avxvnni", x.HasAVXVNNI}, {"amx-tile", x.HasAMXTile},
		{"amx-bf16", x.HasAMXBF16}, {"amx-int8", x.HasAMXInt8},
	} {
		if f.has {
			fs = append(fs, f.name)
		}
	}
	return fs
}

// Has reports whether the host has the named feature (Features).
func (d *Description) Has(feature string) bool { return slices.Contains(d.Features, feature) }

// L1D is the size of a core's L1 data cache, or DefaultL1D when unknown.
func (d *Description) L1D() int64 {
	for _, c := range d.Caches {
		if c.Level == 1 && c.Type != "Instruction" {
			return c.Bytes
		}
	}
	return DefaultL1D
}

// L2 is the size of the largest data or unified cache private to a core
// (its L2 on most hosts), or DefaultL2 when there is none or none is
// known.
func (d *Description) L2() int64 {
	if c, ok := d.private(); ok {
		return c.Bytes
	}
	return DefaultL2
}

func (d *Description) private() (Cache, bool) {
	var best Cache
	for _, c := range d.Caches {
		if c.Type != "Instruction" && c.Private && (c.Level > best.Level || c.Level == best.Level && c.Bytes > best.Bytes) {
			best = c
		}
	}
	return best, best.Bytes > 0
}

// LastLevel is the highest-level data or unified cache, shared by
// several cores on most hosts; ok is false when no cache is known.
func (d *Description) LastLevel() (c Cache, ok bool) {
	for _, l := range d.Caches {
		if l.Type != "Instruction" && l.Level >= c.Level {
			c = l
		}
	}
	return c, c.Bytes > 0
}

// L3 is the size of the last-level cache, or DefaultL3 when unknown.
func (d *Description) L3() int64 {
	if c, ok := d.LastLevel(); ok {
		return c.Bytes
	}
	return DefaultL3
}

// LastLevelCores is the number of cores that share the last-level cache
// (its CPUs over the SMT threads of a core, as the private cache's
// sharing says), or 0 when sysfs does not say. A virtual machine's sysfs
// counts only its own CPUs.
func (d *Description) LastLevelCores() int {
	llc, ok := d.LastLevel()
	if !ok || llc.SharedBy == 0 {
		return 0
	}
	threads := 1
	if p, ok := d.private(); ok && p.SharedBy > 0 {
		threads = p.SharedBy
	}
	return max(1, llc.SharedBy/threads)
}

// L2Ways is the associativity of the private cache L2 names, or 8 when
// unknown.
func (d *Description) L2Ways() int {
	if c, ok := d.private(); ok && c.Ways > 0 {
		return c.Ways
	}
	return 8
}

// String is one line for logs and reports: the CPU and its caches.
func (d *Description) String() string {
	model := d.Model
	if model == "" {
		model = "unknown CPU"
	}
	var cs []string
	for _, c := range d.Caches {
		if c.Type == "Instruction" {
			continue
		}
		s := fmt.Sprintf("L%d %s", c.Level, Size(c.Bytes))
		switch {
		case c.Private:
			s += " per core"
		case c.SharedBy > 0:
			s += fmt.Sprintf(" shared by %d CPUs", c.SharedBy)
		}
		switch c.From {
		case "":
		case FromAssumed:
			s += " assumed"
		default:
			s += " from " + c.From
		}
		cs = append(cs, s)
	}
	if len(cs) == 0 {
		cs = append(cs, "caches unknown")
	}
	return fmt.Sprintf("%s (%s)", model, strings.Join(cs, ", "))
}

// Size formats a byte count as KiB, MiB or GiB where it is a whole one.
func Size(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}
