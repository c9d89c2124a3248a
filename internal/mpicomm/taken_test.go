package mpicomm

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/nodepath"
)

// owing is a Comm whose send links to ranks 1 and 3 have sent 2 and 5
// chunks, of which the peers have taken none; the returned counters are
// their rings' done counters.
func owing() (*Comm, *atomic.Uint64, *atomic.Uint64) {
	c := &Comm{backend: "test", rank: 0}
	var done1, done3 atomic.Uint64
	for peer, d := range map[int]*atomic.Uint64{1: &done1, 3: &done3} {
		l := c.nodes.Link(nodepath.Key{Peer: peer, Send: true})
		l.Sent.Store(uint64(2 + 3*(peer/3)))
		l.Taken.Store(d)
	}
	c.nodes.Link(nodepath.Key{Peer: 2}) // a receive link owes nothing
	return c, &done1, &done3
}

// captureStderr runs f with standard error going to a pipe and returns what
// it wrote.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	got := make(chan string)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	defer func() { os.Stderr = saved }()
	f()
	os.Stderr = saved
	w.Close()
	return <-got
}

// Without a limit, awaitTaken waits until every chunk sent is taken, and
// past takenWarn says once on standard error whom it waits for.
func TestAwaitTakenWaitsForEveryPeerAndSaysWhom(t *testing.T) {
	c, done1, done3 := owing()
	saved := takenWarn
	takenWarn = 50 * time.Millisecond
	defer func() { takenWarn = saved }()
	var err error
	var took time.Duration
	out := captureStderr(t, func() {
		go func() {
			time.Sleep(150 * time.Millisecond)
			done1.Store(2)
			time.Sleep(100 * time.Millisecond)
			done3.Store(5)
		}()
		start := time.Now()
		err = c.awaitTaken(0)
		took = time.Since(start)
	})
	if err != nil {
		t.Fatalf("awaitTaken: %v", err)
	}
	if took < 250*time.Millisecond {
		t.Errorf("awaitTaken returned after %v, before rank 3 had taken its chunks (at 250ms)", took)
	}
	if strings.Count(out, "gpucomm test rank 0: Close has waited") != 1 ||
		!strings.Contains(out, "rank 1 has taken 0 of the 2 chunks sent it; rank 3 has taken 0 of the 5 chunks sent it") {
		t.Errorf("standard error %q: want one line naming ranks 1 and 3 and what they took", out)
	}
}

// With a limit, awaitTaken fails with ErrTimeout naming the rank that has
// not taken its chunks, and only it.
func TestAwaitTakenPastItsLimitNamesThePeer(t *testing.T) {
	c, done1, _ := owing()
	done1.Store(2)
	start := time.Now()
	err := c.awaitTaken(100 * time.Millisecond)
	took := time.Since(start)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "rank 3 has taken 0 of the 5 chunks sent it") || strings.Contains(err.Error(), "rank 1") {
		t.Errorf("awaitTaken(100ms): %v; want ErrTimeout naming rank 3 alone", err)
	}
	if took < 100*time.Millisecond || took > 2*time.Second {
		t.Errorf("awaitTaken(100ms) returned after %v", took)
	}
	if err := (&Comm{}).awaitTaken(time.Millisecond); err != nil {
		t.Errorf("awaitTaken with no links: %v", err)
	}
}
