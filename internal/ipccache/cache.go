package ipccache

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/devhook"
)

// Key is an allocation's identity across processes: a marshalled
// devmem.IPCHandle with its range (offset and size) and checksum zeroed. What
// is left names the exporting device, process and node and the driver's
// bytes for the allocation (a legacy CUDA IPC handle, a VMM allocation's id
// and its exporter's token, or a memfd's pid, descriptor, inode and device).
type Key [devmem.HandleSize]byte

// The bytes of a marshalled handle that say which part of the allocation
// it names, and its checksum (devmem/ipc.go's layout, version 2): they are
// not part of the allocation's identity. TestKeyIsTheAllocation checks the
// layout still holds.
const (
	rangeLo, rangeHi = 16, 32
	crcLo            = 192
)

// KeyOf is the identity of the allocation h names.
func KeyOf(h devmem.IPCHandle) (Key, error) {
	var k Key
	b, err := h.MarshalBinary()
	if err != nil {
		return k, err
	}
	copy(k[:], b)
	clear(k[rangeLo:rangeHi])
	clear(k[crcLo:])
	return k, nil
}

// Limits bound a cache. A zero field takes its default.
type Limits struct {
	Entries int   // allocations kept open at once
	Bytes   int64 // their bytes, as far as the views opened reach
}

// Defaults: UCX keeps unbounded; these keep a few large buffers per peer.
// An entry of memory its exporter has freed holds that memory (a GPU's
// driver frees it when the last mapping goes) until it is evicted, so the
// byte bound is well below a GPU's memory.
const (
	DefaultEntries = 256
	DefaultBytes   = 16 << 30
)

// Stats are a cache's counters.
type Stats struct {
	Hits      int64 // Opens served by a view already open
	Misses    int64 // Opens that opened a view
	Evictions int64 // entries closed to stay within the limits
	// Stale counts idle entries closed because an open met
	// devmem.ErrAlreadyMapped: their exporter had freed them and allocated
	// what the open named in their place, which a GPU does not map beside
	// them; or because devmem refused an open of a handle this process
	// exported (ErrBadHandle): the process has freed that memory since.
	Stale   int64
	Entries int   // allocations open now
	Views   int   // views open now (an allocation may have several ranges open)
	Bytes   int64 // the bytes the open views reach
	InUse   int   // entries with a Ref not yet released; a Handle's: its Refs not yet released
}

// Cache is a process's opened IPC handles on one device. It is safe for
// concurrent use.
type Cache struct {
	dev    *devmem.Device
	limits Limits

	mu      sync.Mutex
	entries map[Key]*entry
	lru     list.List // of *entry, most recently used at the front
	bytes   int64
	views   int
	inUse   int
	closed  bool
	errs    []error // closing views at a release after Close

	hits, misses, evictions, stale int64

	shared *sharedKey // set for the process's cache of a device (Shared)
	users  int        // its Handles not closed

	unregister func() // of closeStale, with devhook.OnStaleViews
}

// entry is one allocation: the views opened of it, each a range of it.
type entry struct {
	key   Key
	pid   int // the exporting process
	views []view
	reach int64 // the end of the furthest view: a lower bound of the mapping's size
	refs  int
	elem  *list.Element
	// holders are the open Handles that have opened it (Shared's cache):
	// when the last of them closes, the entry closes too (at its last
	// Release if a Ref is out), so that a communicator's Close gives back
	// the mappings it made and no other open communicator uses, rather than
	// leaving them to the cache's limits. Nil for an entry opened through
	// Cache.Open only.
	holders map[*share]struct{}
}

type view struct {
	buf       devmem.Buffer // as OpenIPC returned it
	off, size int           // its range in the allocation
}

// New makes an empty cache of handles opened on dev.
func New(dev *devmem.Device, l Limits) (*Cache, error) {
	if dev == nil {
		return nil, fmt.Errorf("ipccache: no device: %w", devmem.ErrInvalidArgument)
	}
	if l.Entries < 0 || l.Bytes < 0 {
		return nil, fmt.Errorf("ipccache: limits %d entries, %d bytes: want 0 (default) or more: %w", l.Entries, l.Bytes, devmem.ErrInvalidArgument)
	}
	if l.Entries == 0 {
		l.Entries = DefaultEntries
	}
	if l.Bytes == 0 {
		l.Bytes = DefaultBytes
	}
	c := &Cache{dev: dev, limits: l, entries: map[Key]*entry{}}
	c.unregister = devhook.OnStaleViews(c.closeStale)
	return c, nil
}

