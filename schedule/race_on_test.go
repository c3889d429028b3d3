//go:build race

package schedule

// raceEnabled: the race detector makes sync.Pool drop a share of what it
// is given, so a released plan may not come back.
const raceEnabled = true
