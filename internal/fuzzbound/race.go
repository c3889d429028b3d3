//go:build race

package fuzzbound

const raceEnabled = true
