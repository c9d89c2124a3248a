//go:build !cgo

package devmem

import "fmt"

// go-nvml loads NVML through cgo's dlopen; a build without cgo has no way in.
func openNVML() (nvmlQuery, error) {
	return nil, fmt.Errorf("devmem: NVML needs a cgo build (CGO_ENABLED=1): %w", ErrLibraryNotFound)
}
