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
// The caller keeps ownership of the communicators.
func RunGroup(ctx context.Context, cs []comm.Communicator, cfg Config, progress Progress) (*Report, error) {
	if len(cs) == 0 {
		return nil, fmt.Errorf("bench: empty group: %w", comm.ErrInvalidArgument)
	}
	reports := make([]*Report, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p Progress
			if i == 0 {
				p = progress
			}
			reports[i], errs[i] = Run(ctx, c, cfg, p)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("rank %d: %w", i, errs[i])
			}
		}()
	}
	wg.Wait()
	return reports[0], errors.Join(errs...)
}

// RunLocal runs cfg on n in-process ranks of the local backend and returns
// rank 0's report.
func RunLocal(ctx context.Context, n int, cfg Config, progress Progress, opts ...comm.Option) (rep *Report, err error) {
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
