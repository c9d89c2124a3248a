// Package comm defines gpucomm's Communicator: one interface for collectives
// and point-to-point transfers of device memory among the ranks of a
// multi-GPU program, whatever moves the bytes underneath (an in-process
// group, host-staged MPI, CUDA-aware MPI or NCCL).
//
// It also holds what every backend shares: element types (DType) and
// reductions (Op), the argument checks every backend runs before touching
// memory (Call.Validate), errors, the backend registry (Register, Open,
// Backends, Probe) and generic typed helpers over devmem.Slice.
//
// Operations are stream-ordered: an operation given a stream starts after
// all earlier work on that stream, and later work on that stream sees its
// result; the call may return before the data has moved. With a nil stream
// the operation is complete when the call returns.
//
// comm never imports a backend; programs enable backends with a blank import
// (gpucomm/comm/all enables every one).
package comm
