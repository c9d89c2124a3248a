//go:build !amd64

package driver

func rdtsc() uint64 { return 0 }

const haveTSC = false
