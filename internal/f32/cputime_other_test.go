//go:build !unix

package f32

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
