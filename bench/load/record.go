package load

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Error codes the harness gives requests that never got an answer of their
// own; the others come from the targets' envelopes and stream error frames.
const (
	// CodeBacklog: an open loop's request was due while the in-flight cap
	// was reached, so it was never sent.
	CodeBacklog = "harness_backlog"
	// CodeTimeout: the request ran past the scenario's timeout, or was
	// still in flight when the harness stopped waiting at the end of a run.
	CodeTimeout = "harness_timeout"
	// CodeTransport: no response: the connection could not be made, or
	// closed or reset before a response head arrived.
	CodeTransport = "transport_error"
	// CodeIncomplete: a stream that ended, or broke, before its terminator
	// without an error frame.
	CodeIncomplete = "stream_incomplete"
	// CodeBadBody: a non-streaming 2xx body that was cut short or is not
	// JSON.
	CodeBadBody = "invalid_body"
)

// maxViolations is how many frame-order violations a result keeps whole.
const maxViolations = 5

// maxMicros is the largest value the histograms hold.
var maxMicros = int64(10 * time.Minute / time.Microsecond)

// outcome is what one request did, filled in by a call and read by the
// recorder.
type outcome struct {
	index     uint64
	status    int
	latency   time.Duration
	ttfb      time.Duration // < 0: no response head
	ttft      time.Duration // < 0: no content frame
	bytes     int64
	frames    int64
	gaps      []int64 // inter-frame gaps, µs
	completed bool
	code      string // error code, when not completed
	violation string
}

// shard is one lock's worth of a recorder.
type shard struct {
	hostile         int64
	hostileByStatus map[int]int64

	mu        sync.Mutex
	latency   *hdrhistogram.Histogram
	ttfb      *hdrhistogram.Histogram
	ttft      *hdrhistogram.Histogram
	inter     *hdrhistogram.Histogram
	requests  int64
	completed int64
	errors    int64
	bytes     int64
	frames    int64
	viol      int64
	byStatus  map[int]int64
	byCode    map[string]int64
	lastEnd   time.Time // end of the last measured request recorded
	_         [64]byte  // keep neighbouring shards' locks off one cache line
}

// recorder gathers the measured requests of one phase. Requests record into
// one of several shards, each under its own lock; Finalize closes the
// recorder, after which late requests are dropped.
type recorder struct {
	shards    []shard
	inflight  atomic.Int64 // measured requests sent and not yet recorded
	finalized bool         // set with every shard lock held

	violMu sync.Mutex
	viol   []string

	target string
}

func newRecorder(target string) *recorder {
	n := min(runtime.GOMAXPROCS(0), 16)
	rec := &recorder{shards: make([]shard, n), target: target}
	for i := range rec.shards {
		s := &rec.shards[i]
		s.latency, s.ttfb, s.ttft, s.inter = NewHistogram(), NewHistogram(), NewHistogram(), NewHistogram()
		s.byStatus = map[int]int64{}
		s.byCode = map[string]int64{}
	}
	return rec
}

// reset empties rec for another phase. Only a recorder whose requests have
// all returned may be reset: a late one would land in the next phase.
func (rec *recorder) reset() {
	for i := range rec.shards {
		s := &rec.shards[i]
		s.mu.Lock() // a progress line may be reading
		s.latency.Reset()
		s.ttfb.Reset()
		s.ttft.Reset()
		s.inter.Reset()
		s.requests, s.completed, s.errors, s.bytes, s.frames, s.viol = 0, 0, 0, 0, 0, 0
		clear(s.byStatus)
		clear(s.byCode)
		s.lastEnd = time.Time{}
		s.mu.Unlock()
	}
	for i := range rec.shards {
		rec.shards[i].mu.Lock()
	}
	rec.inflight.Store(0)
	rec.finalized = false
	for i := range rec.shards {
		rec.shards[i].mu.Unlock()
	}
	rec.violMu.Lock()
	rec.viol = rec.viol[:0]
	rec.violMu.Unlock()
}

// sent notes a measured request leaving; every sent is matched by one
// record or counted as abandoned by finalize.
func (rec *recorder) sent() { rec.inflight.Add(1) }

// record adds one measured request that was sent. It reports false when the
// recorder was finalized first: the request was already counted as
// abandoned.
func (rec *recorder) record(shardHint uint32, o *outcome) bool {
	s := &rec.shards[int(shardHint)%len(rec.shards)]
	now := time.Now()
	s.mu.Lock()
	if rec.finalized {
		s.mu.Unlock()
		return false
	}
	rec.inflight.Add(-1)
	s.add(o)
	if now.After(s.lastEnd) {
		s.lastEnd = now
	}
	s.mu.Unlock()
	if o.violation != "" {
		rec.violation(o)
	}
	return true
}

