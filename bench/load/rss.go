package load

import (
	"bytes"
	"fmt"
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

// sampleRSS samples the target's resident memory into res.RSS every
// sc.SampleRSS, when the scenario asks for it and the target has a pid,
// until the returned function is called. A process that cannot be read
// (it exited) stops the sampling.
func (r *runner) sampleRSS(res *Result) (stop func()) {
	every := r.sc.SampleRSS
	if every <= 0 || r.t.PID <= 0 {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			b, err := RSS(r.t.PID)
			if err != nil {
				return
			}
			res.RSS = append(res.RSS, RSSSample{At: time.Since(res.Started), Bytes: b})
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
	}
}
