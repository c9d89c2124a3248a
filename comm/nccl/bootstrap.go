package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/launcher"
)

// Every step of Open that can fail on one rank alone ends in an agreement
// (an allgather of each rank's outcome), so that a failure anywhere is an
// error on every rank rather than a hang on the others.

// sentinels travel between ranks by index, so errors.Is works on every rank.
var sentinels = []error{nil, comm.ErrInvalidArgument, comm.ErrClosed, comm.ErrTimeout, comm.ErrNotBuilt,
	comm.ErrUnsupported, comm.ErrLibraryNotFound, comm.ErrNotCUDAAware, comm.ErrDuplicateGPU,
	comm.ErrBadHandle, comm.ErrMismatch}

const noSentinel = 255 // a failure that wraps none of them

func sentinelCode(err error) byte {
	if err == nil {
		return 0
	}
	for i, s := range sentinels[1:] {
		if errors.Is(err, s) {
			return byte(i + 1)
		}
	}
	return noSentinel
}

// status is one rank's outcome of a bootstrap step.
type status struct {
	code   byte     // 0: success; else the sentinel index or noSentinel
	debug  bool     // Open only: the rank's Options.Debug
	device [16]byte // Open only: the device's identity
	desc   string   // Open only: the device, for messages
	msg    string   // the error text
}

func (s status) encode() []byte {
	var debug byte
	if s.debug {
		debug = 1
	}
	b := append([]byte{s.code, debug}, s.device[:]...)
	b = binary.AppendUvarint(b, uint64(len(s.desc)))
	b = append(b, s.desc...)
	return append(b, s.msg...)
}

func decodeStatus(b []byte) (status, error) {
	var s status
	if len(b) < 18 {
		return s, fmt.Errorf("bootstrap message of %d bytes: %w", len(b), comm.ErrMismatch)
	}
	s.code, s.debug = b[0], b[1] != 0
	copy(s.device[:], b[2:18])
	n, k := binary.Uvarint(b[18:])
	if k <= 0 || uint64(len(b)-18-k) < n {
		return s, fmt.Errorf("malformed bootstrap message: %w", comm.ErrMismatch)
	}
	s.desc = string(b[18+k : 18+k+int(n)])
	s.msg = string(b[18+k+int(n):])
	return s, nil
}

func statusOf(err error) status {
	if err == nil {
		return status{}
	}
	return status{code: sentinelCode(err), msg: err.Error()}
}

// gatherStatus allgathers every rank's status over b.
func gatherStatus(b boot, mine status) ([]status, error) {
	all, err := b.allgather(mine.encode())
	if err != nil {
		return nil, err
	}
	out := make([]status, len(all))
	for i, m := range all {
		if out[i], err = decodeStatus(m); err != nil {
			return nil, fmt.Errorf("from rank %d: %w", i, err)
		}
	}
	return out, nil
}

// verdict is the error every rank returns for a step: this rank's own
// error, or else one naming the ranks that failed, wrapping the first one's
// sentinel. nil when every rank succeeded.
func verdict(op string, rank int, own error, all []status) error {
	if own != nil {
		return driver.Wrap(Name, op, rank, own)
	}
	var bad []string
	var first byte
	for r, s := range all {
		if s.code != 0 {
			if first == 0 {
				first = s.code
			}
			bad = append(bad, fmt.Sprintf("rank %d: %s", r, s.msg))
		}
	}
	if bad == nil {
		return nil
	}
	var sentinel error
	if int(first) < len(sentinels) {
		sentinel = sentinels[first]
	}
	return driver.Errorf(Name, op, rank, sentinel, "%s failed elsewhere (%s)", op, strings.Join(bad, "; "))
}

// agree shares each rank's outcome of a step and returns verdict's error.
func agree(b boot, op string, own error) error {
	all, err := gatherStatus(b, statusOf(own))
	if err != nil {
		return driver.Errorf(Name, op, b.rank(), nil, "sharing the outcome with the other ranks: %w", err)
	}
	return verdict(op, b.rank(), own, all)
}

// duplicates names the ranks that share a device, or returns nil.
func duplicates(all []status) error {
	byDevice := map[[16]byte][]int{}
	for r, s := range all {
		byDevice[s.device] = append(byDevice[s.device], r)
	}
	var groups []string
	for id, ranks := range byDevice {
		if len(ranks) > 1 {
			groups = append(groups, fmt.Sprintf("%s share %s (%s)", rankList(ranks), cuda.UUID(id), all[ranks[0]].desc))
		}
	}
	if groups == nil {
		return nil
	}
	sort.Strings(groups) // map order is random; every rank must say the same
	return fmt.Errorf("%s; NCCL needs a GPU of its own for each rank: start at most as many ranks per node as it has GPUs, or use the mpi or cudaaware backend: %w",
		strings.Join(groups, "; "), comm.ErrDuplicateGPU)
}

