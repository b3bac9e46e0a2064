package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// RSS returns the resident memory of process pid in bytes, from
// /proc/PID/statm (Linux only).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, fmt.Errorf("cannot read resident memory of process %d: %w", pid, err)
	}
	// size resident shared text lib data dt, in pages
	fields := bytes.Fields(b)
	if len(fields) < 2 {
		return 0, fmt.Errorf("cannot read resident memory of process %d: short statm", pid)
	}
	pages, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read resident memory of process %d: %w", pid, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// rssSampler samples one process's resident memory into a result, first
// under load, then, once told the load is over, for the scenario's
// cooldown.
type rssSampler struct {
	pid   int
	every time.Duration
	res   *Result

	cool    chan time.Duration // the load is over: sample this much longer
	cooling bool               // cooldown was called (by the runner's goroutine only)
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// sampleRSS starts sampling the target's resident memory into res.RSS
// every sc.SampleRSS, when the scenario asks for it and the target has a
// pid; nil otherwise (a nil sampler does nothing). res.RSS belongs to the
// sampler until stop or finish returns.
func (r *runner) sampleRSS(res *Result) *rssSampler {
	if r.sc.SampleRSS <= 0 || r.t.PID <= 0 {
		return nil
	}
	s := &rssSampler{
		pid: r.t.PID, every: r.sc.SampleRSS, res: res,
		cool: make(chan time.Duration, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	go s.loop()
	return s
}

// loop takes a sample at once, then every period. Told the load is over,
// it takes one at once, marked After, goes on every period, and takes the
// last at the end of the cooldown, then stops. A process that cannot be
// read (it exited) stops the sampling.
func (s *rssSampler) loop() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		after bool
		end   time.Time // of the cooldown
		next  = time.Now()
	)
	for {
		b, err := RSS(s.pid)
		if err != nil {
			return
		}
		now := time.Now()
		s.res.RSS = append(s.res.RSS, RSSSample{At: now.Sub(s.res.Started), Bytes: b, After: after})
		if after && !now.Before(end) {
			return
		}
		if next = next.Add(s.every); next.Before(now) {
			next = now.Add(s.every) // fell behind: skip, as a ticker does
		}
		if after && next.After(end) {
			next = end
		}
		timer.Reset(time.Until(next))
		select {
		case <-s.quit:
			select {
			case <-s.cool:
				// Told the load was over before being told to stop (both
				// were ready): the cooldown's first sample is still taken.
				after, end = true, time.Now()
				continue
			default:
			}
			return
		case d := <-s.cool:
			after, end, next = true, time.Now().Add(d), time.Now()
			timer.Stop()
		case <-timer.C:
		}
	}
}

// cooldown tells the sampler the load is over: it samples d longer (none
// when d is not positive), then stops by itself.
func (s *rssSampler) cooldown(d time.Duration) {
	if s == nil || d <= 0 || s.cooling {
		return
	}
	s.cooling = true
	s.cool <- d // buffered, and sent once
}

// finish waits for the cooldown, if one was started, to end, or for ctx
// to end, and then stops the sampler.
func (s *rssSampler) finish(ctx context.Context) {
	if s == nil {
		return
	}
	if s.cooling {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	s.stop()
}

// stop ends the sampling and waits for it to end. It may be called more
// than once.
func (s *rssSampler) stop() {
	if s == nil {
		return
	}
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// coolDown ends the sampling of a run whose load is over: when ctx is
// still live and the scenario has a cooldown, the samplers go on for d
// with nothing sent (the callers have closed their connections, as
// departed clients would), all at once; then they stop.
func coolDown(ctx context.Context, d time.Duration, progress io.Writer, samplers ...*rssSampler) {
	cooling := false
	if ctx.Err() == nil && d > 0 {
		for _, s := range samplers {
			if s != nil {
				s.cooldown(d)
				cooling = true
			}
		}
	}
	if cooling && progress != nil {
		fmt.Fprintf(progress, "cooldown: sampling resident memory for %s with no load\n", d)
	}
	for _, s := range samplers {
		s.finish(ctx)
	}
}
