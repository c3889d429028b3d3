package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
