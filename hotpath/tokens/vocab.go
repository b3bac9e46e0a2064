package tokens

import (
	"hash/maphash"
	"math/bits"
)

// vocab maps each token's bytes to its rank. It replaces the loader's
// map[string]int, whose 200,000 keys were each their own heap object: 94%
// of the objects the collector marked on every cycle, in the gateway and in
// the simulator, for a table that never changes. vocab holds no pointer
// the collector has to follow (three flat slices), and an open-addressing
// lookup usually touches one slot: a token of up to eight bytes is
// compared by the slot's inline copy of its head, a longer one reads the
// rest from the arena.
type vocab struct {
	seed  maphash.Seed
	mask  uint64
	slots []vocabSlot
	arena []byte // every token's bytes, back to back
	// filter is a Bloom filter of the tokens, two bits each in
	// 2^filterBits (256 KiB, which stays in a core's cache where the 8 MiB
	// of slots does not). The merge inside a long piece asks for many
	// strings that are not tokens; the filter turns away 97% of them
	// without touching slots (TestVocabMatchesTheRanks), which made a
	// 280 KiB run of random letters about a quarter cheaper to count
	// (BenchmarkLongRun/random). Whole pieces, which are mostly tokens,
	// go straight to slots.
	filter []uint64
}

const filterBits = 21

// filterHash mixes a string's length and first sixteen bytes (a token in
// question is rarely longer, and a longer one that collides only costs the
// lookup the filter would have saved).
func filterHash(s string) uint64 {
	h := head8(s)*0x9e3779b97f4a7c15 ^ uint64(len(s))
	if len(s) > 8 {
		h ^= head8(s[8:]) * 0xc2b2ae3d27d4eb4f
	}
	// The finalizer of MurmurHash3: every input bit reaches every bit.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

// filterBitsOf returns the filter's two bits for s: the top filterBits
// bits of its hash and the filterBits below them.
func filterBitsOf(s string) (a, b uint64) {
	h := filterHash(s)
	return h >> (64 - filterBits), h >> (64 - 2*filterBits) & (1<<filterBits - 1)
}

func (v *vocab) filterAdd(s string) {
	a, b := filterBitsOf(s)
	v.filter[a>>6] |= 1 << (a & 63)
	v.filter[b>>6] |= 1 << (b & 63)
}

// mayHold reports false when s is certainly not a token.
func (v *vocab) mayHold(s string) bool {
	a, b := filterBitsOf(s)
	return v.filter[a>>6]&(1<<(a&63)) != 0 && v.filter[b>>6]&(1<<(b&63)) != 0
}

// vocabSlot is one token: head holds its first eight bytes (zero-padded,
// little-endian), meta its offset in the arena (high 32 bits), its length
// (8 bits) and its rank (low 24 bits). Length 0 marks an empty slot.
type vocabSlot struct {
	head, meta uint64
}

const (
	vocabRankBits = 24
	vocabMaxLen   = 255
)

// newVocab builds the table from the loader's ranks, with at most half of
// its slots used (o200k: 200,000 tokens in 524,288 slots, 8 MiB), so that
// a lookup of a pair that is not a token (half the merge's lookups) ends
// within two or three slots on average.
func newVocab(ranks map[string]int) *vocab {
	size := uint64(1) << bits.Len64(uint64(2*len(ranks)-1))
	v := &vocab{seed: maphash.MakeSeed(), mask: size - 1, slots: make([]vocabSlot, size), filter: make([]uint64, 1<<filterBits/64)}
	n := 0
	for tok := range ranks {
		n += len(tok)
	}
	v.arena = make([]byte, 0, n)
	for tok, rank := range ranks {
		if len(tok) == 0 || len(tok) > vocabMaxLen || rank < 0 || rank >= 1<<vocabRankBits {
			panic("tokens: the encoding has a token the rank table cannot hold")
		}
		v.filterAdd(tok)
		off := uint64(len(v.arena))
		v.arena = append(v.arena, tok...)
		i := maphash.String(v.seed, tok) & v.mask
		for v.slots[i].meta != 0 {
			i = (i + 1) & v.mask
		}
		v.slots[i] = vocabSlot{head: head8(tok), meta: off<<32 | uint64(len(tok))<<vocabRankBits | uint64(rank)}
	}
	return v
}

// rank returns the rank of the token s, or ok=false when s is not one.
func (v *vocab) rank(s string) (rank int, ok bool) {
	if len(s) == 0 || len(s) > vocabMaxLen {
		return 0, false
	}
	head := head8(s)
	for i := maphash.String(v.seed, s) & v.mask; ; i = (i + 1) & v.mask {
		sl := &v.slots[i]
		n := int(sl.meta >> vocabRankBits & 0xff)
		if n == 0 {
			return 0, false
		}
		if n == len(s) && sl.head == head {
			if n > 8 {
				off := int(sl.meta >> 32)
				if string(v.arena[off+8:off+n]) != s[8:] {
					continue
				}
			}
			return int(sl.meta & (1<<vocabRankBits - 1)), true
		}
	}
}

// head8 packs the first eight bytes of s (fewer when s is shorter) into
// an integer, first byte lowest.
func head8(s string) uint64 {
	var h uint64
	for i := range min(len(s), 8) {
		h |= uint64(s[i]) << (8 * i)
	}
	return h
}
