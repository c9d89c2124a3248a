// Ddp trains a model data-parallel, the way PyTorch's DistributedDataParallel
// does, with gpucomm: every rank holds a shard of the data and a replica of
// the model; the gradient is cut into buckets, and each bucket is averaged
// over the ranks with AllReduce(Avg) on a communication stream as soon as it
// is ready, while the host goes on computing the buckets before it. The
// model is logistic regression on generated data; the gradient is computed
// in Go and copied to device buffers, which is what a real trainer's
// backward kernels would leave there.
//
// Rank 0 prints the loss at the start and at the end. After every step the
// ranks check that their parameters are still identical (AllReduce Max of a
// checksum and of its negation).
//
//	go run ./examples/ddp
//	go build -tags mpi ./examples/ddp && mpirun -np 4 env GPUCOMM_BACKEND=mpi ./ddp
//
// The binary run under mpirun must be built with -tags mpi (Open MPI) or
// -tags mpich; built without, it refuses to start there and says so. It
// takes no arguments: one is a usage error (exit 2).
package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all"
	"github.com/gpucomm/gpucomm/devmem"
)

// config is one training run.
type config struct {
	Features int     // inputs per sample; the model has Features+1 parameters
	PerRank  int     // samples in each rank's shard
	Bucket   int     // parameters per gradient bucket
	Steps    int     // gradient steps
	LR       float64 // learning rate
	Seed     uint64  // the data and the true weights
}

var defaultConfig = config{Features: 64, PerRank: 512, Bucket: 16, Steps: 100, LR: 0.5, Seed: 1}

func main() {
	if code, ok := checkArgs(os.Args[1:], os.Stderr); !ok {
		os.Exit(code)
	}
	c, err := comm.Open("auto")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddp:", err)
		os.Exit(1)
	}
	defer c.Close()
	if _, err := train(c, defaultConfig, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ddp:", err)
		os.Exit(1)
	}
}

