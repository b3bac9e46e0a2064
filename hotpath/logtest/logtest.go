// Package logtest holds what tests need to read a logger's output.
package logtest

import (
	"strings"
	"sync"
)

// Buffer collects log output written from many goroutines at once: a
// slog handler over it may be shared by every request a test makes.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
