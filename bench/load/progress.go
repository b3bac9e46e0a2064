package load

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// progress writes one line every second, rewritten in place, about the
// phase being run. A nil progress does nothing.
type progress struct {
	w       io.Writer
	start   time.Time
	cur     atomic.Pointer[phase]
	last    atomic.Pointer[phase] // the last phase shown, for the final line
	scratch *hdrhistogram.Histogram
	quit    chan struct{}
	done    chan struct{}
}

func startProgress(w io.Writer, start time.Time) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, start: start, scratch: NewHistogram(), quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// show makes ph the phase reported; nil keeps reporting the last one.
func (p *progress) show(ph *phase) {
	if p == nil {
		return
	}
	p.cur.Store(ph)
	if ph != nil {
		p.last.Store(ph)
	}
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			p.line()
			fmt.Fprintln(p.w)
			return
		case <-t.C:
			p.line()
		}
	}
}

func (p *progress) line() {
	ph := p.last.Load()
	if ph == nil {
		return
	}
	r := ph.r
	completed, errors, p99 := ph.rec.snapshot(p.scratch)
	if p.cur.Load() == nil {
		// Between phases: the recorder is already merged into the totals.
		completed, errors = 0, 0
	}
	fmt.Fprintf(p.w, "\r%-8s %-10s sent %-9d completed %-9d errors %-7d p99 %-10s",
		time.Since(p.start).Truncate(time.Second), r.t.Name, r.sent.Load(),
		r.done.Load()+completed, r.failed.Load()+errors, p99.Round(10*time.Microsecond))
}

// stop writes the final line and waits for the writer to finish.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
}
