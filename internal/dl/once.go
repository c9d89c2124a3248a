package dl

import (
	"sync"
	"sync/atomic"
)

// Once holds a library that a package opens at run time on first use: the
// load, ready and reset steps every such package needs. Load is safe for
// concurrent use and does nothing once it has succeeded; a failure is not
// remembered, so the next call tries again.
type Once struct {
	mu     sync.Mutex
	lib    *Library
	loaded atomic.Bool // set only after open has returned a complete library
}

// Load calls open unless a load has succeeded. open opens the library and
// fills the caller's table of symbols; on failure it leaves the table empty
// and the library closed.
func (o *Once) Load(open func() (*Library, error)) error {
	if o.loaded.Load() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.loaded.Load() {
		return nil
	}
	lib, err := open()
	if err != nil {
		return err
	}
	o.lib = lib
	o.loaded.Store(true)
	return nil
}

// Loaded reports whether a load has succeeded (and no Reset followed).
func (o *Once) Loaded() bool { return o.loaded.Load() }

// Reset forgets a loaded library, so that a test can load another: clear
// empties the caller's table, under the lock that Load holds. The library
// stays open: a real one may run threads that dlclose would unmap.
func (o *Once) Reset(clear func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.loaded.Load() {
		o.loaded.Store(false)
		clear()
		o.lib = nil
	}
}
