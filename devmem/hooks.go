package devmem

import "github.com/gpucomm/gpucomm/internal/devhook/table"

// gpucomm's own backends reach the stream's queue machinery and the raw
// CUDA handles through internal/devhook, which is not part of devmem's API:
// devmem leaves its unexported methods in internal/devhook/table here, and
// devhook, which imports devmem, takes them from there once, at its init.
func init() {
	table.Set(table.Funcs[*Stream, *Device, Buffer, *Event]{
		HostWait:         (*Stream).hostWait,
		HostCall:         (*Stream).hostCall,
		HostFuncDeferred: (*Stream).hostFuncDeferred,
		Enqueue:          (*Stream).enqueue,
		EnqueueIn:        (*Stream).enqueueIn,
		Task:             (*Stream).task,
		StreamHandle:     (*Stream).handle,
		EventHandle:      (*Event).eventHandle,
		Context:          (*Device).context,
		IsVMM:            Buffer.isVMM,
		OnStaleViews:     onStaleViews,
	})
}

// isVMM reports whether b's memory comes from the driver's virtual memory
// management (AllocShared's VMM memory, and the views of it that OpenIPC
// and Slice return), which CUDA's legacy IPC, and so a CUDA-aware MPI's
// own IPC, cannot share.
func (b Buffer) isVMM() bool {
	if b.a == nil {
		return false
	}
	if b.a.vmm != nil {
		return true
	}
	return b.a.home != nil && b.a.home.vmm != nil
}
