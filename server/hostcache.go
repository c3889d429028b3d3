package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// CacheLevel is one cache of the host's CPU 0 as sysfs describes it.
type CacheLevel struct {
	Level int
	Type  string // Data, Instruction or Unified
	Bytes int64
	// Private is true for a cache no other core shares: the CPUs of its
	// shared_cpu_list are all SMT siblings of CPU 0
	// (topology/thread_siblings_list). Where sysfs does not list the
	// sharing CPUs, every level below the highest counts as private.
	Private bool
}

// HostCaches reads CPU 0's caches from sysfs under root ("/" on a real
// host; tests pass a directory of their own), smallest level first.
func HostCaches(root string) ([]CacheLevel, error) {
	cpu0 := filepath.Join(root, "sys/devices/system/cpu/cpu0")
	dirs, err := filepath.Glob(filepath.Join(cpu0, "cache/index*"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("server: no cache information under %s", filepath.Join(cpu0, "cache"))
	}
	core := map[int]bool{0: true} // CPU 0 and its SMT siblings
	if b, err := os.ReadFile(filepath.Join(cpu0, "topology/thread_siblings_list")); err == nil {
		if cpus, err := parseCPUList(strings.TrimSpace(string(b))); err == nil {
			for _, c := range cpus {
				core[c] = true
			}
		}
	}
	var levels []CacheLevel
	var unknown []int // indexes of levels without sharing information
	top := 0
	for _, d := range dirs {
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(d, name))
			return strings.TrimSpace(string(b))
		}
		lvl, err := strconv.Atoi(read("level"))
		if err != nil {
			return nil, fmt.Errorf("server: %s/level: %q", d, read("level"))
		}
		size, err := parseCacheSize(read("size"))
		if err != nil {
			return nil, fmt.Errorf("server: %s/size: %w", d, err)
		}
		l := CacheLevel{Level: lvl, Type: read("type"), Bytes: size, Private: true}
		if shared, err := parseCPUList(read("shared_cpu_list")); err != nil {
			unknown = append(unknown, len(levels))
		} else {
			for _, c := range shared {
				l.Private = l.Private && core[c]
			}
		}
		top = max(top, lvl)
		levels = append(levels, l)
	}
	for _, i := range unknown {
		levels[i].Private = levels[i].Level < top
	}
	sort.Slice(levels, func(i, j int) bool { return levels[i].Level < levels[j].Level })
	return levels, nil
}

// PrivateBytes is the size of the largest data or unified cache private
// to CPU 0's core (its L2 on most hosts), or 0 when there is none.
func PrivateBytes(levels []CacheLevel) int64 {
	var best CacheLevel
	for _, l := range levels {
		if l.Type != "Instruction" && l.Private && (l.Level > best.Level || l.Level == best.Level && l.Bytes > best.Bytes) {
			best = l
		}
	}
	return best.Bytes
}

// parseCPUList reads sysfs CPU lists such as "0", "0-3" or "0,64" or
// "0-1,8-9".
func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("empty CPU list")
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// LastLevelBytes is the size of the highest-level data or unified cache.
func LastLevelBytes(levels []CacheLevel) int64 {
	var best CacheLevel
	for _, l := range levels {
		if l.Type != "Instruction" && l.Level >= best.Level {
			best = l
		}
	}
	return best.Bytes
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
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q", s)
	}
	return n * mult, nil
}