// rankList writes "ranks 0 and 1" or "ranks 0, 2 and 5".
func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	last := len(s) - 1
	return "ranks " + strings.Join(s[:last], ", ") + " and " + s[last]
}

// open opens this process's rank of a communicator over the world boot
// returns; the boot belongs to the communicator from then on.
func open(o comm.Options, world func() (boot, error), lib library) (*Comm, error) {
	b, err := world()
	if err != nil {
		return nil, driver.Errorf(Name, "Open", envRank(), nil, "NCCL's unique id travels by MPI: %w", err)
	}
	c, err := openOn(o, b, lib)
	if err != nil {
		b.free(true) // the error already says what went wrong; MPI stays usable
		return nil, err
	}
	return c, nil
}

func openOn(o comm.Options, b boot, lib library) (*Comm, error) {
	rank := b.rank()
	lr, ls, err := b.localRankSize()
	if err != nil {
		return nil, driver.Errorf(Name, "Open", rank, nil, "finding this rank's node: %w", err)
	}
	dev, err := prepare(o, lib, lr)
	mine := statusOf(err)
	mine.debug = o.Debug
	if err == nil {
		mine.device, mine.desc = lib.deviceID(dev), dev.String()
	}
	all, gerr := gatherStatus(b, mine)
	if gerr != nil {
		return nil, driver.Errorf(Name, "Open", rank, nil, "sharing devices with the other ranks: %w", gerr)
	}
	if err := verdict("Open", rank, err, all); err != nil {
		return nil, err
	}
	// Before any NCCL call, which would hang or fail less clearly.
	if err := duplicates(all); err != nil {
		return nil, driver.Wrap(Name, "Open", rank, err)
	}
	// Debug compares every collective over the bootstrap: on one rank
	// alone it would wait there for ranks that never come, so it is on
	// for all when any rank asked for it (as the mpi backend settles it).
	for _, s := range all {
		o.Debug = o.Debug || s.debug
	}
	eng, err := initOn(b, lib, dev, "Open")
	if err != nil {
		return nil, err
	}
	c, err := newComm(o, lib, b, eng, dev, lr, ls)
	if err != nil {
		return nil, errors.Join(err, eng.destroy())
	}
	return c, nil
}

// prepare opens this rank's device and the library.
func prepare(o comm.Options, lib library, localRank int) (*devmem.Device, error) {
	dev, err := devmem.Open(o.Device, localRank)
	if err != nil {
		return nil, err
	}
	if err := lib.checkDevice(dev); err != nil {
		return nil, err
	}
	if err := lib.load(); err != nil {
		return nil, err
	}
	return dev, nil
}

// initOn makes an engine over the ranks of b: rank 0 makes the unique id,
// MPI_Bcast carries it, every rank joins, and the agreement that follows
// (an allgather, so also a barrier) tells every rank whether all joined.
func initOn(b boot, lib library, dev *devmem.Device, op string) (engine, error) {
	var id [128]byte
	var idErr error
	if b.rank() == 0 {
		id, idErr = lib.uniqueID()
	}
	msg := append([]byte{sentinelCode(idErr)}, id[:]...)
	if idErr != nil {
		msg = append(msg, idErr.Error()...)
	}
	got, err := b.bcast(msg, 0)
	switch {
	case err != nil:
		return nil, driver.Errorf(Name, op, b.rank(), nil, "broadcasting NCCL's unique id: %w", err)
	case len(got) < 1+len(id):
		return nil, driver.Errorf(Name, op, b.rank(), comm.ErrMismatch, "broadcast of NCCL's unique id carried %d bytes", len(got))
	case idErr != nil:
		return nil, driver.Wrap(Name, op, b.rank(), idErr)
	case got[0] != 0:
		var sentinel error
		if int(got[0]) < len(sentinels) {
			sentinel = sentinels[got[0]]
		}
		return nil, driver.Errorf(Name, op, b.rank(), sentinel, "rank 0 could not make NCCL's unique id: %s", got[1+len(id):])
	}
	copy(id[:], got[1:])
	eng, err := lib.initRank(dev, b.size(), b.rank(), id)
	if err := agree(b, op, err); err != nil {
		if eng != nil {
			err = errors.Join(err, eng.destroy())
		}
		return nil, err
	}
	return eng, nil
}

// envRank is this process's rank as the launcher says, for errors from
// before MPI is up; 0 without a launcher.
func envRank() int {
	if j, ok := launcher.FromEnv(); ok {
		return j.Rank
	}
	return 0
}
