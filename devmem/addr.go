package devmem

import "unsafe"

// addrOf is the address of a mapping's first byte, for C libraries.
func addrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}
