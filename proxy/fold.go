package proxy

import (
	"runtime"
	"sync"
)

// foldJob is delivered text past deliveredKeep, to be counted off the
// stream's goroutine.
type foldJob struct {
	t    *turn
	text []byte
}

var (
	foldQueue chan foldJob
	foldStart sync.Once
)

// foldInBackground hands the kept delivered text to the background counter
// and starts a new buffer.
func (t *turn) foldInBackground() {
	foldStart.Do(func() {
		foldQueue = make(chan foldJob, 256)
		for range runtime.GOMAXPROCS(0) {
			go foldWorker()
		}
	})
	t.folds.Add(1)
	foldQueue <- foldJob{t: t, text: t.delivered}
	t.delivered = nil
}

func foldWorker() {
	for j := range foldQueue {
		j.t.folded.Add(int64(countLiterals(j.text)))
		j.t.folds.Done()
	}
}

// foldedTokens waits for the background counts of t's delivered text and
// returns their sum.
func (t *turn) foldedTokens() int64 {
	t.folds.Wait()
	return t.folded.Load()
}
