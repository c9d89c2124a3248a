//go:build race

package conformance

// raceEnabled: the race detector makes the host device's copies and the
// reference's loops some ten times slower, so the prime-count cases run
// their short subset under it.
const raceEnabled = true