// closeStale closes the idle entries of process pid's memory when d is the
// cache's device (a GPU: the same context): devmem calls it when an open
// met devmem.ErrAlreadyMapped, through this cache or not.
func (c *Cache) closeStale(d *devmem.Device, pid int) int {
	if d.Kind() != c.dev.Kind() || d.UUID() != c.dev.UUID() {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropStaleLocked(pid)
}

// Ref is a peer buffer opened through the cache. Its Buf is valid until
// Release. A copy of a Ref is the same Ref: one Release, through any of
// them, gives it back.
type Ref struct {
	Buf devmem.Buffer
	Hit bool // served by a view already open
	p   *pin
}

// pin is a Ref's hold on its entry, which every copy of the Ref shares, so
// that a second Release through a copy is refused like one through the
// same pointer.
type pin struct {
	c        *Cache
	e        *entry
	hd       *share // the state of the Handle it was opened through, if any
	released bool   // under c.mu
}

// Open returns the memory h names, opening it unless an open view of the
// same allocation already covers its range. A handle this process exported
// is opened through devmem every time (in its exporter that maps nothing
// and asks no driver), so that memory the process has freed since is
// refused as devmem refuses it (ErrBadHandle), not served from an entry
// kept of it; an idle such entry is closed then.
func (c *Cache) Open(h devmem.IPCHandle) (*Ref, error) { return c.open(h, nil) }

func (c *Cache) open(h devmem.IPCHandle, hd *share) (*Ref, error) {
	if c == nil || c.dev == nil {
		return nil, fmt.Errorf("ipccache: Open through a Cache that New did not make (nil or the zero Cache): %w", devmem.ErrInvalidArgument)
	}
	key, err := KeyOf(h)
	if err != nil {
		return nil, err
	}
	off, n := h.Offset(), h.Size()
	// Memory this process exported is served by devmem only while the
	// process has not freed it, which only devmem's open asks.
	own := h.PID() == os.Getpid()
	c.mu.Lock()
	if err := c.closedLocked(hd); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if !own {
		if r, err := c.hitLocked(key, off, n, hd); r != nil || err != nil {
			c.mu.Unlock()
			return r, err
		}
	}
	c.mu.Unlock()
	// Opened without the lock: an open that meets devmem.ErrAlreadyMapped
	// (the exporter freed memory an idle entry still maps and allocated
	// this in its place, which a GPU's driver does not map beside the old
	// mapping) has devmem call closeStale, which takes it, and open again.
	buf, err := c.dev.OpenIPC(h)
	if err != nil {
		if own && errors.Is(err, devmem.ErrBadHandle) {
			c.mu.Lock()
			c.dropFreedLocked(key)
			c.mu.Unlock()
		}
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Another open may have covered the range meanwhile: its view serves.
	if r, err := c.hitLocked(key, off, n, hd); r != nil || err != nil {
		return r, errors.Join(err, buf.CloseIPC())
	}
	e := c.entries[key]
	c.misses++
	if hd != nil {
		hd.misses++
	}
	if e == nil {
		e = &entry{key: key, pid: h.PID()}
		e.elem = c.lru.PushFront(e)
		c.entries[key] = e
	}
	e.views = append(e.views, view{buf: buf, off: off, size: n})
	c.views++
	if end := int64(off + n); end > e.reach {
		c.bytes += end - e.reach
		e.reach = end
	}
	r := c.take(e, buf, false, hd)
	c.evictLocked()
	return r, nil
}

// hitLocked serves the range [off, off+n) of key's allocation from a view
// open already, or returns nil.
func (c *Cache) hitLocked(key Key, off, n int, hd *share) (*Ref, error) {
	if err := c.closedLocked(hd); err != nil {
		return nil, err
	}
	e := c.entries[key]
	if e == nil {
		return nil, nil
	}
	for _, v := range e.views {
		if off >= v.off && off+n <= v.off+v.size {
			buf, err := v.buf.Slice(off-v.off, n)
			if err != nil {
				return nil, err
			}
			c.hits++
			if hd != nil {
				hd.hits++
			}
			return c.take(e, buf, true, hd), nil
		}
	}
	return nil, nil
}

// closedLocked refuses an Open after the cache's or hd's Close.
func (c *Cache) closedLocked(hd *share) error {
	if c.closed || (hd != nil && hd.closed) {
		return fmt.Errorf("ipccache: Open after Close: %w", devmem.ErrInvalidArgument)
	}
	return nil
}

// dropFreedLocked closes key's entry, if idle, after devmem refused an open
// of a handle of it that this process exported: the process has freed the
// memory (the entry's views are what still keep it).
func (c *Cache) dropFreedLocked(key Key) {
	e := c.entries[key]
	if e == nil || e.refs > 0 {
		return
	}
	c.stale++
	if err := c.dropLocked(e); err != nil {
		c.errs = append(c.errs, err)
	}
}

// dropStaleLocked closes the idle entries of allocations of process pid,
// and says how many it closed.
func (c *Cache) dropStaleLocked(pid int) int {
	n := 0
	for el := c.lru.Back(); el != nil; {
		e := el.Value.(*entry)
		el = el.Prev()
		if e.refs > 0 || e.pid != pid {
			continue
		}
		n++
		c.stale++
		if err := c.dropLocked(e); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	return n
}

// take pins e for a new Ref, with c.mu held.
func (c *Cache) take(e *entry, buf devmem.Buffer, hit bool, hd *share) *Ref {
	if e.refs == 0 {
		c.inUse++
	}
	e.refs++
	if hd != nil {
		hd.refs++
		if _, ok := hd.held[e]; !ok {
			if e.holders == nil {
				e.holders = map[*share]struct{}{}
			}
			e.holders[hd] = struct{}{}
			hd.held[e] = struct{}{}
		}
	}
	c.lru.MoveToFront(e.elem)
	return &Ref{Buf: buf, Hit: hit, p: &pin{c: c, e: e, hd: hd}}
}

// Release gives the Ref back; its Buf, and every copy's, must not be used
// after. Releasing twice, through the same Ref or a copy of it, is an error
// that changes nothing.
func (r *Ref) Release() error {
	if r == nil || r.p == nil {
		return fmt.Errorf("ipccache: Release of a Ref that Open did not return (nil or the zero Ref): %w", devmem.ErrInvalidArgument)
	}
	p := r.p
	c, e, hd := p.c, p.e, p.hd
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.released {
		return fmt.Errorf("ipccache: Release of a Ref released already (through it or a copy of it): %w", devmem.ErrInvalidArgument)
	}
	p.released = true
	r.Buf = devmem.Buffer{}
	if hd != nil {
		hd.refs--
	}
	e.refs--
	if e.refs > 0 {
		return nil
	}
	c.inUse--
	if c.closed || orphan(e) {
		return c.dropLocked(e)
	}
	c.evictLocked()
	return nil
}

// evictLocked closes least recently used idle entries until the cache is
// within its limits or only entries in use are left.
func (c *Cache) evictLocked() {
	for el := c.lru.Back(); el != nil && c.over(); {
		e := el.Value.(*entry)
		el = el.Prev()
		if e.refs > 0 {
			continue
		}
		c.evictions++
		if err := c.dropLocked(e); err != nil {
			c.errs = append(c.errs, err)
		}
	}
}

func (c *Cache) over() bool {
	return len(c.entries) > c.limits.Entries || c.bytes > c.limits.Bytes
}

// orphan reports whether e was opened through Handles only, all of them
// closed since.
func orphan(e *entry) bool { return e.holders != nil && len(e.holders) == 0 }

// dropLocked closes e's views and forgets it.
func (c *Cache) dropLocked(e *entry) error {
	for hd := range e.holders {
		delete(hd.held, e)
	}
	var errs []error
	for _, v := range e.views {
		errs = append(errs, v.buf.CloseIPC())
	}
	c.views -= len(e.views)
	c.bytes -= e.reach
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
	e.views = nil
	return errors.Join(errs...)
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statsLocked()
}

func (c *Cache) statsLocked() Stats {
	return Stats{Hits: c.hits, Misses: c.misses, Evictions: c.evictions, Stale: c.stale, Entries: len(c.entries),
		Views: c.views, Bytes: c.bytes, InUse: c.inUse}
}

// Close closes every idle entry now and each entry in use at its last
// Release; it fails, naming how many, when some are in use, and with any
// error closing a view met since the cache was made. Open fails after it.
func (c *Cache) Close() error {
	if c == nil || c.dev == nil {
		return fmt.Errorf("ipccache: Close of a Cache that New did not make (nil or the zero Cache): %w", devmem.ErrInvalidArgument)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("ipccache: closed twice: %w", devmem.ErrInvalidArgument)
	}
	c.closed = true
	c.unregister()
	errs := c.errs
	c.errs = nil
	for el := c.lru.Front(); el != nil; {
		e := el.Value.(*entry)
		el = el.Next()
		if e.refs == 0 {
			errs = append(errs, c.dropLocked(e))
		}
	}
	if c.inUse > 0 {
		errs = append(errs, fmt.Errorf("ipccache: Close with %d entries in use: each closes at its last Release: %w", c.inUse, devmem.ErrInvalidArgument))
	}
	return errors.Join(errs...)
}

// The process's caches, one a device (Shared), so that every communicator
// of the process opens an allocation through one entry: a GPU maps a legacy
// CUDA IPC allocation once a process, and an idle entry one communicator
// keeps of memory since freed must be found when another's open meets it.
var (
	sharedMu sync.Mutex
	shared   = map[sharedKey]*Cache{}
)

// sharedKey names a device: two Device values of one GPU share its context
// and its mappings (devmem keys them by UUID too).
type sharedKey struct {
	kind devmem.Kind
	uuid [16]byte
}

// Handle is one user's share of the process's cache of a device: its Opens
// go through the shared entries; it counts its own hits, misses and Refs. A
// copy of a Handle is the same Handle: one Close, through any of them,
// closes it.
type Handle struct {
	s *share
}

// share is a Handle's state, which every copy of the Handle shares; its
// fields are under c.mu.
type share struct {
	c            *Cache
	hits, misses int64
	refs         int // its Refs not yet released
	closed       bool
	held         map[*entry]struct{} // the entries it holds (entry.holders)
}

// share returns hd's state, or an error naming what was tried when hd is
// not a Handle that Shared returned.
func (hd *Handle) share(what string) (*share, error) {
	if hd == nil || hd.s == nil {
		return nil, fmt.Errorf("ipccache: %s a Handle that Shared did not return (nil or the zero Handle): %w", what, devmem.ErrInvalidArgument)
	}
	return hd.s, nil
}

// Shared returns a Handle on the process's cache of handles opened on dev's
// device, making the cache at the first call (with limits l; later calls'
// limits are ignored). Each Handle is closed once: the entries it opened
// that no other open Handle has opened close with it (an entry in use at
// its last Release); the cache, and with it every mapping it holds, closes
// with the last Handle.
func Shared(dev *devmem.Device, l Limits) (*Handle, error) {
	if dev == nil {
		return nil, fmt.Errorf("ipccache: no device: %w", devmem.ErrInvalidArgument)
	}
	k := sharedKey{dev.Kind(), dev.UUID()}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	c := shared[k]
	if c == nil {
		var err error
		if c, err = New(dev, l); err != nil {
			return nil, err
		}
		c.shared = &k
		shared[k] = c
	} else if l.Entries < 0 || l.Bytes < 0 {
		return nil, fmt.Errorf("ipccache: limits %d entries, %d bytes: want 0 (default) or more: %w", l.Entries, l.Bytes, devmem.ErrInvalidArgument)
	}
	c.mu.Lock()
	c.users++
	c.mu.Unlock()
	return &Handle{&share{c: c, held: map[*entry]struct{}{}}}, nil
}

// Open is Cache.Open through the shared cache, counted for hd.
func (hd *Handle) Open(h devmem.IPCHandle) (*Ref, error) {
	s, err := hd.share("Open through")
	if err != nil {
		return nil, err
	}
	return s.c.open(h, s)
}

// Stats are the shared cache's counters, but Hits and Misses are hd's own
// and InUse is hd's Refs not yet released. They are zero for the zero
// Handle.
func (hd *Handle) Stats() Stats {
	s, err := hd.share("")
	if err != nil {
		return Stats{}
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	st := s.c.statsLocked()
	st.Hits, st.Misses, st.InUse = s.hits, s.misses, s.refs
	return st
}

// Total is the shared cache's counters, every Handle's together; zero for
// the zero Handle.
func (hd *Handle) Total() Stats {
	s, err := hd.share("")
	if err != nil {
		return Stats{}
	}
	return s.c.Stats()
}

// Close ends hd: it fails, naming how many, when some of its Refs are not
// released (each still releases later). The last Handle's Close closes the
// shared cache (Cache.Close); a later Shared makes another.
func (hd *Handle) Close() error {
	s, err := hd.share("Close of")
	if err != nil {
		return err
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return s.close()
}

// close is Handle.Close, with sharedMu held.
func (hd *share) close() error {
	c := hd.c
	c.mu.Lock()
	if hd.closed {
		c.mu.Unlock()
		return fmt.Errorf("ipccache: Handle closed twice (through it or a copy of it): %w", devmem.ErrInvalidArgument)
	}
	hd.closed = true
	var err error
	if hd.refs > 0 {
		err = fmt.Errorf("ipccache: Handle closed with %d Refs not released: %w", hd.refs, devmem.ErrInvalidArgument)
	}
	c.users--
	last := c.users == 0
	// The entries only hd held close now, or at their last Release.
	for e := range hd.held {
		delete(e.holders, hd)
		if orphan(e) && e.refs == 0 && !last {
			if derr := c.dropLocked(e); derr != nil && err == nil {
				err = derr
			}
		}
	}
	hd.held = nil
	c.mu.Unlock()
	if last {
		if shared[*c.shared] == c {
			delete(shared, *c.shared)
		}
		if cerr := c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}