// recordVariant records one measured request of variant v: an ordinary one
// in the figures, a hostile one only in its own counts.
func (rec *recorder) recordVariant(shardHint uint32, v *variant, o *outcome) bool {
	if v.hostile == "" {
		return rec.record(shardHint, o)
	}
	s := &rec.shards[int(shardHint)%len(rec.shards)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.finalized {
		return false
	}
	rec.inflight.Add(-1)
	s.hostile++
	if s.hostileByStatus == nil {
		s.hostileByStatus = map[int]int64{}
	}
	s.hostileByStatus[o.status]++
	return true
}

// backlog counts a measured request that was never sent.
func (rec *recorder) backlog(shardHint uint32) {
	s := &rec.shards[int(shardHint)%len(rec.shards)]
	s.mu.Lock()
	if !rec.finalized {
		s.requests++
		s.errors++
		s.byCode[CodeBacklog]++
	}
	s.mu.Unlock()
}

func (s *shard) add(o *outcome) {
	s.requests++
	if o.completed {
		s.completed++
	} else {
		s.errors++
	}
	if o.status > 0 {
		s.byStatus[o.status]++
	}
	if o.code != "" {
		s.byCode[o.code]++
	}
	s.bytes += o.bytes
	s.frames += o.frames
	recordDur(s.latency, o.latency)
	if o.ttfb >= 0 {
		recordDur(s.ttfb, o.ttfb)
	}
	if o.ttft >= 0 {
		recordDur(s.ttft, o.ttft)
	}
	for _, g := range o.gaps {
		_ = s.inter.RecordValue(min(max(g, 0), maxMicros))
	}
	if o.violation != "" {
		s.viol++
	}
}

func recordDur(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(int64(d/time.Microsecond), 0), maxMicros))
}

func (rec *recorder) violation(o *outcome) {
	rec.violMu.Lock()
	if len(rec.viol) < maxViolations {
		rec.viol = append(rec.viol, rec.target+" request "+strconv.FormatUint(o.index, 10)+": "+o.violation)
	}
	rec.violMu.Unlock()
}

// finalize closes the recorder and counts the measured requests still in
// flight as errors with code harness_timeout; it returns how many.
func (rec *recorder) finalize() int64 {
	for i := range rec.shards {
		rec.shards[i].mu.Lock()
	}
	rec.finalized = true
	n := rec.inflight.Load()
	if n > 0 {
		s := &rec.shards[0]
		s.requests += n
		s.errors += n
		s.byCode[CodeTimeout] += n
	}
	for i := range rec.shards {
		rec.shards[i].mu.Unlock()
	}
	return n
}

// mergeInto adds the recorder's figures to res. Call it after finalize.
func (rec *recorder) mergeInto(res *Result) {
	for i := range rec.shards {
		s := &rec.shards[i]
		s.mu.Lock()
		res.Requests += s.requests
		res.Completed += s.completed
		res.Errors += s.errors
		res.Bytes += s.bytes
		res.Frames += s.frames
		res.FrameViolations += s.viol
		res.Hostile += s.hostile
		for k, v := range s.hostileByStatus {
			if res.HostileByStatus == nil {
				res.HostileByStatus = map[int]int64{}
			}
			res.HostileByStatus[k] += v
		}
		for k, v := range s.byStatus {
			res.ByStatus[k] += v
		}
		for k, v := range s.byCode {
			res.ByCode[k] += v
		}
		res.Latency.Merge(s.latency)
		res.TTFB.Merge(s.ttfb)
		res.TTFT.Merge(s.ttft)
		res.InterFrame.Merge(s.inter)
		s.mu.Unlock()
	}
	rec.violMu.Lock()
	for _, v := range rec.viol {
		if len(res.FirstViolations) < maxViolations {
			res.FirstViolations = append(res.FirstViolations, v)
		}
	}
	rec.violMu.Unlock()
}

// lastEnd returns when the last measured request recorded ended.
func (rec *recorder) lastEnd() time.Time {
	var t time.Time
	for i := range rec.shards {
		s := &rec.shards[i]
		s.mu.Lock()
		if s.lastEnd.After(t) {
			t = s.lastEnd
		}
		s.mu.Unlock()
	}
	return t
}

// snapshot returns running counts and the 99th percentile latency so far,
// merging the shards into scratch.
func (rec *recorder) snapshot(scratch *hdrhistogram.Histogram) (completed, errors int64, p99 time.Duration) {
	scratch.Reset()
	for i := range rec.shards {
		s := &rec.shards[i]
		s.mu.Lock()
		completed += s.completed
		errors += s.errors
		scratch.Merge(s.latency)
		s.mu.Unlock()
	}
	return completed, errors, time.Duration(scratch.ValueAtQuantile(99)) * time.Microsecond
}

// newResult returns an empty result for t under sc.
func newResult(sc *Scenario, t Target) *Result {
	return &Result{
		Scenario:   sc.Name,
		Target:     t.Name,
		BaseURL:    t.BaseURL,
		ByStatus:   map[int]int64{},
		ByCode:     map[string]int64{},
		Latency:    NewHistogram(),
		TTFB:       NewHistogram(),
		TTFT:       NewHistogram(),
		InterFrame: NewHistogram(),
	}
}
