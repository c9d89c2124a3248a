package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// EnvLib names the environment variable that overrides the library path.
const EnvLib = "GPUCOMM_CUDA_LIB"

// Handles. The zero Stream is CUDA's legacy default stream.
type (
	Device         int32   // a device ordinal as the driver numbers it
	DevicePtr      uint64  // a device address (CUdeviceptr)
	Context        uintptr // CUcontext
	Stream         uintptr // CUstream; its value is what NCCL takes as cudaStream_t
	Event          uintptr // CUevent
	Module         uintptr // CUmodule
	Function       uintptr // CUfunction
	IpcMemHandle   [64]byte
	IpcEventHandle [64]byte // CUipcEventHandle: an EventInterprocess event, for another process
	UUID           [16]byte
	MemHandle      uint64 // CUmemGenericAllocationHandle: a VMM allocation
)

// Dim3 is a grid or block shape for LaunchKernel.
type Dim3 struct{ X, Y, Z uint32 }

// Attribute selects a device property for DeviceAttribute (CUdevice_attribute).
type Attribute int32

const (
	AttrMaxThreadsPerBlock     Attribute = 1
	AttrWarpSize               Attribute = 10
	AttrMultiprocessorCount    Attribute = 16
	AttrCanMapHostMemory       Attribute = 19
	AttrPCIBusID               Attribute = 33
	AttrPCIDeviceID            Attribute = 34
	AttrUnifiedAddressing      Attribute = 41
	AttrPCIDomainID            Attribute = 50
	AttrComputeCapabilityMajor Attribute = 75
	AttrComputeCapabilityMinor Attribute = 76
	// AttrVirtualMemoryManagementSupported: cuMemCreate, cuMemMap and the rest work.
	AttrVirtualMemoryManagementSupported Attribute = 102
	// AttrHandleTypePosixFDSupported: cuMemExportToShareableHandle gives POSIX descriptors.
	AttrHandleTypePosixFDSupported Attribute = 103
)

// Flags for StreamCreate, EventCreate, IpcOpenMemHandle and MemHostRegister.
const (
	StreamDefault     uint32 = 0
	StreamNonBlocking uint32 = 1 // does not synchronise with the legacy default stream

	EventDefault       uint32 = 0
	EventBlockingSync  uint32 = 1
	EventDisableTiming uint32 = 2 // cheaper; needed for events used only to order streams
	EventInterprocess  uint32 = 4 // must be combined with EventDisableTiming

	IpcMemLazyEnablePeerAccess uint32 = 1

	MemHostRegisterPortable  uint32 = 1
	MemHostRegisterDeviceMap uint32 = 2
)

// CUresult values that callers test for. Names are CUDA's own, so that they
// can be searched for in NVIDIA's documentation.
const (
	CUDA_SUCCESS                              = 0
	CUDA_ERROR_INVALID_VALUE                  = 1
	CUDA_ERROR_OUT_OF_MEMORY                  = 2
	CUDA_ERROR_NOT_INITIALIZED                = 3
	CUDA_ERROR_DEINITIALIZED                  = 4
	CUDA_ERROR_STUB_LIBRARY                   = 34
	CUDA_ERROR_NO_DEVICE                      = 100
	CUDA_ERROR_INVALID_DEVICE                 = 101
	CUDA_ERROR_INVALID_IMAGE                  = 200
	CUDA_ERROR_INVALID_CONTEXT                = 201
	CUDA_ERROR_MAP_FAILED                     = 205
	CUDA_ERROR_ALREADY_MAPPED                 = 208
	CUDA_ERROR_NO_BINARY_FOR_GPU              = 209
	CUDA_ERROR_PEER_ACCESS_UNSUPPORTED        = 217
	CUDA_ERROR_INVALID_PTX                    = 218
	CUDA_ERROR_UNSUPPORTED_PTX_VERSION        = 222
	CUDA_ERROR_INVALID_HANDLE                 = 400
	CUDA_ERROR_NOT_FOUND                      = 500
	CUDA_ERROR_NOT_READY                      = 600
	CUDA_ERROR_ILLEGAL_ADDRESS                = 700
	CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES        = 701
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED    = 704
	CUDA_ERROR_PEER_ACCESS_NOT_ENABLED        = 705
	CUDA_ERROR_CONTEXT_IS_DESTROYED           = 709
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED     = 713
	CUDA_ERROR_LAUNCH_FAILED                  = 719
	CUDA_ERROR_NOT_PERMITTED                  = 800
	CUDA_ERROR_NOT_SUPPORTED                  = 801
	CUDA_ERROR_SYSTEM_DRIVER_MISMATCH         = 803
	CUDA_ERROR_UNKNOWN                        = 999
)

