package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/cudaaware"
	_ "github.com/gpucomm/gpucomm/comm/mpi"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv("GPUCOMM_BACKEND"), os.Stderr)
	if errors.Is(err, flag.ErrHelp) { // -h asked for the usage: no failure
		os.Exit(0)
	}
	if err != nil {
		// Refused before MPI starts, so that no rank measures anything.
		var r reported
		if !errors.As(err, &r) {
			fmt.Fprintf(os.Stderr, "pingpong: %v\n", err)
		}
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", who(mpi.World().Rank()), err)
		mpi.World().Abort(1)
	}
}

// who names the rank in an error line: rank is -1 where MPI is not up
// (not built in, or not started yet).
func who(rank int) string {
	if rank < 0 {
		return "pingpong"
	}
	return fmt.Sprintf("pingpong rank %d", rank)
}

type config struct {
	sizes     []int
	chunks    []int
	budget    int // bytes moved per measurement, which sets the iterations
	rounds    int // measurements of each side at each size, interleaved
	cudaaware bool
	copies    bool
	load      bool
	only      map[string]bool // the sides to measure, by name; nil: every side
}

// sideNames are the names of the sides of both tables, for -only.
var sideNames = []string{"host MPI", "staged", "staged via MPI", "unpipelined", "cudaaware", "cudaaware on a stream",
	"MPI on device", "MPI on device after stream sync", "MPI nonblocking on device"}

// keep reports whether the side called name is measured (-only).
func (c config) keep(name string) bool { return c.only == nil || c.only[name] || name == "host MPI" }

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := bench.ParseSize(f)
		if err != nil {
			return nil, err
		}
		if n > math.MaxInt32 {
			return nil, fmt.Errorf("size %q: above 2G-1 bytes, more than an MPI count holds", f)
		}
		out = append(out, int(n))
	}
	return out, nil
}

// defaultSizes is bench's sweep from 8 bytes by factors of 4 up to -max,
// and -max itself.
func defaultSizes(maxSize string) ([]int, error) {
	top, err := bench.ParseSize(maxSize)
	if err != nil {
		return nil, err
	}
	if top < 1 || top > math.MaxInt32 {
		return nil, fmt.Errorf("-max %s: want 1 byte to 2G-1 (an MPI count is an int)", maxSize)
	}
	sweep, err := bench.Sweep(min(8, top), top, 4, 0)
	if err != nil {
		return nil, err
	}
	if sweep[len(sweep)-1] != top {
		sweep = append(sweep, top)
	}
	out := make([]int, len(sweep))
	for i, n := range sweep {
		out[i] = int(n)
	}
	return out, nil
}

// reported is a flag error the flag set has already printed, with the usage.
type reported struct{ error }

// cudaawareSides are the sides that only -cudaaware measures.
var cudaawareSides = []string{"cudaaware", "cudaaware on a stream", "MPI on device", "MPI on device after stream sync", "MPI nonblocking on device"}

