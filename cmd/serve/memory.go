package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"rnnserve/server"
)

// machineMemory is the memory this process may use: the least of the
// machine's (MemTotal in /proc/meminfo), its cgroup's limit (v2
// memory.max, or v1 memory.limit_in_bytes) and the Go runtime's soft
// limit (GOMEMLIMIT, as the runtime read it), in bytes; 0 when none of
// them can be read.
func machineMemory() int64 {
	mem := int64(math.MaxInt64)
	if v, ok := meminfoTotal("/proc/meminfo"); ok {
		mem = min(mem, v)
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if v, ok := cgroupLimit(p); ok {
			mem = min(mem, v)
		}
	}
	if v := debug.SetMemoryLimit(-1); v > 0 && v < math.MaxInt64 {
		mem = min(mem, v)
	}
	if mem == math.MaxInt64 {
		return 0
	}
	return mem
}

// meminfoTotal reads MemTotal from a /proc/meminfo file.
func meminfoTotal(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseMeminfo(data)
}

// parseMeminfo is the MemTotal of /proc/meminfo's text in bytes; false
// when it is missing, not a positive count of kB, or too large to count
// in bytes.
func parseMeminfo(data []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil || kb <= 0 || kb > math.MaxInt64>>10 {
					return 0, false
				}
				return kb << 10, true
			}
		}
	}
	return 0, false
}

// cgroupLimit reads a cgroup memory limit file: a byte count, or "max"
// (or a v1 value near 2^63) for none.
func cgroupLimit(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<60 {
		return 0, false
	}
	return v, true
}

// budgetFromMemory is the default memory budget: server.BudgetFor the
// memory this process may use, or 0 (the server's own default) when it
// cannot be read.
func budgetFromMemory(maxBody int64) int64 {
	if mem := machineMemory(); mem > 0 {
		return server.BudgetFor(mem, maxBody)
	}
	return 0
}

// softMemoryLimit is the Go runtime's soft memory limit serve sets when
// the environment sets none (GOMEMLIMIT): three times the memory budget
// and 256 MiB, at most three quarters of the memory the process may use
// (mem, 0 when unknown). The budget bounds the request bytes in flight;
// the process holds them a few times over at their peak (wire bytes,
// their decoded form, the copies a codec makes on the way) beside its
// models and buffers, and the collector, left to its default pacing, lets
// the heap grow to twice what is live. A soft limit makes it collect
// sooner as the heap nears it, so a burst of large requests does not
// double the process's memory (docs/limits.md).
func softMemoryLimit(budget, mem int64) int64 {
	if budget <= 0 {
		budget = server.DefaultBudgetBytes
	}
	limit := 3*budget + 256<<20
	if mem > 0 {
		limit = min(limit, mem/4*3)
	}
	return limit
}

// setSoftMemoryLimit sets softMemoryLimit unless GOMEMLIMIT set one; it
// returns the limit in force.
func setSoftMemoryLimit(budget int64) int64 {
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		return cur
	}
	limit := softMemoryLimit(budget, machineMemory())
	debug.SetMemoryLimit(limit)
	return limit
}
