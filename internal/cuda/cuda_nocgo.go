//go:build !cgo

package cuda

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// errNoCgo is what every call returns in a binary built without cgo. The
// functions below mirror cuda_cgo.go one for one (a test checks that), so
// packages above build either way.
var errNoCgo = fmt.Errorf("cuda: the driver API is loaded through cgo, and this binary was built with CGO_ENABLED=0: %w", errs.ErrLibraryNotFound)

func Load() error                                                       { return errNoCgo }
func ErrorName(code int) string                                         { return goErrorName(code) }
func ErrorString(code int) string                                       { return "" }
func DriverVersion() (int, error)                                       { return 0, errNoCgo }
func DeviceCount() (int, error)                                         { return 0, errNoCgo }
func DeviceGet(ordinal int) (Device, error)                             { return 0, errNoCgo }
func DeviceName(d Device) (string, error)                               { return "", errNoCgo }
func DeviceUUID(d Device) (UUID, error)                                 { return UUID{}, errNoCgo }
func DeviceTotalMem(d Device) (int, error)                              { return 0, errNoCgo }
func DeviceAttribute(d Device, a Attribute) (int, error)                { return 0, errNoCgo }
func DevicePCIBusID(d Device) (string, error)                           { return "", errNoCgo }
func DeviceCanAccessPeer(d, peer Device) (bool, error)                  { return false, errNoCgo }
func PrimaryCtxRetain(d Device) (Context, error)                        { return 0, errNoCgo }
func PrimaryCtxRelease(d Device) error                                  { return errNoCgo }
func CtxSetCurrent(c Context) error                                     { return errNoCgo }
func CtxGetCurrent() (Context, error)                                   { return 0, errNoCgo }
func CtxSynchronize() error                                             { return errNoCgo }
func CtxEnablePeerAccess(peer Context) error                            { return errNoCgo }
func MemAlloc(n int) (DevicePtr, error)                                 { return 0, errNoCgo }
func MemFree(p DevicePtr) error                                         { return errNoCgo }
func MemAllocHost(n int) (unsafe.Pointer, error)                        { return nil, errNoCgo }
func MemFreeHost(p unsafe.Pointer) error                                { return errNoCgo }
func MemHostRegister(p uintptr, n int, flags uint32) error              { return errNoCgo }
func MemHostUnregister(p uintptr) error                                 { return errNoCgo }
func MemcpyHtoD(dst DevicePtr, src uintptr, n int) error                { return errNoCgo }
func MemcpyDtoH(dst uintptr, src DevicePtr, n int) error                { return errNoCgo }
func MemcpyHtoDBytes(dst DevicePtr, src []byte) error                   { return errNoCgo }
func MemcpyDtoHBytes(dst []byte, src DevicePtr) error                   { return errNoCgo }
func MemcpyDtoD(dst, src DevicePtr, n int) error                        { return errNoCgo }
func MemcpyHtoDAsync(dst DevicePtr, src uintptr, n int, s Stream) error { return errNoCgo }
func MemcpyDtoHAsync(dst uintptr, src DevicePtr, n int, s Stream) error { return errNoCgo }
func MemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) error         { return errNoCgo }
func MemcpyPeer(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n int) error {
	return errNoCgo
}
func MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n int, s Stream) error {
	return errNoCgo
}
func MemsetD8(dst DevicePtr, v byte, n int) error                          { return errNoCgo }
func MemsetD8Async(dst DevicePtr, v byte, n int, s Stream) error           { return errNoCgo }
func MemGetInfo() (free, total int, err error)                             { return 0, 0, errNoCgo }
func MemGetAddressRange(p DevicePtr) (base DevicePtr, size int, err error) { return 0, 0, errNoCgo }
func StreamCreate(flags uint32) (Stream, error)                            { return 0, errNoCgo }
func StreamDestroy(s Stream) error                                         { return errNoCgo }
func StreamSynchronize(s Stream) error                                     { return errNoCgo }
func StreamQuery(s Stream) (done bool, err error)                          { return false, errNoCgo }
func StreamWaitEvent(s Stream, e Event) error                              { return errNoCgo }
func EventCreate(flags uint32) (Event, error)                              { return 0, errNoCgo }
func EventRecord(e Event, s Stream) error                                  { return errNoCgo }
func EventRecordIn(ctx Context, e Event, s Stream) error                   { return errNoCgo }
func StreamQueryIn(ctx Context, s Stream) (done bool, err error)           { return false, errNoCgo }
func StreamSynchronizeIn(ctx Context, s Stream) error                      { return errNoCgo }
func MemcpyHtoDAsyncIn(ctx Context, dst DevicePtr, src uintptr, n int, s Stream) error {
	return errNoCgo
}
func MemcpyDtoHAsyncIn(ctx Context, dst uintptr, src DevicePtr, n int, s Stream) error {
	return errNoCgo
}
func MemcpyDtoDAsyncIn(ctx Context, dst, src DevicePtr, n int, s Stream) error  { return errNoCgo }
func MemsetD8AsyncIn(ctx Context, dst DevicePtr, v byte, n int, s Stream) error { return errNoCgo }
func StreamWaitEventIn(ctx Context, s Stream, e Event) error                    { return errNoCgo }
func EventSynchronizeIn(ctx Context, e Event) error                             { return errNoCgo }
func EventQueryIn(ctx Context, e Event) (done bool, err error)                  { return false, errNoCgo }
func CtxFuncs() (get, set uintptr, err error)                                   { return 0, 0, errNoCgo }
func ErrorOf(call string, code int) error                                       { return errNoCgo }
func EventSynchronize(e Event) error                                            { return errNoCgo }
func EventQuery(e Event) (done bool, err error)                                 { return false, errNoCgo }
func EventElapsedTime(start, end Event) (time.Duration, error)                  { return 0, errNoCgo }
func EventDestroy(e Event) error                                                { return errNoCgo }
func IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error)                         { return IpcMemHandle{}, errNoCgo }
func IpcOpenMemHandle(h IpcMemHandle, flags uint32) (DevicePtr, error)          { return 0, errNoCgo }
func IpcCloseMemHandle(p DevicePtr) error                                       { return errNoCgo }
func IpcGetEventHandle(e Event) (IpcEventHandle, error)                         { return IpcEventHandle{}, errNoCgo }
func IpcOpenEventHandle(h IpcEventHandle) (Event, error)                        { return 0, errNoCgo }
func ModuleLoadData(image []byte) (Module, error)                               { return 0, errNoCgo }
func ModuleGetFunction(m Module, name string) (Function, error)                 { return 0, errNoCgo }
func ModuleUnload(m Module) error                                               { return errNoCgo }
func LaunchKernel(f Function, grid, block Dim3, sharedMem int, s Stream, args ...[]byte) error {
	return errNoCgo
}
func LaunchKernelIn(ctx Context, f Function, grid, block Dim3, sharedMem int, s Stream, args ...[]byte) error {
	return errNoCgo
}
func HasVMM() bool                                               { return false }
func MemGetAllocationGranularity(d Device) (int, error)          { return 0, errNoCgo }
func MemCreate(n int, d Device) (MemHandle, error)               { return 0, errNoCgo }
func MemRelease(h MemHandle) error                               { return errNoCgo }
func MemAddressReserve(n, align int) (DevicePtr, error)          { return 0, errNoCgo }
func MemAddressFree(p DevicePtr, n int) error                    { return errNoCgo }
func MemMap(p DevicePtr, n int, h MemHandle) error               { return errNoCgo }
func MemUnmap(p DevicePtr, n int) error                          { return errNoCgo }
func MemSetAccess(p DevicePtr, n int, d Device) error            { return errNoCgo }
func MemExportToShareableHandle(h MemHandle) (fd int, err error) { return -1, errNoCgo }
func MemImportFromShareableHandle(fd int) (MemHandle, error)     { return 0, errNoCgo }

// TimeCalls needs cgo.
func TimeCalls(kind CallKind, n int, ctx Context, e Event, s Stream) (time.Duration, error) {
	return 0, errNoCgo
}

// NoopCall does nothing without cgo.
func NoopCall() {}

// TimeWait needs cgo.
func TimeWait(poll bool, dst, src DevicePtr, n int, s Stream) (time.Duration, int64, error) {
	return 0, 0, errNoCgo
}