// parseConfig reads pingpong's arguments and refuses, before MPI starts,
// whatever would make it measure something other than what it says:
// backendEnv is GPUCOMM_BACKEND, which comm.Open lets override the backend
// pingpong names for each of its sides.
func parseConfig(args []string, backendEnv string, stderr io.Writer) (config, error) {
	var sizes, chunks, maxSize, budget, only string
	var cfg config
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&sizes, "sizes", "", "message sizes, comma-separated (default: 8 B by factors of 4, and -max)")
	fs.StringVar(&maxSize, "max", "256M", "largest message of the default sizes")
	fs.StringVar(&chunks, "chunks", "", fmt.Sprintf("chunk sizes to measure copy and MPI bandwidth at, each %d to %d bytes, e.g. 256K,512K,1M,2M,4M,8M (default: none)", comm.MinChunkBytes, comm.MaxChunkBytes))
	fs.StringVar(&budget, "budget", "1G", "bytes each measurement moves, which sets its iterations")
	fs.IntVar(&cfg.rounds, "rounds", 3, "measurements of each side at each size, taken in turn (side after side, round after round); the table shows each side's median")
	fs.BoolVar(&cfg.cudaaware, "cudaaware", false, "also measure the cudaaware backend (device pointers to MPI)")
	fs.BoolVar(&cfg.copies, "copies", false, "measure device-to-pinned copies alone: on rank 0 alone, on both ranks at once, and alternating between the ranks")
	fs.BoolVar(&cfg.load, "memload", false, "measure rank 0's pinned copies and a host memcpy, each alone and both at once: how much a staged transfer's copies lose to MPI's memcpy traffic")
	fs.StringVar(&only, "only", "", "measure only these sides, by their column names, comma-separated (host MPI is always measured), e.g. \"cudaaware,MPI on device\"; then each round also gives the difference of every pair of sides, and the table their medians")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, reported{err}
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: pingpong takes only flags", fs.Arg(0))
	}
	// comm.Open lets GPUCOMM_BACKEND override the name it is given: every
	// side pingpong labels staged (backend mpi) or cudaaware would then be
	// whatever backend it names.
	if backendEnv != "" {
		switch {
		case cfg.cudaaware:
			return cfg, fmt.Errorf("GPUCOMM_BACKEND=%s would replace the backends pingpong opens (mpi for the staged sides, cudaaware for -cudaaware's), so the columns would be mislabelled: unset GPUCOMM_BACKEND", backendEnv)
		case backendEnv != "mpi":
			return cfg, fmt.Errorf("GPUCOMM_BACKEND=%s would replace backend mpi, which pingpong opens for its staged sides, so their columns would measure %s: unset GPUCOMM_BACKEND", backendEnv, backendEnv)
		}
	}
	var err error
	if only != "" {
		cfg.only = map[string]bool{}
		for _, name := range strings.Split(only, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(sideNames, name) {
				return cfg, fmt.Errorf("-only: no side is called %q; the sides are %q", name, sideNames)
			}
			if !cfg.cudaaware && slices.Contains(cudaawareSides, name) {
				return cfg, fmt.Errorf("-only: side %q is measured only with -cudaaware", name)
			}
			cfg.only[name] = true
		}
	}
	if cfg.sizes, err = parseSizes(sizes); err != nil {
		return cfg, fmt.Errorf("-sizes: %w", err)
	}
	for _, n := range cfg.sizes {
		if n < 1 {
			return cfg, fmt.Errorf("-sizes: a message of %d bytes: want at least 1", n)
		}
	}
	if len(cfg.sizes) == 0 {
		if cfg.sizes, err = defaultSizes(maxSize); err != nil {
			return cfg, err
		}
	}
	if cfg.chunks, err = parseSizes(chunks); err != nil {
		return cfg, fmt.Errorf("-chunks: %w", err)
	}
	for _, n := range cfg.chunks {
		if n < comm.MinChunkBytes || n > comm.MaxChunkBytes {
			return cfg, fmt.Errorf("-chunks: a chunk of %d bytes: want %d to %d", n, comm.MinChunkBytes, comm.MaxChunkBytes)
		}
	}
	b, err := bench.ParseSize(budget)
	if err != nil {
		return cfg, fmt.Errorf("-budget: %w", err)
	}
	cfg.budget = int(b)
	if cfg.rounds < 1 {
		return cfg, fmt.Errorf("-rounds %d: want at least 1", cfg.rounds)
	}
	return cfg, nil
}

func run(cfg config) error {
	// The program's reference keeps MPI up across the communicators.
	if err := mpi.Init(); err != nil {
		return err
	}
	defer mpi.Finalize()
	if mpi.World().Size() < 2 {
		return errors.New("needs at least 2 ranks: run it under mpirun -np 2")
	}
	largest := 0
	for _, n := range cfg.sizes {
		largest = max(largest, n)
	}
	staged, err := comm.Open("mpi")
	if err != nil {
		return err
	}
	defer staged.Close()
	viaMPI, err := comm.Open("mpi", comm.WithNodeBytes(-1))
	if err != nil {
		return err
	}
	defer viaMPI.Close()
	// One chunk a message, within the sizes Open accepts (a message above
	// comm.MaxChunkBytes goes in 1 GiB chunks).
	whole, err := comm.Open("mpi", comm.WithChunkBytes(min(max(largest, comm.MinChunkBytes), comm.MaxChunkBytes)), comm.WithNodeBytes(-1))
	if err != nil {
		return err
	}
	defer whole.Close()
	var direct comm.Communicator
	if cfg.cudaaware {
		if direct, err = comm.Open("cudaaware"); err != nil {
			return err
		}
		defer direct.Close()
	}
	host, err := mpi.World().Dup()
	if err != nil {
		return err
	}
	defer host.Free()
	if staged.Rank() == 0 {
		fmt.Printf("%s, %d ranks, device %v, chunk %d bytes, node path from %d bytes, MPI thread level %v\n\n",
			firstLine(mpi.Version()), staged.Size(), staged.Device(), stagedChunk(staged), nodeBytes(staged), mpi.ThreadLevel())
	}
	if err := pingPongTable(cfg, host, staged, viaMPI, whole, direct); err != nil {
		return err
	}
	if err := allReduceTable(cfg, host, staged, direct); err != nil {
		return err
	}
	if len(cfg.chunks) > 0 {
		if err := chunkTable(cfg, host, staged.Device()); err != nil {
			return err
		}
	}
	if cfg.copies {
		if err := copyTable(cfg, host, staged.Device()); err != nil {
			return err
		}
	}
	if cfg.load {
		return loadTable(cfg, host, staged.Device())
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

func stagedChunk(c comm.Communicator) int {
	if cc, ok := c.(interface{ ChunkBytes() int }); ok {
		return cc.ChunkBytes()
	}
	return 0
}

func nodeBytes(c comm.Communicator) int {
	if cc, ok := c.(interface{ NodeBytes() int }); ok {
		return cc.NodeBytes()
	}
	return 0
}

// iterations moves about budget bytes, within [3, 2000] round trips.
func iterations(budget, n int) int { return min(2000, max(3, budget/max(n, 1))) }

// side is one way of moving a message between ranks 0 and 1.
type side struct {
	name string
	// roundTrip sends n bytes 0 → 1 and back; rank 1 receives first.
	roundTrip func(n int) error
	check     func(n int) error // after the last trip: the data is what rank 0 sent
	free      func() error
}

// pattern is n bytes that differ from any buffer's initial zeros.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + 7)
	}
	return b
}

