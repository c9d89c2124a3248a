package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpucomm/gpucomm/devmem"
)

func init() { infoSections = append(infoSections, writeTopology) }

// writeTopology adds the GPU topology (nvidia-smi topo -m's matrix and a
// device list) to info. A machine without NVML has no GPU to describe: one
// line says so, and it is not a failure.
func writeTopology(w io.Writer) error {
	topo, err := devmem.Topology()
	if errors.Is(err, devmem.ErrLibraryNotFound) {
		_, err := fmt.Fprintf(w, "GPU topology: not available (%v)\n", err)
		return err
	}
	if err != nil {
		return fmt.Errorf("GPU topology: %w", err)
	}
	if _, err := fmt.Fprintln(w, "GPU topology (NVML):"); err != nil {
		return err
	}
	return topo.Format(w)
}
