package host

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// readCaches reads CPU 0's caches from sysfs under root, smallest level
// first.
func readCaches(root string) ([]Cache, error) {
	cpu0 := filepath.Join(root, "sys/devices/system/cpu/cpu0")
	dirs, err := filepath.Glob(filepath.Join(cpu0, "cache/index*"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("host: no cache information under %s", filepath.Join(cpu0, "cache"))
	}
	core := map[int]bool{0: true} // CPU 0 and its SMT siblings
	if b, err := os.ReadFile(filepath.Join(cpu0, "topology/thread_siblings_list")); err == nil {
		if cpus, err := parseCPUList(strings.TrimSpace(string(b))); err == nil {
			for _, c := range cpus {
				core[c] = true
			}
		}
	}
	var caches []Cache
	var unknown []int // indexes of levels without sharing information
	top := 0
	for _, d := range dirs {
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(d, name))
			return strings.TrimSpace(string(b))
		}
		lvl, err := strconv.Atoi(read("level"))
		if err != nil {
			return nil, fmt.Errorf("host: %s/level: %q", d, read("level"))
		}
		size, err := parseCacheSize(read("size"))
		if err != nil {
			return nil, fmt.Errorf("host: %s/size: %w", d, err)
		}
		c := Cache{Level: lvl, Type: read("type"), Bytes: size, Private: true}
		c.LineBytes, _ = strconv.Atoi(read("coherency_line_size"))
		c.Ways, _ = strconv.Atoi(read("ways_of_associativity"))
		if shared, err := parseCPUList(read("shared_cpu_list")); err != nil {
			unknown = append(unknown, len(caches))
		} else {
			c.SharedBy = len(shared)
			for _, cpu := range shared {
				c.Private = c.Private && core[cpu]
			}
		}
		top = max(top, lvl)
		caches = append(caches, c)
	}
	for _, i := range unknown {
		caches[i].Private = caches[i].Level < top
	}
	sortCaches(caches)
	return caches, nil
}

func sortCaches(caches []Cache) {
	sort.SliceStable(caches, func(i, j int) bool { return caches[i].Level < caches[j].Level })
}

// parseCPUList reads sysfs CPU lists such as "0", "0-3" or "0,64" or
// "0-1,8-9". At most 1<<16 CPUs: the list is a file's, not ours.
func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("empty CPU list")
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q", s)
			}
		}
		if len(cpus)+b-a >= 1<<16 {
			return nil, fmt.Errorf("CPU list %q: too many CPUs", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// parseCacheSize reads sysfs sizes such as "32K", "2048K" or "32M".
func parseCacheSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > 1<<40/mult {
		return 0, fmt.Errorf("size %q", s)
	}
	return n * mult, nil
}
