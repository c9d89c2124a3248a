package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// RunGroup runs cfg on every communicator of an in-process group, one
// goroutine a rank, and returns rank 0's report. progress hears rank 0.
// The caller keeps ownership of the communicators; cs[i] must be rank i of
// a group of len(cs), and ctx must not be nil. Local communicators of
// different groups (two NewGroups, or Split groups of different colours)
// are refused; other backends' communicators must be one group too, or
// their ranks wait for each other until a timeout ends it.
//
// A rank that cannot set up stops every rank, as in Run. A rank whose run
// fails later may leave the others waiting for it in a collective: RunGroup
// then aborts the group (comm.Aborter, through the failed rank's
// communicator or, where a wrapper hides its Abort, another rank's), which
// releases them, and returns the failed rank's error and, for each other
// rank that stopped because of it (the abort, or the failed rank's Close),
// an error wrapping ErrRankFailed; a rank that failed on its own keeps its
// own error. The local backend's Abort ends every group of the same
// local.NewGroup, those Split from it included: close them all. Where no
// communicator of the group has an Abort, RunGroup returns as soon as such
// a rank fails, and leaves the goroutines of the ranks still running
// behind: they end, and free what they hold, if their wait ever ends (a
// timeout, say).
func RunGroup(ctx context.Context, cs []comm.Communicator, cfg Config, progress Progress) (*Report, error) {
	if ctx == nil {
		return nil, fmt.Errorf("bench: nil context: %w", comm.ErrInvalidArgument)
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("bench: empty group: %w", comm.ErrInvalidArgument)
	}
	for i, c := range cs {
		if c == nil {
			return nil, fmt.Errorf("bench: communicator %d of the group is nil: %w", i, comm.ErrInvalidArgument)
		}
		if c.Rank() != i || c.Size() != len(cs) {
			return nil, fmt.Errorf("bench: communicator %d of a group of %d is rank %d of %d: want rank %d of %d: %w",
				i, len(cs), c.Rank(), c.Size(), i, len(cs), comm.ErrInvalidArgument)
		}
	}
	if err := oneGroup(cs); err != nil {
		return nil, err
	}
	// A configuration every rank would refuse is said once, not by each,
	// and so is memory the ranks cannot have: they share this process.
	planned, _, maxSend, maxRecv, err := plan(cfg, len(cs))
	if err != nil {
		return nil, configError{err}
	}
	if err := checkMemory(planned, maxSend, maxRecv, len(cs), cs[0].Device(), len(cs)); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	// Rank 0 may go on after RunGroup returns (when another rank failed):
	// from then on its progress reaches nobody.
	var mu sync.Mutex
	over := false
	defer func() {
		mu.Lock()
		over = true
		mu.Unlock()
	}()
	var p Progress
	if progress != nil {
		p = func(done, total int) {
			mu.Lock()
			defer mu.Unlock()
			if !over {
				progress(done, total)
			}
		}
	}
	type outcome struct {
		rank   int
		rep    *Report
		shared bool
		err    error
	}
	outcomes := make(chan outcome, len(cs)) // never blocks a rank, waited for or not
	for i, c := range cs {
		go func() {
			var rp Progress
			if i == 0 {
				rp = p
			}
			rep, shared, err := run(ctx, c, cfg, rp, prepared{memoryChecked: true})
			outcomes <- outcome{i, rep, shared, err}
		}()
	}
	reports := make([]*Report, len(cs))
	errs := make([]error, len(cs))
	raw := make([]outcome, len(cs))
	back := make([]bool, len(cs))
	take := func(o outcome) {
		reports[o.rank], back[o.rank], raw[o.rank] = o.rep, true, o
		if o.err != nil {
			errs[o.rank] = rankError{o.rank, o.err}
		}
	}
	failed := -1
	for range cs {
		o := <-outcomes
		take(o)
		if o.err != nil && !o.shared {
			failed = o.rank
			break
		}
	}
	missing := 0
	for _, ok := range back {
		if !ok {
			missing++
		}
	}
	if failed >= 0 && missing > 0 && abortFor(cs, failed, errs[failed]) {
		// The others stop at once: wait for them.
		for range missing {
			take(<-outcomes)
		}
		// The first rank back with an error may have stopped because of
		// another (it saw that rank's Close): the failed rank is the
		// first whose error is its own.
		if stoppedByAnother(raw[failed].err) {
			for j, o := range raw {
				if o.err != nil && !o.shared && !stoppedByAnother(o.err) {
					failed = j
					break
				}
			}
		}
		for j, o := range raw {
			if j != failed && o.err != nil && !o.shared && stoppedByAnother(o.err) {
				errs[j] = rankError{j, rankFailed{fmt.Sprintf(
					"bench: rank %d failed, and this rank stopped: %v", failed, o.err)}}
			}
		}
	} else if failed >= 0 {
		// The others may be waiting for the failed rank for good. Take
		// those that are back already; give up on the rest.
	drain:
		for {
			select {
			case o := <-outcomes:
				take(o)
			default:
				break drain
			}
		}
		for j, ok := range back {
			if !ok {
				errs[j] = rankError{j, rankFailed{fmt.Sprintf(
					"bench: rank %d failed, and this rank, which may be waiting for it, is left running", failed)}}
			}
		}
	}
	return reports[0], errors.Join(errs...)
}