// mpiSide is plain MPI_Send/MPI_Recv on buf: pinned host memory ("host
// MPI"), or device memory handed to a CUDA-aware MPI ("MPI on device", what
// a C program would do), timed by the same loop as the backends.
func mpiSide(name string, host *mpi.Comm, buf devmem.Buffer, maxN int) (*side, error) {
	return mpiSideAfter(name, host, buf, maxN, nil)
}

// mpiSideAfter is mpiSide calling before() ahead of each MPI call: a C
// program's stream order, cuStreamSynchronize and then MPI (streamSync).
func mpiSideAfter(name string, host *mpi.Comm, buf devmem.Buffer, maxN int, before func() error) (*side, error) {
	if before == nil {
		before = func() error { return nil }
	}
	me := host.Rank()
	if me == 0 {
		if err := devmem.CopyFromHost(buf, pattern(maxN), nil); err != nil {
			return nil, err
		}
	} else if err := devmem.Memset(buf, 0, nil); err != nil {
		return nil, err
	}
	return &side{
		name: name,
		roundTrip: func(n int) error {
			switch me {
			case 0:
				if err := before(); err != nil {
					return err
				}
				if err := host.Send(buf.Addr(), n, mpi.Byte, 1, 0); err != nil {
					return err
				}
				if err := before(); err != nil {
					return err
				}
				_, err := host.Recv(buf.Addr(), n, mpi.Byte, 1, 0)
				return err
			case 1:
				if err := before(); err != nil {
					return err
				}
				if _, err := host.Recv(buf.Addr(), n, mpi.Byte, 0, 0); err != nil {
					return err
				}
				if err := before(); err != nil {
					return err
				}
				return host.Send(buf.Addr(), n, mpi.Byte, 0, 0)
			}
			return nil
		},
		check: func(n int) error {
			if me != 1 {
				return nil
			}
			got := make([]byte, n)
			if err := devmem.CopyToHost(got, buf, nil); err != nil && n > 0 {
				return err
			}
			if !bytes.Equal(got, pattern(n)) {
				return fmt.Errorf("%s: %d bytes arrived wrong", name, n)
			}
			return nil
		},
		free: buf.Free,
	}, nil
}

// mpiNonblockingSide is "MPI on device" through the calls a stream-ordered
// Send or Recv of the cudaaware backend makes on a stream with nothing
// pending: MPI_Isend or MPI_Irecv, one MPI_Test, then MPI_Wait when that
// found it incomplete; so that the backend's cost over MPI's own calls
// shows apart from MPI's cost of nonblocking calls on device memory.
func mpiNonblockingSide(host *mpi.Comm, buf devmem.Buffer, maxN int) (*side, error) {
	s, err := mpiSide("MPI nonblocking on device", host, buf, maxN)
	if err != nil {
		return nil, err
	}
	one := func(r *mpi.Request, err error) error {
		if err != nil {
			return err
		}
		if done, err := r.Test(); err != nil || done {
			return err
		}
		return r.Wait()
	}
	me := host.Rank()
	s.roundTrip = func(n int) error {
		switch me {
		case 0:
			if err := one(host.Isend(buf.Addr(), n, mpi.Byte, 1, 0)); err != nil {
				return err
			}
			return one(host.Irecv(buf.Addr(), n, mpi.Byte, 1, 0))
		case 1:
			if err := one(host.Irecv(buf.Addr(), n, mpi.Byte, 0, 0)); err != nil {
				return err
			}
			return one(host.Isend(buf.Addr(), n, mpi.Byte, 0, 0))
		}
		return nil
	}
	return s, nil
}

