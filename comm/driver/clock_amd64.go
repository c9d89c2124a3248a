package driver

// rdtsc reads the CPU's time-stamp counter (clock_amd64.s).
func rdtsc() uint64

// haveTSC: on amd64 the recorder's clock is the time-stamp counter where
// the CPU says it runs at a constant rate and does not stop (clock.go).
const haveTSC = true
