package devmem

import "fmt"

// IPCEventHandle names an event of NewIPCEvent for another process of the
// node, which opens it with OpenIPCEvent. It holds CUDA's own handle
// (cuIpcGetEventHandle): plain bytes, sent as they are.
type IPCEventHandle [64]byte

// NewIPCEvent makes an event on d whose records another process of the node
// can wait for: ExportIPC gives its handle, which that process opens with
// OpenIPCEvent. Record, Synchronize, Done, Destroy and Stream.WaitEvent
// work as for NewEvent's events, but CUDA keeps no time for an interprocess
// event (cuEventCreate with CU_EVENT_DISABLE_TIMING|CU_EVENT_INTERPROCESS),
// so Elapsed of one is an error wrapping ErrInvalidArgument.
//
// Another process's wait is for the record that is latest in CUDA when its
// wait reaches CUDA, and a Record on a stream with host work queued reaches
// CUDA only once that work is done (see HostFunc). So tell the other
// process to wait only once the record is in CUDA: from host work queued on
// the stream behind the Record (internal/devhook.Task, say) or after a
// Synchronize of the stream; and record again only once its wait is in
// CUDA, since a later record that gets there first is the one it waits for.
//
// A host device has no such events: the error wraps ErrUnsupported.
func (d *Device) NewIPCEvent() (*Event, error) {
	drv, err := d.ipcEvents("NewIPCEvent")
	if err != nil {
		return nil, err
	}
	impl, err := drv.newIPCEvent()
	if err != nil {
		return nil, err
	}
	d.stats.events.Add(1)
	return &Event{dev: d, impl: impl}, nil
}

// ExportIPC returns the handle through which another process of the node
// opens e (OpenIPCEvent); it stays valid while e does. Only events of
// NewIPCEvent have one: for any other (NewEvent's, an opened one) the
// error wraps ErrInvalidArgument.
func (e *Event) ExportIPC() (IPCEventHandle, error) {
	if err := e.check(nil); err != nil {
		return IPCEventHandle{}, err
	}
	x, ok := e.impl.(ipcEvent)
	if !ok {
		return IPCEventHandle{}, fmt.Errorf("devmem: ExportIPC of an event of %v that NewIPCEvent did not make: %w", e.dev, ErrInvalidArgument)
	}
	return x.exportIPC()
}

// OpenIPCEvent opens on d the event that another process of the node made
// with NewIPCEvent and exported as h. A stream of d that waits for it
// (Stream.WaitEvent) runs its later work only once the work before the
// exporter's latest record is done, the latest as of the moment the wait
// reaches CUDA: at once when no host work is queued on the stream, or else
// once the host work queued before the wait is done. Synchronize and Done
// wait for and ask about the exporter's latest record likewise.
//
// Only the exporter records the event: Record of an opened event is an
// error wrapping ErrUnsupported, since this process's records would race
// with the exporter's, unseen by it. It has no timing either (Elapsed is
// an error). Destroy closes it; the exporter's event lives on.
//
// The zero handle, and a handle that names no event CUDA opens here, is an
// error wrapping ErrInvalidArgument. A host device opens none: the error
// wraps ErrUnsupported.
func (d *Device) OpenIPCEvent(h IPCEventHandle) (*Event, error) {
	drv, err := d.ipcEvents("OpenIPCEvent")
	if err != nil {
		return nil, err
	}
	if h == (IPCEventHandle{}) {
		return nil, fmt.Errorf("devmem: OpenIPCEvent of the zero handle on %v: %w", d, ErrInvalidArgument)
	}
	impl, err := drv.openIPCEvent(h)
	if err != nil {
		return nil, err
	}
	d.stats.events.Add(1)
	return &Event{dev: d, impl: impl}, nil
}

// ipcEvents is d's driver's interprocess events, or the error op returns.
func (d *Device) ipcEvents(op string) (ipcEventDriver, error) {
	if err := d.usable(op); err != nil {
		return nil, err
	}
	drv, ok := d.drv.(ipcEventDriver)
	if !ok {
		return nil, fmt.Errorf("devmem: %s: %v has no interprocess events: %w", op, d, ErrUnsupported)
	}
	return drv, nil
}
