//go:build !linux

package main

import (
	"errors"
	"time"
)

// clockTick fails: a process's CPU time is read from Linux's /proc only.
func clockTick() (time.Duration, error) {
	return 0, errors.New("-server-pid reads /proc/PID/stat: Linux only")
}