// hostSide is plain MPI between pinned host buffers of n bytes.
func hostSide(host *mpi.Comm, dev *devmem.Device, n int) (*side, error) {
	buf, err := dev.AllocPinned(n)
	if err != nil {
		return nil, err
	}
	s, err := mpiSide("host MPI", host, buf, n)
	if err != nil {
		buf.Free()
	}
	return s, err
}

// commSide is a backend's Send and Recv between device buffers: on no
// stream (each call returns when done), or, with onStream, stream-ordered on
// one stream and then Synchronize, as a GPU program calls them.
func commSide(name string, c comm.Communicator, maxN int, onStream bool) (*side, error) {
	buf, err := c.Device().Alloc(maxN)
	if err != nil {
		return nil, err
	}
	var st *devmem.Stream
	if onStream {
		if st, err = c.Device().NewStream(); err != nil {
			return nil, errors.Join(err, buf.Free())
		}
	}
	me := c.Rank()
	if me == 0 {
		if err := devmem.CopyFromHost(buf, pattern(maxN), nil); err != nil {
			return nil, err
		}
	} else if err := devmem.Memset(buf, 0, nil); err != nil {
		return nil, err
	}
	view := func(n int) devmem.Buffer { v, _ := buf.Slice(0, n); return v }
	return &side{
		name: name,
		roundTrip: func(n int) error {
			switch me {
			case 0:
				if err := c.Send(view(n), n, comm.Uint8, 1, st); err != nil {
					return err
				}
				if err := c.Recv(view(n), n, comm.Uint8, 1, st); err != nil {
					return err
				}
			case 1:
				if err := c.Recv(view(n), n, comm.Uint8, 0, st); err != nil {
					return err
				}
				if err := c.Send(view(n), n, comm.Uint8, 0, st); err != nil {
					return err
				}
			}
			return st.Synchronize()
		},
		check: func(n int) error {
			if me != 1 {
				return nil
			}
			got := make([]byte, n)
			if err := devmem.CopyToHost(got, view(n), nil); err != nil {
				return err
			}
			if !bytes.Equal(got, pattern(n)) {
				return fmt.Errorf("%s: %d bytes arrived wrong", name, n)
			}
			return nil
		},
		free: func() error {
			if st != nil {
				return errors.Join(st.Destroy(), buf.Free())
			}
			return buf.Free()
		},
	}, nil
}

// loop times iters runs of do, stopping at its first error.
func loop(iters int, do func() error) (time.Duration, error) {
	start := time.Now()
	for range iters {
		if err := do(); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// warmLoop runs do twice to warm up, meets the other ranks at a barrier, and
// times iters more runs.
func warmLoop(host *mpi.Comm, iters int, do func() error) (time.Duration, error) {
	for range 2 {
		if err := do(); err != nil {
			return 0, err
		}
	}
	if err := host.Barrier(); err != nil {
		return 0, err
	}
	return loop(iters, do)
}

// timeTrips times iters round trips after two to warm up; ranks past 1 only
// wait at the barriers.
func timeTrips(host *mpi.Comm, s *side, n, iters int) (time.Duration, error) {
	d, err := warmLoop(host, iters, func() error { return s.roundTrip(n) })
	if err != nil {
		return 0, err
	}
	if err := s.check(n); err != nil {
		return 0, err
	}
	return d, host.Barrier()
}

// median of ds by bench's statistics (bench.Summarize: the mean of the
// middle two of an even count), so that this program's figures and gpucomm
// bench's are summarised alike.
func median(ds []time.Duration) time.Duration {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = d.Seconds()
	}
	return time.Duration(math.Round(bench.Summarize(s).Median * 1e9))
}

// gbps is n bytes moved in d, in GB/s as bench reports them (bench.GBps).
func gbps(n int, d time.Duration) float64 { return bench.GBps(int64(n), d.Seconds()) }

func pingPongTable(cfg config, host *mpi.Comm, staged, viaMPI, whole, direct comm.Communicator) error {
	maxN := 0
	for _, n := range cfg.sizes {
		maxN = max(maxN, n)
	}
	hs, err := hostSide(host, staged.Device(), maxN)
	if err != nil {
		return err
	}
	sides := []*side{hs}
	for _, b := range []struct {
		name     string
		c        comm.Communicator
		onStream bool
	}{{"staged", staged, false}, {"staged via MPI", viaMPI, false}, {"unpipelined", whole, false}, {"cudaaware", direct, false}, {"cudaaware on a stream", direct, true}} {
		if b.c == nil {
			continue
		}
		s, err := commSide(b.name, b.c, maxN, b.onStream)
		if err != nil {
			return err
		}
		sides = append(sides, s)
	}
	if direct != nil {
		buf, err := direct.Device().Alloc(maxN)
		if err != nil {
			return err
		}
		s, err := mpiSide("MPI on device", host, buf, maxN)
		if err != nil {
			return err
		}
		sides = append(sides, s)
		sync, freeSync, err := streamSync(direct.Device())
		if err != nil {
			return err
		}
		defer freeSync()
		if buf, err = direct.Device().Alloc(maxN); err != nil {
			return err
		}
		if s, err = mpiSideAfter("MPI on device after stream sync", host, buf, maxN, sync); err != nil {
			return err
		}
		sides = append(sides, s)
		if buf, err = direct.Device().Alloc(maxN); err != nil {
			return err
		}
		if s, err = mpiNonblockingSide(host, buf, maxN); err != nil {
			return err
		}
		sides = append(sides, s)
	}
	sides = slices.DeleteFunc(sides, func(s *side) bool {
		if cfg.keep(s.name) {
			return false
		}
		s.free()
		return true
	})
	defer func() {
		for _, s := range sides {
			s.free()
		}
	}()
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.name
	}
	title := fmt.Sprintf("Point-to-point ping-pong, ranks 0 and 1: latency (half a round trip) and bandwidth, median of %d rounds; ratio = staged / host MPI bandwidth", cfg.rounds)
	ratio := func(bw []float64) string {
		if len(sides) > 1 && sides[1].name == "staged" {
			return fmt.Sprintf("%.2f", bw[1]/bw[0])
		}
		return "-"
	}
	return sideTable(cfg, host, title, names, cfg.sizes, "ratio", ratio, func(n int) ([][]time.Duration, error) {
		iters := iterations(cfg.budget, n)
		return measureRounds(cfg.rounds, len(sides), func(i int) (time.Duration, error) {
			d, err := timeTrips(host, sides[i], n, iters)
			return d / time.Duration(2*iters), err
		})
	})
}