// goErrorNames names codes when the library cannot: before it is loaded, or
// when cuGetErrorName does not know a code.
var goErrorNames = map[int]string{
	CUDA_SUCCESS:                              "CUDA_SUCCESS",
	CUDA_ERROR_INVALID_VALUE:                  "CUDA_ERROR_INVALID_VALUE",
	CUDA_ERROR_OUT_OF_MEMORY:                  "CUDA_ERROR_OUT_OF_MEMORY",
	CUDA_ERROR_NOT_INITIALIZED:                "CUDA_ERROR_NOT_INITIALIZED",
	CUDA_ERROR_DEINITIALIZED:                  "CUDA_ERROR_DEINITIALIZED",
	CUDA_ERROR_STUB_LIBRARY:                   "CUDA_ERROR_STUB_LIBRARY",
	CUDA_ERROR_NO_DEVICE:                      "CUDA_ERROR_NO_DEVICE",
	CUDA_ERROR_INVALID_DEVICE:                 "CUDA_ERROR_INVALID_DEVICE",
	CUDA_ERROR_INVALID_IMAGE:                  "CUDA_ERROR_INVALID_IMAGE",
	CUDA_ERROR_INVALID_CONTEXT:                "CUDA_ERROR_INVALID_CONTEXT",
	CUDA_ERROR_MAP_FAILED:                     "CUDA_ERROR_MAP_FAILED",
	CUDA_ERROR_ALREADY_MAPPED:                 "CUDA_ERROR_ALREADY_MAPPED",
	CUDA_ERROR_NO_BINARY_FOR_GPU:              "CUDA_ERROR_NO_BINARY_FOR_GPU",
	CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:        "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	CUDA_ERROR_INVALID_PTX:                    "CUDA_ERROR_INVALID_PTX",
	CUDA_ERROR_UNSUPPORTED_PTX_VERSION:        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	CUDA_ERROR_INVALID_HANDLE:                 "CUDA_ERROR_INVALID_HANDLE",
	CUDA_ERROR_NOT_FOUND:                      "CUDA_ERROR_NOT_FOUND",
	CUDA_ERROR_NOT_READY:                      "CUDA_ERROR_NOT_READY",
	CUDA_ERROR_ILLEGAL_ADDRESS:                "CUDA_ERROR_ILLEGAL_ADDRESS",
	CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:    "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:        "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	CUDA_ERROR_CONTEXT_IS_DESTROYED:           "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:     "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	CUDA_ERROR_LAUNCH_FAILED:                  "CUDA_ERROR_LAUNCH_FAILED",
	CUDA_ERROR_NOT_PERMITTED:                  "CUDA_ERROR_NOT_PERMITTED",
	CUDA_ERROR_NOT_SUPPORTED:                  "CUDA_ERROR_NOT_SUPPORTED",
	CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:         "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	CUDA_ERROR_UNKNOWN:                        "CUDA_ERROR_UNKNOWN",
}

func goErrorName(code int) string {
	if n, ok := goErrorNames[code]; ok {
		return n
	}
	return fmt.Sprintf("CUDA_ERROR_%d", code)
}

// Error is a failed driver call.
type Error struct {
	Call    string // the API name, without its _v2 suffix: "cuMemAlloc"
	Code    int    // the CUresult
	Name    string // CUDA's name for Code: "CUDA_ERROR_OUT_OF_MEMORY"
	Message string // cuGetErrorString's text, when the library gave one
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap lets errors.Is match the shared sentinels for the codes that mean
// the same thing.
func (e *Error) Unwrap() error {
	switch e.Code {
	case CUDA_ERROR_INVALID_VALUE:
		return errs.ErrInvalidArgument
	case CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
		return errs.ErrUnsupported
	}
	return nil
}

// IsCode reports whether err is, or wraps, an *Error with the given CUresult.
func IsCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// WithContext runs fn on one OS thread with ctx current, then restores the
// context that was current before (none included: Go's threads are shared,
// and code outside WithContext, such as a CUDA-aware MPI's own CUDA calls,
// must not find a context of ours that another device's work left there).
// Calls that use the current context belong inside fn; see the package
// documentation for why.
func WithContext(ctx Context, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := CtxGetCurrent()
	if err != nil {
		return err
	}
	if prev != ctx {
		if err := CtxSetCurrent(ctx); err != nil {
			return err
		}
		// Another library on this thread may rely on the context it set.
		defer CtxSetCurrent(prev)
	}
	return fn()
}

// ArgValue lists the types that Arg packs. Go's int and uint are left out on
// purpose: their size differs from C's int, the classic packing bug.
type ArgValue interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 |
		~float32 | ~float64 | ~uintptr
}

// Arg packs one kernel argument at its C size (DevicePtr packs as a pointer).
func Arg[T ArgValue](v T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v))
}

// String formats u the way nvidia-smi does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (u UUID) String() string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// CallKind is one of the calls TimeCalls makes.
type CallKind int

const (
	CallNothing          CallKind = iota // the loop alone
	CallCtxGetCurrent                    // cuCtxGetCurrent
	CallEventRecord                      // cuEventRecord(e, s), the context assumed current
	CallEventRecordInCtx                 // EventRecordIn's C side: the context checked, then the record
)
