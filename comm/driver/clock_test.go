package driver

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStableTSCReadsTheFirstCPUsFlags(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		text string
		want bool
	}{
		"both":          {"processor\t: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc sse\n\nprocessor\t: 1\nflags\t\t: fpu\n", true},
		"not constant":  {"processor\t: 0\nflags\t\t: fpu tsc nonstop_tsc\n", false},
		"stops":         {"processor\t: 0\nflags\t\t: fpu tsc constant_tsc\n", false},
		"no flags line": {"processor\t: 0\nmodel name\t: x\n", false},
		"empty":         {"", false},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := stableTSC(p); got != c.want {
			t.Errorf("%s: stableTSC = %v, want %v", name, got, c.want)
		}
	}
	if stableTSC(filepath.Join(dir, "missing")) {
		t.Error("a missing cpuinfo says the counter is stable")
	}
}

// Whichever clock the recorder reads, its times turn into nanoseconds that
// agree with the wall clock: an interval of 30 ms measures 30 ms (within
// the scheduler's slack), and a time recorded after a wall-clock reading
// is not before it.
func TestRecordedTimesAgreeWithTheClock(t *testing.T) {
	t.Logf("recorder clock: time-stamp counter %v", useTSC)
	wall0 := time.Now()
	a := now()
	time.Sleep(30 * time.Millisecond)
	b := now()
	wall1 := time.Now()
	conv := toNanos()
	got := time.Duration(conv(b) - conv(a))
	if got < 25*time.Millisecond || got > wall1.Sub(wall0)+5*time.Millisecond {
		t.Errorf("30 ms measured %v by the recorder's clock (wall clock: %v)", got, wall1.Sub(wall0))
	}
	if ua := unixTime(a, conv); ua < wall0.UnixNano()-int64(time.Microsecond) {
		t.Errorf("a time recorded after the wall clock read %d is %d, %v earlier", wall0.UnixNano(), ua, time.Duration(wall0.UnixNano()-ua))
	}
	if unixTime(0, conv) != 0 {
		t.Error("an unreached time (0) became a time")
	}
}
