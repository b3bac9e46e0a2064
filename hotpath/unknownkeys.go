package hotpath

import "sync"

// unknownKeys remembers token hashes the KeySource did not hold, each for a
// short time, in a bounded map: a forged token with a valid checksum, sent
// again and again, then costs no lookup. When the map is full, expired
// entries are dropped, and if none had expired, all of them: the memory is
// an optimisation, and forgetting costs one lookup per hash.
type unknownKeys struct {
	mu  sync.Mutex
	max int
	ttl int64               // nanoseconds
	at  map[TokenHash]int64 // when the lookup that found nothing started (Verifier.mono)
}

// has reports whether h is remembered as unknown at now, by a lookup that
// started after the cache was last reset at cleared.
func (u *unknownKeys) has(h TokenHash, now, cleared int64) bool {
	if u.max <= 0 {
		return false
	}
	u.mu.Lock()
	at, ok := u.at[h]
	u.mu.Unlock()
	return ok && at > cleared && now-at < u.ttl
}

func (u *unknownKeys) add(h TokenHash, at, now int64) {
	if u.max <= 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.at) >= u.max {
		for k, t := range u.at {
			if now-t >= u.ttl {
				delete(u.at, k)
			}
		}
		if len(u.at) >= u.max {
			clear(u.at)
		}
	}
	u.at[h] = at
}

func (u *unknownKeys) forget(h TokenHash) {
	u.mu.Lock()
	delete(u.at, h)
	u.mu.Unlock()
}

// rememberUnknown remembers that a lookup started at start found no record
// for h, unless an invalidation for h (a key created under it) or a reset
// arrived since the lookup started.
func (v *Verifier) rememberUnknown(h TokenHash, start int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dropped[h] >= start || v.clearedAt.Load() >= start {
		return
	}
	v.unknown.add(h, start, v.mono())
}
