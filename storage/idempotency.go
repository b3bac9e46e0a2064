package storage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/edgegw/gateway/hotpath"
)

// RedisIdempotency is the fleet-wide hotpath.IdempotencyStore: every
// gateway process sees the others' claims and replies.
//
// Each (scope, Idempotency-Key) is one string key,
// <prefix>idem:<scope>:<hex SHA-256 of the Idempotency-Key>, so the client's
// key never appears in Redis and a long one costs no more than a short one.
// Its value is one of
//
//	'P' | body hash (32 bytes) | claim token (16 random bytes)   in flight, expires after the lease
//	'D' | body hash (32 bytes) | hotpath.AppendReplay encoding   stored, expires after the TTL
//
// The leading byte also versions the stored form: a later encoding takes
// another letter, and the scripts treat anything but 'P' as stored.
//
// Begin, Complete, Renew and Abandon are one script call each, one round
// trip, bounded by RedisCallTimeout whatever the caller's deadline.
type RedisIdempotency struct {
	client     rueidis.Client
	prefix     string
	ttl, lease time.Duration
}

var _ hotpath.IdempotencyStore = (*RedisIdempotency)(nil)

// NewRedisIdempotency returns a store on c whose keys start with prefix.
// Replies live for ttl and unsettled claims for lease; zero or negative
// values take hotpath.DefaultIdempotencyTTL and
// hotpath.DefaultIdempotencyLease.
func NewRedisIdempotency(c rueidis.Client, prefix string, ttl, lease time.Duration) *RedisIdempotency {
	if ttl <= 0 {
		ttl = hotpath.DefaultIdempotencyTTL
	}
	if lease <= 0 {
		lease = hotpath.DefaultIdempotencyLease
	}
	return &RedisIdempotency{client: c, prefix: prefix, ttl: ttl, lease: lease}
}

const (
	idemPending = 'P'
	idemStored  = 'D'
	// idemHeader is the kind byte and the body hash that start every value.
	idemHeader = 1 + sha256.Size
)

// idemBegin reads the key and, when it is free, claims it; all in one
// script, so two processes cannot both claim a key.
//
// KEYS[1]: the key. ARGV[1]: the claim to write ('P', body hash, token).
// ARGV[2]: the lease in milliseconds.
// Returns 0 when claimed, 1 when the key holds another body, 2 when a
// request with this body is in flight, or the stored reply's encoding.
var idemBegin = rueidis.NewLuaScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX')
  return 0
end
if string.sub(v, 2, 33) ~= string.sub(ARGV[1], 2, 33) then
  return 1
end
if string.sub(v, 1, 1) == 'P' then
  return 2
end
return string.sub(v, 34)
`)

// idemComplete replaces the claim with the stored reply, only while the
// key still holds this very claim.
//
// KEYS[1]: the key. ARGV[1]: the claim Begin wrote. ARGV[2]: the stored
// value. ARGV[3]: the TTL in milliseconds. Returns 1 when stored, else 0.
var idemComplete = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// idemAbandon deletes the claim, only while the key still holds it.
//
// KEYS[1]: the key. ARGV[1]: the claim Begin wrote. Returns 1 when deleted.
var idemAbandon = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// idemRenew holds the claim for another lease, only while the key still
// holds it.
//
// KEYS[1]: the key. ARGV[1]: the claim Begin wrote. ARGV[2]: the lease in
// milliseconds. Returns 1 when renewed, else 0.
var idemRenew = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// Lease implements hotpath.IdempotencyStore.
func (s *RedisIdempotency) Lease() time.Duration { return s.lease }

func (s *RedisIdempotency) key(scope, key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 0, len(s.prefix)+len("idem:")+len(scope)+1+2*sha256.Size)
	b = append(b, s.prefix...)
	b = append(b, "idem:"...)
	b = append(b, scope...)
	b = append(b, ':')
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}

// millis renders d for PX, at least one millisecond.
func millis(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// Begin implements hotpath.IdempotencyStore.
func (s *RedisIdempotency) Begin(ctx context.Context, scope, key string, bodyHash [32]byte) (*hotpath.Replay, hotpath.Claim, error) {
	var claim [idemHeader + 16]byte
	claim[0] = idemPending
	copy(claim[1:], bodyHash[:])
	rand.Read(claim[idemHeader:])
	c := &redisClaim{s: s, key: s.key(scope, key), claim: string(claim[:])}

	ctx, cancel := context.WithTimeout(ctx, RedisCallTimeout)
	defer cancel()
	msg, err := idemBegin.Exec(ctx, s.client, []string{c.key}, []string{c.claim, millis(s.lease)}).ToMessage()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot begin idempotent request: %w", err)
	}
	if msg.IsInt64() {
		n, _ := msg.AsInt64()
		switch n {
		case 0:
			return nil, c, nil
		case 1:
			return nil, nil, hotpath.ErrIdempotencyKeyReused
		case 2:
			return nil, nil, hotpath.ErrIdempotencyInProgress
		}
		return nil, nil, fmt.Errorf("cannot begin idempotent request: unexpected answer %d", n)
	}
	b, err := msg.AsBytes()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot begin idempotent request: %w", err)
	}
	r, err := hotpath.ParseReplay(b)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot replay idempotent request: %w", err)
	}
	return r, nil, nil
}

// redisClaim is a claim Begin wrote: the key and its exact value.
type redisClaim struct {
	s     *RedisIdempotency
	key   string
	claim string
}

// Complete implements hotpath.Claim.
func (c *redisClaim) Complete(ctx context.Context, r hotpath.Replay) error {
	if r.Status < 100 || r.Status > 999 {
		return fmt.Errorf("cannot store reply: status %d is not an HTTP status", r.Status)
	}
	v := make([]byte, idemHeader, idemHeader+16+len(r.Body))
	v[0] = idemStored
	copy(v[1:], c.claim[1:idemHeader])
	v = hotpath.AppendReplay(v, &r)
	ctx, cancel := context.WithTimeout(ctx, RedisCallTimeout)
	defer cancel()
	n, err := idemComplete.Exec(ctx, c.s.client, []string{c.key},
		[]string{c.claim, rueidis.BinaryString(v), millis(c.s.ttl)}).AsInt64()
	if err != nil {
		return fmt.Errorf("cannot store reply: %w", err)
	}
	if n != 1 {
		return hotpath.ErrIdempotencyClaimLost
	}
	return nil
}

// Renew implements hotpath.Claim.
func (c *redisClaim) Renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, RedisCallTimeout)
	defer cancel()
	n, err := idemRenew.Exec(ctx, c.s.client, []string{c.key}, []string{c.claim, millis(c.s.lease)}).AsInt64()
	if err != nil {
		return fmt.Errorf("cannot renew idempotency claim: %w", err)
	}
	if n != 1 {
		return hotpath.ErrIdempotencyClaimLost
	}
	return nil
}

// Abandon implements hotpath.Claim.
func (c *redisClaim) Abandon(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, RedisCallTimeout)
	defer cancel()
	if err := idemAbandon.Exec(ctx, c.s.client, []string{c.key}, []string{c.claim}).Error(); err != nil {
		return fmt.Errorf("cannot release idempotency claim: %w", err)
	}
	return nil
}
