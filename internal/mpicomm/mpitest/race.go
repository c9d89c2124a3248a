//go:build race

package mpitest

// raceEnabled: under the race detector sync.Pool drops a quarter of what is
// put back, on purpose, so a pooled object is sometimes made anew.
const raceEnabled = true
