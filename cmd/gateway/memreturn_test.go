package main

import (
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeHeap plays the runtime's side of memoryReturn.
type fakeHeap struct {
	allocated, held uint64
	released        int
}

func (f *fakeHeap) returner() *memoryReturn {
	m := newMemoryReturn(10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.read = func() (uint64, uint64) { return f.allocated, f.held }
	m.release = func() { f.released++; f.held = 0 }
	return m
}

func TestMemoryReturnWaitsForQuiet(t *testing.T) {
	f := &fakeHeap{held: 64 << 20}
	m := f.returner()

	// Busy: 10 MiB a second allocated, however much is held.
	f.allocated += 100 << 20
	assert.False(t, m.check())
	f.allocated += 100 << 20
	assert.False(t, m.check())
	assert.Zero(t, f.released)

	// Quiet: a trickle of allocation; the freed heap goes back once.
	f.allocated += 64 << 10
	assert.True(t, m.check())
	assert.Equal(t, 1, f.released)
	f.allocated += 64 << 10
	assert.False(t, m.check(), "nothing held: no second collection")

	// Quiet, but too little held to be worth a collection.
	f.held = 4 << 20
	assert.False(t, m.check())

	// The next busy spell, then quiet again: returned again.
	f.allocated += 200 << 20
	f.held = 80 << 20
	assert.False(t, m.check())
	assert.True(t, m.check())
	assert.Equal(t, 2, f.released)
}

// The real runtime: freed heap the collector keeps is returned.
func TestMemoryReturnReleasesFreedHeap(t *testing.T) {
	keep := make([][]byte, 0, 96)
	for range 96 {
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.KeepAlive(keep)
	keep = nil
	runtime.GC() // the 96 MiB are free, and mostly still held
	_, held := readHeap()
	if held < leastHeldToFree {
		t.Fatalf("the runtime returned the heap by itself (%d bytes held); nothing to test", held)
	}
	m := newMemoryReturn(time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.last, _ = readHeap()
	require.True(t, m.check())
	_, after := readHeap()
	assert.Less(t, after, uint64(leastHeldToFree), "held before %d", held)
}
