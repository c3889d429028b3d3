package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fakeSysfs writes CPU 0's cache levels (and its SMT siblings, unless
// empty) under a new root and returns it. Each level is level, type, size
// and shared_cpu_list ("" leaves the file out).
func fakeSysfs(t *testing.T, siblings string, levels [][4]string) string {
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
	for i, l := range levels {
		d := filepath.Join(cpu0, "cache", "index"+string(rune('0'+i)))
		write(filepath.Join(d, "level"), l[0])
		write(filepath.Join(d, "type"), l[1])
		write(filepath.Join(d, "size"), l[2])
		if l[3] != "" {
			write(filepath.Join(d, "shared_cpu_list"), l[3])
		}
	}
	return root
}

func TestHostCaches(t *testing.T) {
	for _, c := range []struct {
		name          string
		siblings      string
		levels        [][4]string
		llc, private  int64
		privateLevels int
	}{
		{
			"this VM: L2 per core, L3 shared",
			"0",
			[][4]string{{"1", "Data", "32K", "0"}, {"1", "Instruction", "32K", "0"}, {"2", "Unified", "1024K", "0"}, {"3", "Unified", "32768K", "0-1"}},
			32 << 20, 1 << 20, 3,
		},
		{
			"SMT: L2 shared by the core's two threads",
			"0,64",
			[][4]string{{"1", "Data", "48K", "0,64"}, {"2", "Unified", "2048K", "0,64"}, {"3", "Unified", "105M", "0-31,64-95"}},
			105 << 20, 2 << 20, 2,
		},
		{
			"L2 shared by a cluster of cores: only L1d is private",
			"0",
			[][4]string{{"1", "Data", "32K", "0"}, {"2", "Unified", "4M", "0-3"}, {"3", "Unified", "16M", "0-15"}},
			16 << 20, 32 << 10, 1,
		},
		{
			"no sharing information: the levels below the last",
			"",
			[][4]string{{"1", "Data", "32K", ""}, {"2", "Unified", "512K", ""}, {"3", "Unified", "8M", ""}},
			8 << 20, 512 << 10, 2,
		},
		{
			"one level: no private cache",
			"",
			[][4]string{{"1", "Unified", "64K", ""}},
			64 << 10, 0, 0,
		},
	} {
		levels, err := HostCaches(fakeSysfs(t, c.siblings, c.levels))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := 0
		for _, l := range levels {
			if l.Private {
				n++
			}
		}
		if got := LastLevelBytes(levels); got != c.llc {
			t.Errorf("%s: last level %d bytes, want %d", c.name, got, c.llc)
		}
		if got := PrivateBytes(levels); got != c.private || n != c.privateLevels {
			t.Errorf("%s: private %d bytes over %d levels (%+v), want %d over %d", c.name, got, n, levels, c.private, c.privateLevels)
		}
	}
	bad := fakeSysfs(t, "0", [][4]string{{"2", "Unified", "1024K", "0-x"}})
	if levels, err := HostCaches(bad); err != nil || levels[0].Private != false {
		// An unreadable list counts as unknown; the only level is the last.
		t.Errorf("unreadable shared_cpu_list: %+v, %v", levels, err)
	}
	if _, err := HostCaches(t.TempDir()); err == nil {
		t.Error("no sysfs: no error")
	}
}

func TestParseCPUList(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "0-3": 4, "0,64": 2, "0-1,8-9": 4} {
		if got, err := parseCPUList(s); err != nil || len(got) != want {
			t.Errorf("parseCPUList(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "a", "3-1", "0-", "1,,2"} {
		if _, err := parseCPUList(s); err == nil {
			t.Errorf("parseCPUList(%q): no error", s)
		}
	}
}

func TestPrivateCacheOption(t *testing.T) {
	for _, c := range []struct {
		v  int64
		ok bool
	}{{0, true}, {1 << 20, true}, {-1, false}, {1000, false}, {1 << 41, false}} {
		o := testOptions()
		o.PrivateCacheBytes = c.v
		o.EnsureDefaults()
		if err := o.Validate(); (err == nil) != c.ok || err != nil && !errors.Is(err, ErrOptions) {
			t.Errorf("private_cache_bytes %d: %v", c.v, err)
		}
	}
	if privateOrDefault(0) != 1<<20 || privateOrDefault(512<<10) != 512<<10 {
		t.Error("privateOrDefault")
	}
}
