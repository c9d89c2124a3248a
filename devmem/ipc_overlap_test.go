package devmem

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

func init() { childRoles["ipc-overlap"] = childOverlap }

// sliceOf is b.Slice that fails the test on error.
func sliceOf(t *testing.T, b Buffer, off, n int) Buffer {
	t.Helper()
	v, err := b.Slice(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOverlapsJudgesTheMemoryOfAnOpenedView: a view OpenIPC returns in the
// exporting process is the exported memory, so it overlaps the buffer (and
// its slices) where their bytes meet, and a copy between them is refused,
// leaving the bytes as they were. Before, Overlaps compared allocation
// records and said false.
func TestOverlapsJudgesTheMemoryOfAnOpenedView(t *testing.T) {
	const n, seed = 4096, 31
	for _, same := range []bool{true, false} {
		t.Run(fmt.Sprintf("opened on the exporting device %v", same), func(t *testing.T) {
			d := NewHostDevice()
			on := d
			if !same {
				on = NewHostDevice()
			}
			buf := exportFilled(t, d, seed, n)
			defer buf.Free()
			h, err := sliceOf(t, buf, 1000, 2000).Export()
			if err != nil {
				t.Fatal(err)
			}
			v, err := on.OpenIPC(h) // bytes [1000, 3000) of buf
			if err != nil {
				t.Fatal(err)
			}
			defer v.CloseIPC()
			cases := []struct {
				name string
				a, b Buffer
				want bool
			}{
				{"view and its allocation", v, buf, true},
				{"allocation and the view", buf, v, true},
				{"view and the bytes before it", v, sliceOf(t, buf, 0, 1000), false},
				{"view and its first byte's predecessor and itself", v, sliceOf(t, buf, 999, 2), true},
				{"view and the bytes after it", v, sliceOf(t, buf, 3000, 1096), false},
				{"view's last byte and the allocation's same byte", sliceOf(t, v, 1999, 1), sliceOf(t, buf, 2999, 1), true},
				{"view's first half and the allocation's bytes of its second half", sliceOf(t, v, 0, 1000), sliceOf(t, buf, 2000, 1000), false},
				{"empty slice of the view", sliceOf(t, v, 10, 0), buf, false},
			}
			for _, c := range cases {
				if got := c.a.Overlaps(c.b); got != c.want {
					t.Errorf("%s: Overlaps = %v, want %v", c.name, got, c.want)
				}
			}
			if v.Same(sliceOf(t, buf, 1000, 2000)) {
				t.Error("a view and the allocation's slice are Same: closing one would close the other")
			}
			// A copy through the view onto overlapping bytes is refused and
			// changes nothing; onto disjoint bytes it copies. (CopyPeer
			// between the two devices, which is CopyN on one.)
			if err := CopyPeer(sliceOf(t, buf, 1500, 1000), v, 1000, nil); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("copy from the view onto bytes of it = %v, want ErrInvalidArgument", err)
			}
			if err := CopyPeer(sliceOf(t, buf, 0, 1000), v, 1000, nil); err != nil {
				t.Errorf("copy from the view onto disjoint bytes: %v", err)
			}
			want := fill(seed, n)
			copy(want[0:1000], want[1000:2000])
			got, _ := buf.Bytes()
			if !bytes.Equal(got, want) {
				t.Error("the buffer's bytes are not what the one allowed copy leaves")
			}
		})
	}
}

// childOverlap opens HANDLE_A and HANDLE_B, two views of one allocation of
// another process, and checks Overlaps between them against WANT.
func childOverlap() error {
	var ha, hb IPCHandle
	if err := ha.UnmarshalText([]byte(os.Getenv("HANDLE_A"))); err != nil {
		return err
	}
	if err := hb.UnmarshalText([]byte(os.Getenv("HANDLE_B"))); err != nil {
		return err
	}
	d := NewHostDevice()
	a, err := d.OpenIPC(ha)
	if err != nil {
		return err
	}
	b, err := d.OpenIPC(hb)
	if err != nil {
		return err
	}
	want := os.Getenv("WANT") == "true"
	if got := a.Overlaps(b); got != want {
		return fmt.Errorf("views [%d:+%d] and [%d:+%d]: Overlaps = %v, want %v", ha.Offset(), ha.Size(), hb.Offset(), hb.Size(), got, want)
	}
	if got := b.Overlaps(a); got != want {
		return fmt.Errorf("views [%d:+%d] and [%d:+%d]: Overlaps the other way = %v, want %v", hb.Offset(), hb.Size(), ha.Offset(), ha.Size(), got, want)
	}
	// A copy of the first n bytes of a to the start of b is refused where
	// those bytes meet.
	n := min(a.Len(), b.Len())
	if ha.Offset() < hb.Offset()+n && hb.Offset() < ha.Offset()+n {
		if err := CopyN(b, a, n, nil); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("copy between overlapping views = %v, want ErrInvalidArgument", err)
		}
	}
	return errors.Join(a.CloseIPC(), b.CloseIPC())
}

// TestOverlapsOfTwoViewsOfAnotherProcesssAllocation: two handles of parts
// of one allocation, opened in another process, give views of its one
// mapping, which overlap exactly where the parts do.
func TestOverlapsOfTwoViewsOfAnotherProcesssAllocation(t *testing.T) {
	d := NewHostDevice()
	buf := exportFilled(t, d, 5, 8192)
	defer buf.Free()
	part := func(off, n int) string {
		h, err := sliceOf(t, buf, off, n).Export()
		if err != nil {
			t.Fatal(err)
		}
		return handleText(t, h)
	}
	for _, c := range []struct {
		aOff, aN, bOff, bN int
		want               bool
	}{
		{0, 100, 50, 100, true},
		{0, 100, 100, 100, false},
		{4096, 4096, 0, 8192, true},
		{0, 4096, 4096, 4096, false},
		{10, 1, 10, 1, true},
	} {
		startChild(t, "ipc-overlap", map[string]string{
			"HANDLE_A": part(c.aOff, c.aN), "HANDLE_B": part(c.bOff, c.bN), "WANT": fmt.Sprint(c.want),
		}, false).wait(t)
	}
}