// rankError is one rank's error among those RunGroup joins: "rank 2: ...".
type rankError struct {
	rank int
	err  error
}

func (e rankError) Error() string { return fmt.Sprintf("rank %d: %v", e.rank, e.err) }
func (e rankError) Unwrap() error { return e.err }

// errorLines are the lines that say err: for RunGroup's, each distinct
// error of its ranks once, with the ranks that met it ("rank 5: why",
// "ranks 0-4 and 6-7: bench: rank 5 could not set up: why"), in the order
// of the first rank to meet it; a job of 65536 in-process ranks one of
// which could not set up printed 65536 lines. Any other error is one line.
func errorLines(err error) []string {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []string{err.Error()}
	}
	var msgs []string
	ranks := map[string][]int{}
	for _, e := range j.Unwrap() {
		var re rankError
		if !errors.As(e, &re) {
			return []string{err.Error()} // not RunGroup's
		}
		m := re.err.Error()
		if _, seen := ranks[m]; !seen {
			msgs = append(msgs, m)
		}
		ranks[m] = append(ranks[m], re.rank)
	}
	lines := make([]string, len(msgs))
	for i, m := range msgs {
		rs := ranks[m]
		if len(rs) == 1 {
			lines[i] = fmt.Sprintf("rank %d: %s", rs[0], m)
			continue
		}
		lines[i] = fmt.Sprintf("ranks %s: %s", rankList(rs), m)
	}
	return lines
}

// oneGroup refuses local communicators that are not all of one group (two
// local.NewGroup groups, or Split groups of different colours): their
// ranks would wait for each other for good. Communicators of other
// backends are not checked: they must be one group, as RunGroup's
// documentation says.
func oneGroup(cs []comm.Communicator) error {
	var first comm.Communicator
	for i, c := range cs {
		if _, ok := c.(*local.Comm); !ok {
			continue
		}
		if first == nil {
			first = c
		} else if !local.SameGroup(first, c) {
			return fmt.Errorf("bench: communicator %d is rank %d of %d of another local group than the communicators before it: "+
				"want the ranks of one group: %w", i, c.Rank(), c.Size(), comm.ErrInvalidArgument)
		}
	}
	return nil
}

// stoppedByAnother reports whether err is a rank's stop caused by another
// rank: the group aborted, or a rank it waited for gone.
func stoppedByAnother(err error) bool {
	return errors.Is(err, comm.ErrAborted) || errors.Is(err, local.ErrPeerClosed)
}

// abortFor aborts the group of cs because rank failed with err, through
// the first communicator of the group that has an Abort (the failed rank's
// first); it reports whether one had.
func abortFor(cs []comm.Communicator, failed int, err error) bool {
	reason := fmt.Errorf("bench: %w", err)
	if comm.Abort(cs[failed], reason) {
		return true
	}
	for _, c := range cs {
		if comm.Abort(c, reason) {
			return true
		}
	}
	return false
}

// RunLocal runs cfg on n in-process ranks of the local backend and returns
// rank 0's report.
func RunLocal(ctx context.Context, n int, cfg Config, progress Progress, opts ...comm.Option) (rep *Report, err error) {
	if ctx == nil {
		return nil, fmt.Errorf("bench: nil context: %w", comm.ErrInvalidArgument)
	}
	cs, err := local.NewGroup(n, opts...)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range cs {
			if cerr := c.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	return RunGroup(ctx, cs, cfg, progress)
}
