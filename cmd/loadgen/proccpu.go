package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// procCPU is the CPU time (user and system, every thread, those that have
// exited included) that process pid has used so far, from
// /proc/PID/stat under root ("/" on a real host). The kernel counts it in
// clock ticks of tick each (USER_HZ).
func procCPU(root string, pid int, tick time.Duration) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b, tick)
}

// parseStatCPU reads utime and stime, fields 14 and 15 of a
// /proc/PID/stat line (proc(5)). Field 2, the command name in
// parentheses, may itself hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseStatCPU(b []byte, tick time.Duration) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	// After ") " come field 3 (state) onwards: utime is the 12th of them.
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc stat: bad CPU time %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * tick, nil
}
