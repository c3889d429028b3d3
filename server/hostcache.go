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
}

// HostCaches reads CPU 0's caches from sysfs under root ("/" on a real
// host; tests pass a directory of their own), smallest level first.
func HostCaches(root string) ([]CacheLevel, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "sys/devices/system/cpu/cpu0/cache/index*"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("server: no cache information under %s", filepath.Join(root, "sys/devices/system/cpu/cpu0/cache"))
	}
	var levels []CacheLevel
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
		levels = append(levels, CacheLevel{Level: lvl, Type: read("type"), Bytes: size})
	}
	sort.Slice(levels, func(i, j int) bool { return levels[i].Level < levels[j].Level })
	return levels, nil
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
