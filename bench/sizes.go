package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxSweep bounds the number of sizes in one sweep, so that a slip such as
// -f 1 -i 1 over a gigabyte is an error rather than a run that never ends.
const maxSweep = 10000

// ParseSize reads a byte count the way nccl-tests reads -b and -e: a number,
// possibly fractional, optionally followed by K, M or G (powers of 1024), so
// "8", "1.5K" and "128M" are accepted; a trailing "B" or "iB" is allowed too.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	unit := 1.0
	low := strings.ToLower(t)
	for _, suffix := range []string{"ib", "b"} {
		if strings.HasSuffix(low, suffix) && len(low) > len(suffix) {
			low = low[:len(low)-len(suffix)]
			break
		}
	}
	if n := len(low); n > 0 {
		switch low[n-1] {
		case 'k':
			unit, low = 1<<10, low[:n-1]
		case 'm':
			unit, low = 1<<20, low[:n-1]
		case 'g':
			unit, low = 1<<30, low[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(low), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("size %q: want a byte count such as 8, 64K, 1.5M or 1G", s)
	}
	b := v * unit
	if b < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	if b >= math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// FormatSize writes n bytes compactly for labels: 8, 64K, 1M, 1.5G.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.size {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + u.suffix
			}
			return strconv.FormatFloat(float64(n)/float64(u.size), 'g', 3, 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Sweep lists the sizes from min to max as nccl-tests steps through them:
// each size is the previous one times factor, or, with factor 1, plus step.
// The last size is the largest not above max.
func Sweep(min, max int64, factor int, step int64) ([]int64, error) {
	switch {
	case min < 1:
		return nil, fmt.Errorf("-b %d: want at least 1 byte", min)
	case max < min:
		return nil, fmt.Errorf("-e %d is below -b %d", max, min)
	case factor < 1:
		return nil, fmt.Errorf("-f %d: want an integer factor of 1 or more", factor)
	case factor == 1 && step < 1 && max > min:
		return nil, fmt.Errorf("-f 1 steps by -i bytes, and -i %d is not positive", step)
	}
	var sizes []int64
	for s := min; s <= max; {
		if len(sizes) == maxSweep {
			return nil, fmt.Errorf("-b %d -e %d -f %d -i %d gives more than %d sizes", min, max, factor, step, maxSweep)
		}
		sizes = append(sizes, s)
		var next int64
		if factor > 1 {
			if s > math.MaxInt64/int64(factor) {
				break
			}
			next = s * int64(factor)
		} else {
			if max == min || s > math.MaxInt64-step {
				break
			}
			next = s + step
		}
		s = next
	}
	return sizes, nil
}
