package main

// The CLI checks and reports on every backend built into this module, so it
// enables them all; comm/all grows as the backends land.
import _ "github.com/gpucomm/gpucomm/comm/all"
