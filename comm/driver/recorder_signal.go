package driver

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// traceSignals are the signals GPUCOMM_TRACE_SIGNAL may name. USR1 and
// USR2 write the records and let the job go on; TERM, INT and HUP write
// them and then end the process as the signal would have (mpirun sends
// TERM to the other ranks when one dies).
var traceSignals = map[string]syscall.Signal{
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
}

// ParseTraceSignal reads GPUCOMM_TRACE_SIGNAL's value: USR1, SIGUSR1, usr1
// or the signal's number, among USR1, USR2, TERM, INT and HUP.
func ParseTraceSignal(v string) (syscall.Signal, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(v)), "SIG")
	if s, ok := traceSignals[name]; ok {
		return s, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		for _, s := range traceSignals {
			if int(s) == n {
				return s, nil
			}
		}
	}
	return 0, fmt.Errorf("GPUCOMM_TRACE_SIGNAL=%s: want USR1, USR2, TERM, INT or HUP: %w", v, ErrInvalidArgument)
}

var signalOnce sync.Once

// watchSignal starts, once a process, the goroutine that writes every
// record when the signal arrives.
func watchSignal(v string) {
	signalOnce.Do(func() {
		sig, err := ParseTraceSignal(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucomm: %v; no signal writes the flight records\n", err)
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, sig)
		go func() {
			for range ch {
				ReportTraces(SignalReasonPrefix + sig.String())
				if sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGHUP {
					signal.Reset(sig)
					syscall.Kill(os.Getpid(), sig)
					return
				}
			}
		}()
	})
}

// SignalReasonPrefix starts the reason of the records written on the trace
// signal (GPUCOMM_TRACE_SIGNAL): each rank writes its own when the signal
// reaches it, while the job runs.
const SignalReasonPrefix = "signal "

// ReportTraces is WriteTraces, then a line on standard error for each
// record written, or why it was not: what a process about to end (a
// timeout, the trace signal, MPI_Abort of a broken communicator) does.
func ReportTraces(reason string) { reportWrite(WriteTraces(reason)) }

// reportWrite says on standard error where the records went, or why not.
func reportWrite(paths []string, err error) { reported.say(os.Stderr, time.Now(), paths, err) }

// reported is when this process last said it wrote each record: a record
// written again at once (each of a local group's ranks that times out
// writes every rank's, a moment apart) is rewritten in place and said once;
// one written again later (a second signal, a timeout after a signal's
// dump) is said again.
var reported = reportedPaths{said: map[string]time.Time{}}

// sayAgainAfter is how long after a record was said its rewrite is said
// again.
const sayAgainAfter = time.Second

type reportedPaths struct {
	mu   sync.Mutex
	said map[string]time.Time
}

// say writes to w a line for each of paths not said within sayAgainAfter
// of now, and err's.
func (r *reportedPaths) say(w io.Writer, now time.Time, paths []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range paths {
		if last, ok := r.said[p]; !ok || now.Sub(last) >= sayAgainAfter {
			fmt.Fprintf(w, "gpucomm: flight record written to %s\n", p)
			r.said[p] = now
		}
	}
	if err != nil {
		fmt.Fprintf(w, "gpucomm: %v\n", err)
	}
}
