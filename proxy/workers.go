package proxy

import (
	"sync/atomic"
	"time"
)

// job is work handed to a worker.
type job interface{ run() }

// workers runs jobs on goroutines kept between jobs. A new goroutine's
// stack starts at a few KiB and grows by copying itself, and a stream's
// goroutines — its upstream call, its frames, its connection's next
// request — each grew theirs from the start, every stream: 7.5% of the
// gateway's CPU on 24-token streams went to copying stacks (perf,
// docs/performance.md). A kept worker's stack has already grown.
//
// A worker waits workerIdleFor for its next job and then ends; no more
// than maxIdleWorkers wait at once, so a burst of streams leaves no crowd
// of goroutines behind it. The collector shrinks the stack of a worker
// that waits with little of it in use.
type workers struct {
	jobs    chan job     // unbuffered: a send succeeds only when a worker waits
	idle    atomic.Int32 // workers waiting for a job
	live    atomic.Int32 // workers running or waiting
	idleFor time.Duration
	maxIdle int32
}

const (
	workerIdleFor  = 5 * time.Second
	maxIdleWorkers = 1024
)

func newWorkers() *workers {
	return &workers{jobs: make(chan job), idleFor: workerIdleFor, maxIdle: maxIdleWorkers}
}

// Go runs j on a waiting worker, or on a new one when none waits.
func (w *workers) Go(j job) {
	select {
	case w.jobs <- j:
	default:
		w.live.Add(1)
		go w.work(j)
	}
}

func (w *workers) work(j job) {
	defer w.live.Add(-1)
	var wait *time.Timer
	for {
		j.run()
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		if wait == nil {
			wait = time.NewTimer(w.idleFor)
		} else {
			wait.Reset(w.idleFor)
		}
		select {
		case j = <-w.jobs:
			w.idle.Add(-1)
		case <-wait.C:
			w.idle.Add(-1)
			return
		}
	}
}
