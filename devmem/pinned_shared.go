package devmem

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// AllocPinnedShared allocates n bytes of page-locked host memory, as
// AllocPinned does, that other processes of the node can open: Export gives
// a handle and OpenIPC on that process's device maps the same memory there,
// page-locked for that device too. So one process's device can copy into
// the memory and another's copy out of it, with no other copy between: the
// host-staged MPI backend moves large messages between the ranks of a node
// this way.
//
// The memory is a memfd mapped shared, rounded up to whole pages; Bytes and
// Len cover the n bytes asked for. As with device memory, only processes of
// the same user can open it, and it lives until its Free and the last
// opened view's CloseIPC.
func (d *Device) AllocPinnedShared(n int) (Buffer, error) {
	if err := d.usable("AllocPinnedShared"); err != nil {
		return Buffer{}, err
	}
	if n <= 0 {
		return Buffer{}, fmt.Errorf("devmem: AllocPinnedShared of %d bytes (shared memory needs at least one byte): %w", n, ErrInvalidArgument)
	}
	page := os.Getpagesize()
	if n > int(^uint(0)>>1)-page {
		return Buffer{}, fmt.Errorf("devmem: AllocPinnedShared of %d bytes: %w", n, ErrInvalidArgument)
	}
	whole := (n + page - 1) / page * page
	mem, fd, err := memfdMap(whole)
	if err != nil {
		return Buffer{}, fmt.Errorf("devmem: AllocPinnedShared of %d bytes: %w", n, err)
	}
	unlock, err := lockFor(d, mem)
	if err != nil {
		return Buffer{}, errors.Join(err, unix.Munmap(mem), unix.Close(fd))
	}
	release := func() error { return errors.Join(unlock(), unix.Munmap(mem), unix.Close(fd)) }
	a := &allocation{dev: d, addr: addrOf(mem), host: mem[:n:n], size: n, pinned: true, release: release,
		shared: &sharedMem{fd: fd, pid: os.Getpid()}}
	d.stats.pinned.Add(1)
	d.stats.bytes.Add(int64(n))
	return Buffer{a: a, n: n}, nil
}

// lockFor page-locks mem for d's copies: registered with a GPU's driver, as
// is on a host device.
func lockFor(d *Device, mem []byte) (unlock func() error, err error) {
	if g, ok := d.drv.(gpuDriver); ok {
		return g.registerHost(mem)
	}
	return func() error { return nil }, nil
}

// openPinnedShared maps the AllocPinnedShared memory that b describes and
// page-locks it for d.
func openPinnedShared(d *Device, b [64]byte, need int) (*allocation, func() error, error) {
	a, err := openShared(b, need)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := lockFor(d, a.host)
	if err != nil {
		return nil, nil, errors.Join(err, closeShared(a))
	}
	a.pinned = true
	return a, func() error { return errors.Join(unlock(), closeShared(a)) }, nil
}