// checkArgs refuses any argument, since the program takes none. When ok is
// false the caller exits with code: 0 after -h, 2 for a usage error.
func checkArgs(args []string, stderr io.Writer) (code int, ok bool) {
	fs := flag.NewFlagSet("ddp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ddp (no arguments; GPUCOMM_BACKEND names the backend, the best usable one when unset; run it under mpirun for more ranks)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage: that is no failure
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ddp: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// result is what a rank ends with.
type result struct {
	params          []float64
	first, last     float64 // mean loss over all ranks' data
	reductions      int     // bucket reductions issued
	stillInFlight   int     // of them, still running when the next bucket was ready
	parameterChecks int
}

// sample is sample i of the global data set: standard normal inputs and a
// label from a fixed true weight vector plus noise. Any rank can make any
// sample, so shards need no distribution step.
func sample(cfg config, truth []float64, i int, x []float64) (y float64) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
	z := truth[cfg.Features]
	for j := range x {
		x[j] = rng.NormFloat64()
		z += truth[j] * x[j]
	}
	if z+0.5*rng.NormFloat64() > 0 {
		return 1
	}
	return 0
}

// train runs cfg on this rank; every rank calls it. w gets rank 0's report.
func train(c comm.Communicator, cfg config, w io.Writer) (res result, err error) {
	f, np := cfg.Features, cfg.Features+1
	dev := c.Device()

	// This rank's shard.
	truthRNG := rand.New(rand.NewPCG(cfg.Seed, math.MaxUint64))
	truth := make([]float64, np)
	for j := range truth {
		truth[j] = truthRNG.NormFloat64()
	}
	xs, ys := make([][]float64, cfg.PerRank), make([]float64, cfg.PerRank)
	for i := range xs {
		xs[i] = make([]float64, f)
		ys[i] = sample(cfg, truth, c.Rank()*cfg.PerRank+i, xs[i])
	}

	compute, err := dev.NewStream()
	if err != nil {
		return res, err
	}
	defer compute.Destroy()
	commStream, err := dev.NewStream()
	if err != nil {
		return res, err
	}
	defer commStream.Destroy()
	grads, err := devmem.AllocSlice[float64](dev, np)
	if err != nil {
		return res, err
	}
	defer grads.Free()

	// Buckets are views of one gradient buffer, as DDP's are.
	type bucket struct {
		lo, hi         int
		dev            devmem.Slice[float64]
		ready, reduced *devmem.Event
	}
	var buckets []bucket
	for lo := 0; lo < np; lo += cfg.Bucket {
		b := bucket{lo: lo, hi: min(lo+cfg.Bucket, np)}
		if b.dev, err = grads.Sub(b.lo, b.hi); err != nil {
			return res, err
		}
		if b.ready, err = dev.NewEvent(); err != nil {
			return res, err
		}
		defer b.ready.Destroy()
		if b.reduced, err = dev.NewEvent(); err != nil {
			return res, err
		}
		defer b.reduced.Destroy()
		buckets = append(buckets, b)
	}

	// Each rank draws its own initial parameters; DDP starts them all from
	// rank 0's, by broadcast.
	initRNG := rand.New(rand.NewPCG(cfg.Seed+uint64(c.Rank())+1, 2))
	params := make([]float64, np)
	for j := range params {
		params[j] = 0.01 * initRNG.NormFloat64()
	}
	if err := broadcastParams(c, grads, params); err != nil {
		return res, err
	}

	p, g := make([]float64, cfg.PerRank), make([]float64, np)
	for step := 0; step <= cfg.Steps; step++ {
		// Forward: predictions and this shard's mean loss.
		loss := 0.0
		for i, x := range xs {
			z := params[f]
			for j, v := range x {
				z += params[j] * v
			}
			p[i] = 1 / (1 + math.Exp(-z))
			loss += math.Log1p(math.Exp(-math.Abs(z))) + math.Max(z, 0) - ys[i]*z
		}
		mean, err := allReduceScalar(c, loss/float64(cfg.PerRank), comm.Avg)
		if err != nil {
			return res, err
		}
		if step == 0 {
			res.first = mean
		}
		res.last = mean
		if step == cfg.Steps {
			break // the loss after the last update
		}

		// Backward, last bucket first as autograd produces them. Each bucket
		// goes to the communication stream once its gradient is on the
		// device, while the host computes the next one.
		for b := len(buckets) - 1; b >= 0; b-- {
			bk := buckets[b]
			for j := bk.lo; j < bk.hi; j++ {
				s := 0.0
				for i, x := range xs {
					xj := 1.0 // the bias's input
					if j < f {
						xj = x[j]
					}
					s += (p[i] - ys[i]) * xj
				}
				g[j] = s / float64(cfg.PerRank)
			}
			if b+1 < len(buckets) {
				if done, err := buckets[b+1].reduced.Done(); err == nil && !done {
					res.stillInFlight++
				}
			}
			if err := bk.dev.CopyFrom(g[bk.lo:bk.hi], compute); err != nil {
				return res, err
			}
			if err := bk.ready.Record(compute); err != nil {
				return res, err
			}
			if err := commStream.WaitEvent(bk.ready); err != nil {
				return res, err
			}
			if err := comm.AllReduce(c, bk.dev, bk.dev, comm.Avg, commStream); err != nil {
				return res, err
			}
			if err := bk.reduced.Record(commStream); err != nil {
				return res, err
			}
			res.reductions++
		}
		if err := grads.CopyTo(g, commStream); err != nil {
			return res, err
		}
		if err := commStream.Synchronize(); err != nil {
			return res, err
		}
		for j := range params {
			params[j] -= cfg.LR * g[j]
		}
		if err := checkIdentical(c, params); err != nil {
			return res, fmt.Errorf("step %d: %w", step, err)
		}
		res.parameterChecks++
	}
	res.params = params
	if c.Rank() == 0 {
		fmt.Fprintf(w, "ddp: %d ranks on %s, %d parameters in %d buckets of up to %d, %d samples a rank\n",
			c.Size(), c.Backend(), np, len(buckets), cfg.Bucket, cfg.PerRank)
		fmt.Fprintf(w, "loss at start: %.6f\n", res.first)
		fmt.Fprintf(w, "loss at end:   %.6f after %d steps\n", res.last, cfg.Steps)
		fmt.Fprintf(w, "parameters identical on every rank after each of %d steps\n", res.parameterChecks)
		fmt.Fprintf(w, "bucket reductions still running when the next bucket was ready: %d of %d\n", res.stillInFlight, res.reductions)
	}
	if !(res.last < res.first) {
		return res, fmt.Errorf("the loss did not fall: %v to %v", res.first, res.last)
	}
	return res, nil
}

// broadcastParams replaces params with rank 0's, through buf.
func broadcastParams(c comm.Communicator, buf devmem.Slice[float64], params []float64) error {
	if err := buf.CopyFrom(params, nil); err != nil {
		return err
	}
	if err := comm.Broadcast(c, buf, buf, 0, nil); err != nil {
		return err
	}
	return buf.CopyTo(params, nil)
}

func allReduceScalar(c comm.Communicator, v float64, op comm.Op) (float64, error) {
	buf, err := devmem.AllocSlice[float64](c.Device(), 1)
	if err != nil {
		return 0, err
	}
	defer buf.Free()
	if err := buf.CopyFrom([]float64{v}, nil); err != nil {
		return 0, err
	}
	if err := comm.AllReduce(c, buf, buf, op, nil); err != nil {
		return 0, err
	}
	out := []float64{0}
	if err := buf.CopyTo(out, nil); err != nil {
		return 0, err
	}
	return out[0], nil
}

// checkIdentical fails unless every rank holds the same parameter bits: the
// largest checksum and the largest negated checksum must be one value.
func checkIdentical(c comm.Communicator, params []float64) error {
	h := fnv.New64a()
	for _, v := range params {
		b := math.Float64bits(v)
		h.Write([]byte{byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24), byte(b >> 32), byte(b >> 40), byte(b >> 48), byte(b >> 56)})
	}
	sum := int64(h.Sum64() >> 2) // room to negate
	buf, err := devmem.AllocSlice[int64](c.Device(), 2)
	if err != nil {
		return err
	}
	defer buf.Free()
	v := []int64{sum, -sum}
	if err := buf.CopyFrom(v, nil); err != nil {
		return err
	}
	if err := comm.AllReduce(c, buf, buf, comm.Max, nil); err != nil {
		return err
	}
	if err := buf.CopyTo(v, nil); err != nil {
		return err
	}
	if v[0] != -v[1] {
		return errors.New("the ranks' parameters differ")
	}
	return nil
}
