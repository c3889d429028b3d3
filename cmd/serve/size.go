package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Sizes in bytes are given as a count with an optional unit: 8388608,
// 8MiB, 8Mi (Kubernetes' spelling), 8M or 8MB (powers of 1000, as in SI).
// Units are case-insensitive apart from the i: KiB/Ki, MiB/Mi, GiB/Gi,
// TiB/Ti are powers of 1024; B, kB/K, MB/M, GB/G, TB/T powers of 1000.

// sizeUnits are the units parseSize takes, by their lower-case spelling.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// parseSize reads a size: a non-negative integer and an optional unit.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	if i == 0 || !ok {
		return 0, fmt.Errorf("%q is not a size (such as 8388608, 8MiB or 512KiB)", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return n * unit, nil
}

// formatSize writes n with the largest binary unit that divides it (8MiB),
// or as a plain count.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
