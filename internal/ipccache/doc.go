// Package ipccache keeps the IPC handles a process has opened (devmem
// OpenIPC) so that the next message from the same peer buffer costs no open:
// the cache UCX's cuda_ipc transport keeps, without its known faults.
//
//   - Keyed by the allocation's identity, not its address: the handle's
//     bytes less the range (Key). A buffer freed and another allocated at
//     the same address get different keys (on a GPU the driver's handle of
//     a new allocation differs; on the host device the memfd's inode
//     differs), so the old mapping is never served for the new memory; it
//     stays until least-recently-used eviction closes it.
//   - Reference-counted: Open returns a Ref that pins its entry until
//     Release; an entry in use is never evicted or closed. A copy of a Ref
//     (or of a Handle) is the same Ref: a second Release (Close) through
//     any copy is refused and changes nothing; the zero values refuse
//     their methods.
//   - A handle this process exported is opened through devmem on every
//     Open (in its exporter that maps nothing), so that memory the process
//     has freed since is refused (devmem.ErrBadHandle) rather than served
//     from an entry; an idle entry of it is closed (Stats.Stale).
//   - Bounded in entries and bytes, evicting the least recently used idle
//     entry first; a cache whose every entry is in use goes over its bound
//     until releases bring it back.
//   - Close closes every idle entry, and each entry in use at its last
//     Release.
//   - Stats counts hits, misses, evictions, stale entries closed and what
//     is open now.
//   - One cache a device and process (Shared), whatever the number of
//     communicators: each takes a Handle, whose Close releases its share;
//     the mappings go with the last Handle. A GPU maps a legacy CUDA IPC
//     allocation once a process (devmem maps it once however often it is
//     opened), and it refuses to map new memory its exporter allocated in
//     the place of freed memory this process still maps
//     (devmem.ErrAlreadyMapped, CUDA_ERROR_ALREADY_MAPPED; the host device
//     refuses it too): an open that meets that, through a cache or not
//     (NodeShared, a user's OpenIPC), has devmem ask every cache
//     (internal/devhook.OnStaleViews) to close the exporter's idle entries on that
//     device (Stats.Stale: their memory was freed, or will open again), and
//     tries once more. An entry in use is never closed; the open then
//     fails, and the caller takes another path.
//
// It must not copy data or know about MPI: internal/mpicomm's IPC path
// (ipcpath.go) uses it for the peer buffers it reads.
package ipccache
