// Package all enables every gpucomm backend compiled into this module: import
// it for its side effect, as database/sql drivers are imported,
//
//	import _ "github.com/gpucomm/gpucomm/comm/all"
//
// and comm.Open, comm.Backends and comm.Probe know every backend by name.
// Backends that cannot run on a machine still register and say why in their
// Probe verdict, so importing all never fails at start-up.
//
// It must hold nothing but blank imports.
package all

import (
	_ "github.com/gpucomm/gpucomm/comm/cudaaware"
	_ "github.com/gpucomm/gpucomm/comm/local"
	_ "github.com/gpucomm/gpucomm/comm/mpi"
	_ "github.com/gpucomm/gpucomm/comm/nccl"
)
