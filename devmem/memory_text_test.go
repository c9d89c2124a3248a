package devmem

import "testing"

func TestMemoryTextSaysGigabytesOrMegabytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0.0 MB", 12_600_000: "12.6 MB", 999_949_999: "999.9 MB", 1e9: "1.0 GB", 57_600_000_000: "57.6 GB"} {
		if got := MemoryText(n); got != want {
			t.Errorf("MemoryText(%d) = %q, want %q", n, got, want)
		}
	}
}
