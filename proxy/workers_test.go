package proxy

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// funcJob runs a function as a job.
type funcJob func()

func (f funcJob) run() { f() }

// goid is the running goroutine's id, read from its stack header.
func goid() int {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := bytes.Fields(b[:n])
	id, _ := strconv.Atoi(string(f[1]))
	return id
}

// A job handed over while a worker waits runs on that worker: its
// goroutine, with the stack it has grown. A hundred jobs one after another
// run on a few goroutines, not a hundred. (A job handed over while the
// last one's worker is between its job and its wait starts a second
// worker; from then on one of the two is always waiting. Asserting that a
// given job reuses a given worker raced with that moment, and failed once
// under the race detector.)
func TestWorkersReuseAWaitingWorker(t *testing.T) {
	w := newWorkers()
	ids := make(chan int, 1)
	seen := map[int]bool{}
	for range 100 {
		w.Go(funcJob(func() { ids <- goid() }))
		seen[<-ids] = true
	}
	require.Less(t, len(seen), 10, "goroutines that ran 100 jobs one after another")
}

// Jobs that overlap get workers of their own; once done, no more than
// maxIdle wait, and a waiting worker ends after idleFor.
func TestWorkersBoundWhatWaits(t *testing.T) {
	w := newWorkers()
	w.maxIdle, w.idleFor = 3, time.Second
	release := make(chan struct{})
	var started, done sync.WaitGroup
	for range 8 {
		started.Add(1)
		done.Add(1)
		w.Go(funcJob(func() {
			started.Done()
			<-release
			done.Done()
		}))
	}
	started.Wait()
	require.Equal(t, int32(8), w.live.Load(), "eight at once: eight workers")
	close(release)
	done.Wait()
	require.Eventually(t, func() bool { return w.live.Load() == 3 }, 5*time.Second, time.Millisecond,
		"no more than maxIdle wait")
	require.Equal(t, int32(3), w.idle.Load())
	require.Eventually(t, func() bool { return w.live.Load() == 0 && w.idle.Load() == 0 },
		5*time.Second, 5*time.Millisecond, "idle workers end")
}