// sideTable prints on rank 0, after title, a row a size of each side's
// time (µs) and bandwidth, from the median of the rounds that measure gives
// for the size, and with last a column lastName from the row's bandwidths;
// with -only, each pair's per-round differences follow the table.
func sideTable(cfg config, host *mpi.Comm, title string, names []string, sizes []int, lastName string, last func(bw []float64) string,
	measure func(n int) ([][]time.Duration, error)) error {
	rank0 := host.Rank() == 0
	var diffs strings.Builder
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	if rank0 {
		fmt.Println(title)
		fmt.Fprint(tw, "size\t")
		for _, name := range names {
			fmt.Fprintf(tw, "%s µs\t%s GB/s\t", name, name)
		}
		if last != nil {
			fmt.Fprintf(tw, "%s\t", lastName)
		}
		fmt.Fprint(tw, "\n")
	}
	for _, n := range sizes {
		if rank0 {
			fmt.Fprintf(tw, "%s\t", bench.FormatSize(int64(n)))
		}
		times, err := measure(n)
		if err != nil {
			return err
		}
		if cfg.only != nil {
			pairDiffs(&diffs, n, names, times)
		}
		bw := make([]float64, len(names))
		for i := range names {
			d := median(times[i])
			bw[i] = gbps(n, d)
			if rank0 {
				fmt.Fprintf(tw, "%.2f\t%.3f\t", float64(d.Nanoseconds())/1e3, bw[i])
			}
		}
		if rank0 {
			if last != nil {
				fmt.Fprintf(tw, "%s\t", last(bw))
			}
			fmt.Fprint(tw, "\n")
		}
	}
	if rank0 {
		tw.Flush()
		fmt.Print(diffs.String())
		fmt.Println()
	}
	return nil
}

// measureRounds measures each of n sides rounds times, side after side, so
// that a slow spell of the machine falls on every side alike; each round
// starts one side later than the one before, so that no side always runs
// right after the same other one. It returns each side's times in round
// order.
func measureRounds(rounds, n int, measure func(side int) (time.Duration, error)) ([][]time.Duration, error) {
	times := make([][]time.Duration, n)
	for r := range rounds {
		for k := range n {
			i := (r + k) % n
			d, err := measure(i)
			if err != nil {
				return nil, err
			}
			times[i] = append(times[i], d)
		}
	}
	return times, nil
}

