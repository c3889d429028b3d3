package main

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// atClkTck is the ELF auxiliary vector's AT_CLKTCK: the frequency of the
// clock /proc counts CPU time in (USER_HZ, sysconf(_SC_CLK_TCK)).
const atClkTck = 17

// clockTick is the length of one tick of the clock /proc/PID/stat counts
// CPU time in.
func clockTick() (time.Duration, error) {
	aux, err := unix.Auxv()
	if err != nil {
		return 0, err
	}
	for _, kv := range aux {
		if kv[0] == atClkTck && kv[1] > 0 {
			return time.Second / time.Duration(kv[1]), nil
		}
	}
	return 0, errors.New("the auxiliary vector has no AT_CLKTCK")
}
