package driver

import (
	"bufio"
	"os"
	"strings"
	"time"
)

// The flight recorder's clock. It reads the clock twice an operation, and
// a virtual machine's clock (kvm-clock) costs 27-70 ns a read: on the H200
// machine two reads were 118 of the 203 ns an operation cost with the
// recorder on (2026-12-04), against the 100 ns. Where the CPU's
// time-stamp counter runs at a constant rate and does not stop (Linux's
// constant_tsc and nonstop_tsc), the recorder reads it instead (a few ns)
// and turns counts into nanoseconds only when a record is written, by the
// rate measured between traceBase and then. Elsewhere it reads the
// monotonic clock (time.Since).

// traceBase is the origin of recorded times: reading the monotonic clock
// alone (time.Since) costs a third of time.Now on a virtual machine's
// clock, and a recorded time is made a Unix time only when written out.
var (
	useTSC             = haveTSC && stableTSC("/proc/cpuinfo")
	tscBase, traceBase = bases()
)

// bases reads the counter, then the clock: a recorded time is then never
// earlier than the clock would have said (at most the few ns between the
// two reads later).
func bases() (uint64, time.Time) {
	c := rdtsc()
	return c, time.Now()
}

// stableTSC reports whether the first CPU that path (/proc/cpuinfo)
// describes has a constant, non-stop time-stamp counter.
func stableTSC(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, flags, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != "flags" {
			continue
		}
		have := map[string]bool{}
		for _, f := range strings.Fields(flags) {
			have[f] = true
		}
		return have["constant_tsc"] && have["nonstop_tsc"]
	}
	return false
}

// now is the time since traceBase, in the recorder's clock's units, never
// 0 (0 means "not reached").
func now() int64 {
	if useTSC {
		return int64(rdtsc()-tscBase) + 1
	}
	return int64(time.Since(traceBase)) + 1
}

// toNanos returns a function that turns a recorded time into nanoseconds
// since traceBase: with the counter, by the rate from traceBase to now.
func toNanos() func(t int64) int64 {
	if !useTSC {
		return func(t int64) int64 { return t - 1 }
	}
	ticks, ns := float64(rdtsc()-tscBase), float64(time.Since(traceBase))
	if ticks <= 0 {
		return func(t int64) int64 { return 0 }
	}
	rate := ns / ticks
	return func(t int64) int64 { return int64(float64(t-1) * rate) }
}

// unixTime is a recorded time as Unix nanoseconds, 0 for 0; conv is
// toNanos's, taken once a record.
func unixTime(t int64, conv func(int64) int64) int64 {
	if t == 0 {
		return 0
	}
	return traceBase.UnixNano() + conv(t)
}