// pairDiffs writes, for each pair of sides but host MPI, the median and
// range of their differences round by round: two sides measured in the
// same round share its slow or fast spell, which the difference cancels.
func pairDiffs(w *strings.Builder, size int, names []string, times [][]time.Duration) {
	for i := 1; i < len(names); i++ {
		for j := i + 1; j < len(names); j++ {
			d := make([]time.Duration, len(times[i]))
			for r := range d {
				d[r] = times[i][r] - times[j][r]
			}
			lo, hi := slices.Min(d), slices.Max(d)
			fmt.Fprintf(w, "  %s: %s − %s, per round: median %+.2f µs (from %+.2f to %+.2f over %d rounds)\n",
				bench.FormatSize(int64(size)), names[i], names[j], us(median(d)), us(lo), us(hi), len(d))
		}
	}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// allReduceSizes is sizes in whole float32s, the AllReduce table's rows, and
// a line that says which sizes it dropped (under one float32) or rounded
// down; "" when none.
func allReduceSizes(sizes []int) (out []int, note string) {
	var dropped, rounded []string
	for _, n := range sizes {
		switch w := n / 4 * 4; {
		case w == 0:
			dropped = append(dropped, strconv.Itoa(n))
		case w != n:
			rounded = append(rounded, fmt.Sprintf("%d to %d", n, w))
			out = append(out, w)
		default:
			out = append(out, w)
		}
	}
	var parts []string
	if len(dropped) > 0 {
		parts = append(parts, "dropped "+strings.Join(dropped, ", ")+" bytes (under one float32)")
	}
	if len(rounded) > 0 {
		parts = append(parts, "rounded "+strings.Join(rounded, ", ")+" bytes down to whole float32s")
	}
	if len(parts) > 0 {
		note = "AllReduce sizes: " + strings.Join(parts, "; ")
	}
	return out, note
}

func allReduceTable(cfg config, host *mpi.Comm, staged, direct comm.Communicator) error {
	maxN := 0
	for _, n := range cfg.sizes {
		maxN = max(maxN, n/4*4)
	}
	maxN = max(maxN, 4)
	pinned, err := staged.Device().AllocPinned(maxN)
	if err != nil {
		return err
	}
	defer pinned.Free()
	type arSide struct {
		name string
		do   func(n int) error
	}
	sides := []arSide{{"host MPI", func(n int) error {
		return host.Allreduce(pinned.Addr(), pinned.Addr(), n/4, mpi.Float32, mpi.Sum)
	}}}
	deviceBuf := func(c comm.Communicator) (devmem.Buffer, error) {
		buf, err := c.Device().Alloc(maxN)
		if err != nil {
			return devmem.Buffer{}, err
		}
		return buf, devmem.Memset(buf, 0, nil)
	}
	for _, b := range []struct {
		name     string
		c        comm.Communicator
		onStream bool
	}{{"staged", staged, false}, {"cudaaware", direct, false}, {"cudaaware on a stream", direct, true}} {
		if b.c == nil {
			continue
		}
		buf, err := deviceBuf(b.c)
		if err != nil {
			return err
		}
		defer buf.Free()
		var st *devmem.Stream
		if b.onStream {
			if st, err = b.c.Device().NewStream(); err != nil {
				return err
			}
			defer st.Destroy()
		}
		c := b.c
		sides = append(sides, arSide{b.name, func(n int) error {
			v, _ := buf.Slice(0, n)
			if err := c.AllReduce(v, v, n/4, comm.Float32, comm.Sum, st); err != nil {
				return err
			}
			return st.Synchronize()
		}})
	}
	if direct != nil {
		// MPI_Allreduce on device buffers from Go, as a C program calls it,
		// alone and after cuStreamSynchronize (a C program's stream order).
		buf, err := deviceBuf(direct)
		if err != nil {
			return err
		}
		defer buf.Free()
		sync, freeSync, err := streamSync(direct.Device())
		if err != nil {
			return err
		}
		defer freeSync()
		sides = append(sides, arSide{"MPI on device", func(n int) error {
			return host.Allreduce(buf.Addr(), buf.Addr(), n/4, mpi.Float32, mpi.Sum)
		}}, arSide{"MPI on device after stream sync", func(n int) error {
			if err := sync(); err != nil {
				return err
			}
			return host.Allreduce(buf.Addr(), buf.Addr(), n/4, mpi.Float32, mpi.Sum)
		}})
	}
	sides = slices.DeleteFunc(sides, func(s arSide) bool { return !cfg.keep(s.name) })
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.name
	}
	sizes, note := allReduceSizes(cfg.sizes)
	title := fmt.Sprintf("AllReduce of float32 (sum, in place) over %d ranks: time per call and algorithm bandwidth (size / time), median of %d rounds", host.Size(), cfg.rounds)
	if note != "" {
		title += "\n" + note
	}
	return sideTable(cfg, host, title, names, sizes, "", nil, func(n int) ([][]time.Duration, error) {
		iters := iterations(cfg.budget/2, n)
		return measureRounds(cfg.rounds, len(sides), func(i int) (time.Duration, error) {
			d, err := warmLoop(host, iters, func() error { return sides[i].do(n) })
			if err != nil {
				return 0, err
			}
			return d / time.Duration(iters), host.Barrier()
		})
	})
}

