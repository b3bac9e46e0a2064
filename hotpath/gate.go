package hotpath

// Gate is a concurrency ceiling: a buffered-channel semaphore whose acquire
// never waits. A refused request is refused at once, never queued.
type Gate struct {
	slots chan struct{}
}

// NewGate returns a gate admitting at most n holders at once.
func NewGate(n int) *Gate {
	return &Gate{slots: make(chan struct{}, n)}
}

// TryAcquire takes a slot when one is free. Every true must be paired with
// exactly one Release.
func (g *Gate) TryAcquire() bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release returns a slot taken by TryAcquire.
func (g *Gate) Release() { <-g.slots }

// InFlight is the number of slots held.
func (g *Gate) InFlight() int { return len(g.slots) }
