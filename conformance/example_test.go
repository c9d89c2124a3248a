package conformance_test

import (
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/conformance"
)

// Check the in-process backend with four ranks, leaving out the large cases.
func ExampleCheck() {
	rep := conformance.Check(func() ([]comm.Communicator, error) { return local.NewGroup(4) }, conformance.Config{Short: true})
	fmt.Println(rep.Failed())
	// Output: 0
}