// chunkTable measures, for each chunk size, what one chunk costs in each
// stage of the pipeline (a device-to-pinned copy, MPI between pinned
// buffers, a pinned-to-device copy) and what the pipeline reaches end to end
// on a message of 32 chunks or 64 MiB, whichever is larger.
func chunkTable(cfg config, host *mpi.Comm, dev *devmem.Device) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	if host.Rank() == 0 {
		fmt.Println("Chunk size: each stage's bandwidth on one chunk, and the pipelined Send/Recv on a message of max(32 chunks, 64M)")
		fmt.Fprint(tw, "chunk\tD2H GB/s\tMPI GB/s\tH2D GB/s\tmessage\tstaged GB/s\thost MPI GB/s\tratio\t\n")
	}
	for _, chunk := range cfg.chunks {
		dbuf, err := dev.Alloc(chunk)
		if err != nil {
			return err
		}
		pbuf, err := dev.AllocPinned(chunk)
		if err != nil {
			return err
		}
		copyBW := func(dst, src devmem.Buffer) (float64, error) {
			iters := iterations(cfg.budget, chunk)
			d, err := loop(iters, func() error { return devmem.CopyN(dst, src, chunk, nil) })
			if err != nil {
				return 0, err
			}
			return gbps(chunk, d/time.Duration(iters)), nil
		}
		d2h, err := copyBW(pbuf, dbuf)
		if err != nil {
			return err
		}
		h2d, err := copyBW(dbuf, pbuf)
		if err != nil {
			return err
		}
		hs, err := hostSide(host, dev, chunk)
		if err != nil {
			return err
		}
		d, err := timeTrips(host, hs, chunk, iterations(cfg.budget, chunk))
		if err != nil {
			return err
		}
		mpiBW := gbps(chunk, d/time.Duration(2*iterations(cfg.budget, chunk)))
		msg := max(32*chunk, 64<<20)
		c, err := comm.Open("mpi", comm.WithChunkBytes(chunk))
		if err != nil {
			return err
		}
		cs, err := commSide("staged", c, msg, false)
		if err != nil {
			return err
		}
		hm, err := hostSide(host, dev, msg)
		if err != nil {
			return err
		}
		iters := iterations(cfg.budget, msg)
		ds, err := timeTrips(host, cs, msg, iters)
		if err != nil {
			return err
		}
		dh, err := timeTrips(host, hm, msg, iters)
		if err != nil {
			return err
		}
		sbw, hbw := gbps(msg, ds/time.Duration(2*iters)), gbps(msg, dh/time.Duration(2*iters))
		if host.Rank() == 0 {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%.2f\t\n", bench.FormatSize(int64(chunk)), d2h, mpiBW, h2d,
				bench.FormatSize(int64(msg)), sbw, hbw, sbw/hbw)
		}
		if err := errors.Join(cs.free(), hm.free(), hs.free(), c.Close(), dbuf.Free(), pbuf.Free()); err != nil {
			return err
		}
	}
	if host.Rank() == 0 {
		tw.Flush()
	}
	return nil
}

// copyTable times one device-to-pinned copy followed by one pinned-to-device
// copy of each size (nil stream, so each waits for itself): on rank 0 while
// the other ranks wait, on every rank at once, and alternating between ranks
// 0 and 1 (a one-byte host message hands the turn over), which is what a
// staged ping-pong asks of a GPU that the two processes share.
func copyTable(cfg config, host *mpi.Comm, dev *devmem.Device) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	me := host.Rank()
	if me == 0 {
		fmt.Println("Copies: one D2H then one H2D copy of each size, µs per pair; alternating adds a 1-byte host message per turn")
		fmt.Fprint(tw, "size\trank 0 alone\tall ranks at once\talternating 0,1\t\n")
	}
	token, err := dev.AllocPinned(1)
	if err != nil {
		return err
	}
	defer token.Free()
	for _, n := range cfg.sizes {
		dbuf, err := dev.Alloc(n)
		if err != nil {
			return err
		}
		pbuf, err := dev.AllocPinned(n)
		if err != nil {
			return err
		}
		pair := func() error {
			return errors.Join(devmem.CopyN(pbuf, dbuf, n, nil), devmem.CopyN(dbuf, pbuf, n, nil))
		}
		iters := min(200, iterations(cfg.budget, n))
		timed := func(who func() bool) (time.Duration, error) {
			if err := host.Barrier(); err != nil {
				return 0, err
			}
			var d time.Duration // what a rank that only waits reports is not printed
			if who() {
				var err error
				if d, err = loop(iters, pair); err != nil {
					return 0, err
				}
			}
			return d / time.Duration(iters), host.Barrier()
		}
		alone, err := timed(func() bool { return me == 0 })
		if err != nil {
			return err
		}
		all, err := timed(func() bool { return true })
		if err != nil {
			return err
		}
		if err := host.Barrier(); err != nil {
			return err
		}
		d, err := loop(iters, func() error {
			switch me {
			case 0:
				if err := pair(); err != nil {
					return err
				}
				if err := host.Send(token.Addr(), 1, mpi.Byte, 1, 9); err != nil {
					return err
				}
				_, err := host.Recv(token.Addr(), 1, mpi.Byte, 1, 9)
				return err
			case 1:
				if _, err := host.Recv(token.Addr(), 1, mpi.Byte, 0, 9); err != nil {
					return err
				}
				if err := pair(); err != nil {
					return err
				}
				return host.Send(token.Addr(), 1, mpi.Byte, 0, 9)
			}
			return nil
		})
		if err != nil {
			return err
		}
		alt := d / time.Duration(2*iters)
		if err := host.Barrier(); err != nil {
			return err
		}
		if me == 0 {
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", bench.FormatSize(int64(n)), us(alone), us(all), us(alt))
		}
		if err := errors.Join(dbuf.Free(), pbuf.Free()); err != nil {
			return err
		}
	}
	if me == 0 {
		tw.Flush()
		fmt.Println()
	}
	return nil
}

