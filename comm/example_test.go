package comm_test

import (
	"fmt"
	"log"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all" // every backend compiled in
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// Open picks a backend and gives this process's communicator; each rank
// contributes {1, 2} and every rank receives the sum over the ranks. Run as
// one process it is one rank; under mpirun -np 4 (with a binary built with
// -tags mpi) rank 0 prints "4 ranks: [4 8], sum 12". This is the program of
// README.md's "A short example".
func ExampleOpen() {
	c, err := comm.Open("auto") // or "local", "mpi", "cudaaware", "nccl"; GPUCOMM_BACKEND overrides
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.Device().NewStream()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Destroy()
	x, err := devmem.AllocSlice[float32](c.Device(), 2)
	if err != nil {
		log.Fatal(err)
	}
	defer x.Free()
	if err := x.CopyFrom([]float32{1, 2}, s); err != nil {
		log.Fatal(err)
	}
	if err := comm.AllReduce(c, x, x, comm.Sum, s); err != nil { // in place
		log.Fatal(err)
	}
	total, err := x.ToHost(s) // waits for the stream
	if err != nil {
		log.Fatal(err)
	}
	if c.Rank() == 0 {
		fmt.Printf("%d ranks: %v, sum %v\n", c.Size(), total, total[0]+total[1])
	}
	// Output: 1 ranks: [1 2], sum 3
}

// The README's example is ExampleOpen's body, word for word, so that the
// program a reader copies is the one that compiles and runs here.
func TestReadmeExampleIsExampleOpen(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)## A short example\n.*?```go\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no Go block under \"## A short example\"")
	}
	body := regexp.MustCompile(`(?s)func main\(\) \{\n(.*?)\n\}\n`).FindSubmatch(block[1])
	if body == nil {
		t.Fatalf("README's example has no func main:\n%s", block[1])
	}
	example := regexp.MustCompile(`(?s)func ExampleOpen\(\) \{\n(.*?)\n\t// Output:`).FindSubmatch(src)
	if example == nil {
		t.Fatal("no ExampleOpen body")
	}
	if strings.TrimSpace(string(body[1])) != strings.TrimSpace(string(example[1])) {
		t.Errorf("README's main differs from ExampleOpen:\nREADME:\n%s\nExampleOpen:\n%s", body[1], example[1])
	}
	for _, imp := range []string{`"github.com/gpucomm/gpucomm/comm"`, `_ "github.com/gpucomm/gpucomm/comm/all"`, `"github.com/gpucomm/gpucomm/devmem"`, `"fmt"`, `"log"`} {
		if !strings.Contains(string(block[1]), imp) {
			t.Errorf("README's example does not import %s", imp)
		}
	}
}

// A backend's extras are found by a type assertion: the local backend has
// no StreamWaiter, so the program synchronizes the stream itself.
func ExampleStreamWaiter() {
	cs, err := local.NewGroup(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	c := cs[0]
	defer c.Close()
	s, err := c.Device().NewStream()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Destroy()
	if w, ok := c.(comm.StreamWaiter); ok {
		err = w.Wait(s)
	} else {
		err = s.Synchronize()
	}
	_, staged := c.(comm.Staging)
	fmt.Println(err, staged)
	// Output: <nil> false
}
