package host

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/childtest"
	"rnnserve/internal/fuzzbound"
)

// fakeRoot writes CPU 0's cache levels (and its SMT siblings, unless
// empty) and a /proc/cpuinfo under a new root and returns it. Each level
// is level, type, size, shared_cpu_list and ways ("" leaves the file out).
func fakeRoot(t *testing.T, siblings, cpuinfo string, levels [][5]string) string {
	t.Helper()
	root := t.TempDir()
	cpu0 := filepath.Join(root, "sys/devices/system/cpu/cpu0")
	write := func(path, data string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if siblings != "" {
		write(filepath.Join(cpu0, "topology/thread_siblings_list"), siblings)
	}
	if cpuinfo != "" {
		write(filepath.Join(root, "proc/cpuinfo"), cpuinfo)
	}
	for i, l := range levels {
		d := filepath.Join(cpu0, "cache", "index"+string(rune('0'+i)))
		write(filepath.Join(d, "level"), l[0])
		write(filepath.Join(d, "type"), l[1])
		write(filepath.Join(d, "size"), l[2])
		write(filepath.Join(d, "coherency_line_size"), "64")
		if l[3] != "" {
			write(filepath.Join(d, "shared_cpu_list"), l[3])
		}
		if l[4] != "" {
			write(filepath.Join(d, "ways_of_associativity"), l[4])
		}
	}
	return root
}

const xeonInfo = `processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 143
model name	: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz

processor	: 1
model name	: something else
`

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name              string
		siblings, cpuinfo string
		levels            [][5]string
		l1, l2, l3        int64
		ways              int
		privateLevels     int
		cores             int // sharing the last level; -1: not checked
		str               string
	}{
		{
			"the project's AMD VM: L2 per core, L3 shared",
			"0", "",
			[][5]string{{"1", "Data", "32K", "0", "8"}, {"1", "Instruction", "32K", "0", "8"}, {"2", "Unified", "1024K", "0", "8"}, {"3", "Unified", "32768K", "0-1", "16"}},
			32 << 10, 1 << 20, 32 << 20, 8, 3, 2,
			"unknown CPU (L1 32 KiB per core, L2 1 MiB per core, L3 32 MiB shared by 2 CPUs)",
		},
		{
			"Xeon with SMT: L2 shared by the core's two threads",
			"0,64", xeonInfo,
			[][5]string{{"1", "Data", "48K", "0,64", "12"}, {"2", "Unified", "2048K", "0,64", "16"}, {"3", "Unified", "105M", "0-31,64-95", "15"}},
			48 << 10, 2 << 20, 105 << 20, 16, 2, 32,
			"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (L1 48 KiB per core, L2 2 MiB per core, L3 105 MiB shared by 64 CPUs)",
		},
		{
			"L2 shared by a cluster of cores: only L1d is private",
			"0", "",
			[][5]string{{"1", "Data", "32K", "0", ""}, {"2", "Unified", "4M", "0-3", ""}, {"3", "Unified", "16M", "0-15", ""}},
			32 << 10, 32 << 10, 16 << 20, 8, 1, 16, "",
		},
		{
			"no sharing information: the levels below the last",
			"", "",
			[][5]string{{"1", "Data", "32K", "", ""}, {"2", "Unified", "512K", "", ""}, {"3", "Unified", "8M", "", ""}},
			32 << 10, 512 << 10, 8 << 20, 8, 2, 0, "",
		},
		{
			"one level: no private cache, the default L2",
			"", "",
			[][5]string{{"1", "Unified", "64K", "", ""}},
			64 << 10, DefaultL2, 64 << 10, 8, 0, 0, "",
		},
	} {
		d := Read(fakeRoot(t, c.siblings, c.cpuinfo, c.levels))
		if d.CacheErr != nil {
			t.Fatalf("%s: %v", c.name, d.CacheErr)
		}
		n := 0
		for _, l := range d.Caches {
			if l.Private {
				n++
			}
		}
		if d.L1D() != c.l1 || d.L2() != c.l2 || d.L3() != c.l3 || d.L2Ways() != c.ways || n != c.privateLevels {
			t.Errorf("%s: L1D %d, L2 %d (%d ways), L3 %d, %d private levels; want %d, %d (%d), %d, %d (%+v)",
				c.name, d.L1D(), d.L2(), d.L2Ways(), d.L3(), n, c.l1, c.l2, c.ways, c.l3, c.privateLevels, d.Caches)
		}
		if c.cores >= 0 && d.LastLevelCores() != c.cores {
			t.Errorf("%s: %d cores share the last level, want %d", c.name, d.LastLevelCores(), c.cores)
		}
		if c.str != "" && d.String() != c.str {
			t.Errorf("%s: %q, want %q", c.name, d.String(), c.str)
		}
	}
	d := Read(fakeRoot(t, "0,64", xeonInfo, nil))
	if d.Model != "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz" || d.Vendor != "GenuineIntel" || d.Family != 6 || d.ModelNumber != 143 {
		t.Errorf("cpuinfo: %+v", d)
	}
	if d.CacheErr == nil || d.L1D() != DefaultL1D || d.L2() != DefaultL2 || d.L3() != DefaultL3 {
		t.Errorf("no caches: %+v, want the defaults and an error", d)
	}
	bad := Read(fakeRoot(t, "0", "", [][5]string{{"2", "Unified", "1024K", "0-x", ""}}))
	if bad.CacheErr != nil || bad.Caches[0].Private {
		// An unreadable list counts as unknown; the only level is the last.
		t.Errorf("unreadable shared_cpu_list: %+v, %v", bad.Caches, bad.CacheErr)
	}
	for _, size := range []string{"x", "-1K", "0", "99999999999G"} {
		if d := Read(fakeRoot(t, "0", "", [][5]string{{"1", "Data", size, "0", ""}})); d.CacheErr == nil {
			t.Errorf("size %q: no error", size)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "0-3": 4, "0,64": 2, "0-1,8-9": 4} {
		if got, err := parseCPUList(s); err != nil || len(got) != want {
			t.Errorf("parseCPUList(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "a", "3-1", "0-", "1,,2", "-1", "0-99999999"} {
		if _, err := parseCPUList(s); err == nil {
			t.Errorf("parseCPUList(%q): no error", s)
		}
	}
}

// TestGet reads this host: whatever it is, the sizes are positive and
// ordered, and the description names them.
func TestGet(t *testing.T) {
	d := Get()
	if d != Get() {
		t.Error("Get read the host twice")
	}
	if d.L1D() <= 0 || d.L2() < d.L1D() || d.L3() <= 0 {
		t.Errorf("sizes: L1D %d, L2 %d, L3 %d", d.L1D(), d.L2(), d.L3())
	}
	if s := d.String(); !strings.Contains(s, "(") {
		t.Errorf("String: %q", s)
	}
	t.Logf("%s; features %v", d, d.Features)
}

// TestFromCPUID: a host whose sysfs lists no caches takes CPUID's sizes
// and assumes the defaults for what CPUID leaves out, saying so.
func TestFromCPUID(t *testing.T) {
	// The project's Zen 5 VM without sysfs caches: CPUID gives L1d, L1i
	// and L2, and no per-cache L3 (only the package's, which is not used).
	d := &Description{Model: "AMD EPYC", Caches: fromCPUID(cpuidCaches{L1D: 48 << 10, L1I: 32 << 10, L2: 1 << 20, L3: -1, Line: 64})}
	if d.L1D() != 48<<10 || d.L2() != 1<<20 || d.L3() != DefaultL3 || d.L2Ways() != 8 || d.LastLevelCores() != 0 {
		t.Errorf("L1D %d, L2 %d, L3 %d, %d ways, %d cores: %+v", d.L1D(), d.L2(), d.L3(), d.L2Ways(), d.LastLevelCores(), d.Caches)
	}
	if got := d.Assumed(); len(got) != 1 || got[0] != "L3" {
		t.Errorf("assumed %v, want [L3]", got)
	}
	want := "AMD EPYC (L1 48 KiB per core from CPUID, L2 1 MiB per core from CPUID, L3 12 MiB assumed)"
	if d.String() != want {
		t.Errorf("%q, want %q", d.String(), want)
	}
	// An Intel host: leaf 4 gives every level.
	d = &Description{Caches: fromCPUID(cpuidCaches{L1D: 48 << 10, L2: 2 << 20, L3: 105 << 20})}
	if d.L1D() != 48<<10 || d.L2() != 2<<20 || d.L3() != 105<<20 || d.Assumed() != nil {
		t.Errorf("Intel: %+v, assumed %v", d.Caches, d.Assumed())
	}
	// Nothing from CPUID (another architecture): every level assumed.
	d = &Description{Caches: fromCPUID(cpuidCaches{L1D: -1, L1I: -1, L2: -1, L3: -1})}
	if d.L1D() != DefaultL1D || d.L2() != DefaultL2 || d.L3() != DefaultL3 || len(d.Assumed()) != 3 {
		t.Errorf("none: %+v, assumed %v", d.Caches, d.Assumed())
	}
	if got := (&Description{}).Assumed(); len(got) != 3 {
		t.Errorf("no caches at all: assumed %v", got)
	}
}

// TestOverride: RNNSERVE_HOST_CACHES sets the sizes a host hides or gets
// wrong, all or nothing.
func TestOverride(t *testing.T) {
	vm := func() *Description {
		return &Description{Caches: fromCPUID(cpuidCaches{L1D: 48 << 10, L2: 1 << 20, L3: -1})}
	}
	d := vm()
	if err := d.Override("l3=32M"); err != nil {
		t.Fatal(err)
	}
	if d.L1D() != 48<<10 || d.L2() != 1<<20 || d.L3() != 32<<20 || d.Assumed() != nil {
		t.Errorf("l3=32M: %+v", d.Caches)
	}
	if s := d.String(); !strings.Contains(s, "L3 32 MiB from RNNSERVE_HOST_CACHES") {
		t.Errorf("String: %q", s)
	}
	// Levels sysfs did not list are added, in order.
	d = Read(fakeRoot(t, "0", "", [][5]string{{"1", "Data", "32K", "0", ""}}))
	if err := d.Override(" l3=16M, l2=512K ,l1d=64K"); err != nil {
		t.Fatal(err)
	}
	if d.L1D() != 64<<10 || d.L2() != 512<<10 || d.L3() != 16<<20 || d.Caches[1].Level != 2 || d.Caches[2].Level != 3 {
		t.Errorf("added levels: %+v", d.Caches)
	}
	for _, s := range []string{
		"", "l3", "l4=1M", "l3=32M,l3=16M", "l3=x", "l3=0", "l3=-1M", "l1d=1K", "l3=100000",
		"l3=2000G", "l2=64M", "l1d=2M", strings.Repeat("l3=32M,", 40),
	} {
		d := vm()
		before := d.String()
		err := d.Override(s)
		if err == nil || !strings.Contains(err.Error(), EnvCaches) {
			t.Errorf("%q: %v, want an error naming %s", s, err, EnvCaches)
		}
		if d.String() != before {
			t.Errorf("%q: refused but changed the caches: %s", s, d)
		}
	}
}

// FuzzOverride: any value is refused or leaves sizes ordered and
// positive; nothing panics.
func FuzzOverride(f *testing.F) {
	for _, s := range []string{"l1d=48K,l2=1M,l3=32M", "l3=32M", "l2=2048K", "l3=99999999999G", "l1d=4K,l1d=4K"} {
		f.Add(s)
	}
	fuzzbound.String(f, fuzzbound.Limits{}, func(t *testing.T, s string) {
		d := &Description{Caches: fromCPUID(cpuidCaches{L1D: 48 << 10, L2: 1 << 20, L3: -1})}
		if d.Override(s) != nil {
			return
		}
		if d.L1D() < 4<<10 || d.L1D() > d.L2() || d.L2() > d.L3() {
			t.Errorf("%q: L1D %d, L2 %d, L3 %d", s, d.L1D(), d.L2(), d.L3())
		}
	})
}

// TestEnvOverride: Get applies RNNSERVE_HOST_CACHES as the process starts
// and keeps the host's own sizes when the value is refused.
func TestEnvOverride(t *testing.T) {
	r := childtest.Run(t, "TestEnvHelper", "get", time.Minute, EnvCaches+"=l3=64M")
	// A host whose sysfs lists its caches says whom the L3 is shared by.
	given := regexp.MustCompile(`L3 64 MiB (shared by \d+ CPUs )?from RNNSERVE_HOST_CACHES`)
	if r.Code != 0 || !given.MatchString(r.Output) || !strings.Contains(r.Output, "env error: <nil>") {
		t.Errorf("l3=64M: exit %d: %s", r.Code, r.Output)
	}
	r = childtest.Run(t, "TestEnvHelper", "get", time.Minute, EnvCaches+"=l3=64")
	if r.Code != 0 || strings.Contains(r.Output, "from RNNSERVE_HOST_CACHES") || !strings.Contains(r.Output, `env error: RNNSERVE_HOST_CACHES: l3="64"`) {
		t.Errorf("l3=64: exit %d: %s", r.Code, r.Output)
	}
}

func TestEnvHelper(t *testing.T) {
	if childtest.Role(t) == "get" {
		fmt.Printf("%s\nenv error: %v\n", Get(), Get().EnvErr)
	}
}