// loadTable measures, on rank 0 while the other ranks wait, a pinned
// device-to-host and host-to-device copy of each size and a host memcpy
// (between two pinned buffers, as a shared-memory MPI copies through its
// segment), each alone and then copies and memcpy at once: whether the
// staging copies and MPI's memcpy share one limit, host memory's bandwidth.
func loadTable(cfg config, host *mpi.Comm, dev *devmem.Device) error {
	me := host.Rank()
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	if me == 0 {
		fmt.Println("Copies against host memcpy on rank 0, GB/s (bytes moved once): each alone, then copies while a goroutine memcpys")
		fmt.Fprint(tw, "size\tD2H alone\tH2D alone\tmemcpy alone\tD2H under memcpy\tH2D under memcpy\tmemcpy under copies\t\n")
	}
	for _, n := range cfg.sizes {
		row, err := loadRow(cfg, dev, n, me == 0)
		if err != nil {
			return err
		}
		if err := host.Barrier(); err != nil {
			return err
		}
		if me == 0 {
			fmt.Fprintf(tw, "%s\t", bench.FormatSize(int64(n)))
			for _, v := range row {
				fmt.Fprintf(tw, "%.1f\t", v)
			}
			fmt.Fprint(tw, "\n")
		}
	}
	if me == 0 {
		tw.Flush()
		fmt.Println()
	}
	return nil
}

// loadRow is one row of loadTable; ranks other than rank 0 measure nothing.
func loadRow(cfg config, dev *devmem.Device, n int, measure bool) ([6]float64, error) {
	var row [6]float64
	if !measure || n <= 0 {
		return row, nil
	}
	dbuf, err := dev.Alloc(n)
	if err != nil {
		return row, err
	}
	defer dbuf.Free()
	pinned := make([]devmem.Buffer, 3) // the copies' host side, memcpy's source and destination
	for i := range pinned {
		if pinned[i], err = dev.AllocPinned(n); err != nil {
			return row, err
		}
		defer pinned[i].Free()
	}
	pbuf, src, dst := pinned[0], pinned[1], pinned[2]
	a, okA := src.Bytes()
	b, okB := dst.Bytes()
	if !okA || !okB {
		return row, errors.New("pinned buffers without a host view")
	}
	iters := min(400, iterations(cfg.budget, n))
	rate := func(f func() error) (float64, error) {
		if err := f(); err != nil { // warm: first touches, first use of a path
			return 0, err
		}
		d, err := loop(iters, f)
		if err != nil {
			return 0, err
		}
		return gbps(n, d/time.Duration(iters)), nil
	}
	d2h := func() error { return devmem.CopyN(pbuf, dbuf, n, nil) }
	h2d := func() error { return devmem.CopyN(dbuf, pbuf, n, nil) }
	memcpy := func() error { copy(b, a); return nil }
	for i, f := range []func() error{d2h, h2d, memcpy} {
		if row[i], err = rate(f); err != nil {
			return row, err
		}
	}
	// The memcpy goroutine runs from before the copies are timed until
	// both have been.
	var stop atomic.Bool
	started := make(chan struct{})
	done := make(chan float64)
	go func() {
		copy(b, a)
		close(started)
		var moved int
		start := time.Now()
		for !stop.Load() {
			copy(b, a)
			moved += n
		}
		done <- float64(moved) / time.Since(start).Seconds() / 1e9
	}()
	<-started
	row[3], err = rate(d2h)
	if err == nil {
		row[4], err = rate(h2d)
	}
	stop.Store(true)
	row[5] = <-done
	return row, err
}
