package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// memoryReturn gives freed heap back to the operating system once the
// gateway has gone quiet. Under load the runtime keeps the heap it freed
// for the next burst, and returns it gradually afterwards — after a long
// busy spell, slower than a fleet's autoscaler or an operator watching
// resident memory expects. Each interval it reads how much the process
// allocated and how much freed heap it still holds; when the allocation
// has almost stopped and the freed heap is worth returning, it returns all
// of it in one collection. A quiet process does that once: the freed heap
// grows again only with allocation, which is no longer quiet.
type memoryReturn struct {
	every time.Duration
	// quietRate is the allocation rate, bytes a second, under which the
	// process counts as quiet; least is the freed heap worth a collection.
	quietRate, least uint64
	log              *slog.Logger

	read    func() (allocated, held uint64)
	release func()

	last uint64 // allocated at the previous reading
}

const (
	quietAllocRate  = 256 << 10 // bytes a second
	leastHeldToFree = 16 << 20
)

func newMemoryReturn(every time.Duration, log *slog.Logger) *memoryReturn {
	return &memoryReturn{every: every, quietRate: quietAllocRate, least: leastHeldToFree, log: log,
		read: readHeap, release: debug.FreeOSMemory}
}

// heapSamples names the runtime metrics readHeap reads: every byte the
// heap has handed out, and the freed heap still held (not yet returned).
var heapSamples = [...]string{"/gc/heap/allocs:bytes", "/memory/classes/heap/free:bytes"}

func readHeap() (allocated, held uint64) {
	var s [len(heapSamples)]metrics.Sample
	for i, name := range heapSamples {
		s[i].Name = name
	}
	metrics.Read(s[:])
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// Run checks every interval until ctx ends.
func (m *memoryReturn) Run(ctx context.Context) {
	m.last, _ = m.read()
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.check()
		}
	}
}

// check takes one reading and returns the freed heap if the process was
// quiet since the previous one. It reports whether it did.
func (m *memoryReturn) check() bool {
	allocated, held := m.read()
	rate := (allocated - m.last) / uint64(max(m.every/time.Second, 1))
	m.last = allocated
	if rate >= m.quietRate || held < m.least {
		return false
	}
	start := time.Now()
	m.release()
	_, after := m.read()
	m.log.Info("returned freed memory to the system", "held_bytes", held, "held_after_bytes", after,
		"took_ms", time.Since(start).Milliseconds())
	return true
}
