// Package memory is what chat needs of stored memory and standing rules:
// the interfaces the proxy calls (implemented over PostgreSQL by storage),
// the vector encoding memories are stored with, and the in-process ranking
// recall uses. It links no driver.
package memory

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
)

// Scopes of a memory.
const (
	ScopePersonal = "personal"
	ScopeOrg      = "org"
	ScopeVault    = "vault"
)

// Caller is who a chat turn acts for and where: VaultID is the turn's
// vault_id (empty for none), Mentions its mentioned_vault_ids.
type Caller struct {
	OrgID, UserID string
	VaultID       string
	Mentions      []string
}

// Candidate is one memory recall may use, as the store returns it: Vector
// is the unit-length embedding (nil when the embed tier never answered for
// it) and TextRank the full-text rank against the turn's text.
type Candidate struct {
	Scope, Key, Value  string
	VaultID, VaultName string
	Vector             []float32
	TextRank           float32
	Mentioned          bool
}

// Recalled is one memory injected into a turn.
type Recalled struct {
	Scope, Key, Value  string
	VaultID, VaultName string
}

// Fact is a durable fact capture stores.
type Fact struct{ Key, Value string }

// Captured reports one stored memory: never its value.
type Captured struct{ Scope, Key, VaultID string }

// Rule is one applied standing rule with the ruleset it came from ("org"
// or "vault").
type Rule struct{ Text, Source string }

// Store is the memory and rules data chat reads and writes. Every method
// resolves the caller's access itself: an unreadable vault is treated as
// none, silently.
type Store interface {
	// Candidates returns the memory a turn of c may recall: the caller's
	// personal memory, the organization's and the readable vaults' (only
	// the active vault's when it is vault_only; vault_only vaults
	// contribute nothing elsewhere), at most MaxCandidates, most recently
	// updated first, each with its text rank against text. Mentions that
	// are readable, distinct, not the active vault and within the first
	// MaxMentions are marked Mentioned.
	Candidates(ctx context.Context, c Caller, text string) ([]Candidate, error)
	// Capture stores facts as the caller's personal memory, or in c's
	// vault when the caller may write it; it never writes organization
	// memory. vectors[i] is facts[i]'s embedding or nil. It reports only
	// what it stored: a fact whose key would replace a departed member's
	// frozen memory is skipped.
	Capture(ctx context.Context, c Caller, facts []Fact, vectors [][]float32) ([]Captured, error)
	// Rules returns the rules a turn of c applies: the organization's,
	// and inside a readable vault the vault's (after the organization's
	// when the vault inherits, alone when it does not).
	Rules(ctx context.Context, c Caller) ([]Rule, error)
}

// Embedder turns text into vectors with the gw-embed tier.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Extractor finds the durable facts (preferences, stable settings,
// constraints) in one finished turn: the user's text and the answer.
type Extractor interface {
	Extract(ctx context.Context, user, answer string) ([]Fact, error)
}

// Bounds of recall.
const (
	// MaxCandidates bounds the memories one recall ranks in process.
	MaxCandidates = 2000
	// MaxMentions is how many mentioned vaults one turn uses.
	MaxMentions = 3
	// BudgetTokens bounds the recalled memory injected into one turn.
	BudgetTokens = 512
	// MinSimilarity is the cosine similarity below which a memory is not
	// relevant to the turn.
	MinSimilarity = 0.25
	// mentionBoost lifts a mentioned vault's memories.
	mentionBoost = 0.15
)

// Encode appends v scaled to unit length as little-endian float32.
func Encode(dst []byte, v []float32) []byte {
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	scale := float32(1)
	if norm > 0 {
		scale = float32(1 / math.Sqrt(norm))
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x*scale))
	}
	return dst
}

// Decode reads a vector Encode wrote; nil for a malformed one.
func Decode(b []byte) []float32 {
	if len(b) == 0 || len(b)%4 != 0 {
		return nil
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Cosine is the similarity of two unit vectors (0 when their lengths
// differ).
func Cosine(a, b []float32) float32 {
	if len(a) != len(b) {
		return 0
	}
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// EstimateTokens is the budget's estimate of text's tokens: a quarter of
// its bytes, rounded up, plus the framing of one line.
func EstimateTokens(s string) int { return (len(s)+3)/4 + 4 }

// Rank picks the candidates most relevant to the turn within budget
// tokens. With a query vector, relevance is the cosine similarity
// (MinSimilarity at least; a candidate stored without a vector competes
// by its text rank); without one (the embed tier is down) it is the
// full-text rank alone. A mentioned vault's memories get a small lift.
// The cost is linear in the candidates plus a sort of the relevant ones.
func Rank(cands []Candidate, query []float32, budget int) []Recalled {
	type scored struct {
		i     int
		score float32
	}
	picked := make([]scored, 0, 16)
	for i := range cands {
		c := &cands[i]
		var s float32
		switch {
		case query != nil && c.Vector != nil:
			s = Cosine(query, c.Vector)
			if s < MinSimilarity {
				continue
			}
		case c.TextRank > 0:
			s = MinSimilarity + c.TextRank
		default:
			continue
		}
		if c.Mentioned {
			s += mentionBoost
		}
		picked = append(picked, scored{i, s})
	}
	slices.SortStableFunc(picked, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(cands[a.i].Key, cands[b.i].Key)
	})
	var out []Recalled
	for _, p := range picked {
		c := &cands[p.i]
		cost := EstimateTokens(c.Key) + EstimateTokens(c.Value)
		if cost > budget {
			continue
		}
		budget -= cost
		out = append(out, Recalled{Scope: c.Scope, Key: c.Key, Value: c.Value, VaultID: c.VaultID, VaultName: c.VaultName})
	}
	return out
}
