package tokens

import (
	"sync"
	"unicode/utf8"
)

// bpe encodes with the merge ranks of an encoding. Its merge is
// O(n log n) in the length of a piece: the textbook loop that rescans every
// pair after each merge is quadratic, and one unbroken run of MaxRun bytes
// then costs a millisecond.
type bpe struct {
	vocab *vocab
	// pairs is the rank of every two-byte token, -1 where a pair is not
	// one, indexed by the two bytes: a merge first looks up every adjacent
	// pair of its piece, and a 256 KiB table answers from the cache where
	// the 8 MiB rank table misses it (BenchmarkLongRun: 280 KiB of one
	// letter 32 → 23 ms; of random letters, whose merges go on to longer
	// parts, within the noise).
	pairs *[1 << 16]int32
}

func newBPE(ranks map[string]int) *bpe {
	b := &bpe{vocab: newVocab(ranks), pairs: new([1 << 16]int32)}
	for i := range b.pairs {
		b.pairs[i] = -1
	}
	for tok, r := range ranks {
		if len(tok) == 2 {
			b.pairs[uint16(tok[0])<<8|uint16(tok[1])] = int32(r)
		}
	}
	return b
}

// scratch is one encoding's working memory, reused across calls.
type scratch struct {
	start []int32 // start[i]: where part i begins; start[n] = n
	next  []int32
	prev  []int32
	heap  []pair
	cuts  []int32 // the merge's result: where each final part begins
	// lookups counts the rank lookups of merges: the work the tests bound.
	lookups int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// A candidate merge of part i with the part after it, which would cover
// piece[i:end] and has rank rank, is one integer: rank, then i, then end,
// from the high bits down, so that the smallest is the one the reference
// merge picks (the lowest rank, the leftmost of equal ranks). Ranks fit in
// 24 bits and positions in 20 (a piece is at most maxSegment bytes).
type pair uint64

func makePair(rank, i, end int32) pair {
	return pair(uint64(rank)<<40 | uint64(i)<<20 | uint64(end))
}

func (p pair) i() int32   { return int32(p >> 20 & (1<<20 - 1)) }
func (p pair) end() int32 { return int32(p & (1<<20 - 1)) }

// segment calls fn with each pre-tokenized piece of text. Invalid UTF-8 is
// read as U+FFFD, one per bad byte, as the reference encoder reads it.
func (b *bpe) segment(text string, fn func(piece string)) {
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	for i := 0; i < len(text); {
		j := nextPiece(text, i)
		fn(text[i:j])
		i = j
	}
}

// replaceInvalid returns text with each byte that is not part of a valid
// UTF-8 sequence replaced by U+FFFD.
func replaceInvalid(text string) string {
	buf := make([]byte, 0, len(text)+16)
	for _, r := range text {
		buf = utf8.AppendRune(buf, r)
	}
	return string(buf)
}

// count returns the number of tokens of text.
func (b *bpe) count(text string, s *scratch) int {
	n := 0
	b.segment(text, func(piece string) {
		if _, ok := b.vocab.rank(piece); ok {
			n++
			return
		}
		n += len(b.merge(piece, s))
	})
	return n
}

// rank returns the rank of piece[a:c], or -1 when it is not a token.
func (b *bpe) rank(s *scratch, piece string, a, c int32) int32 {
	s.lookups++
	if c-a == 2 {
		return b.pairs[uint16(piece[a])<<8|uint16(piece[a+1])]
	}
	if !b.vocab.mayHold(piece[a:c]) {
		return -1
	}
	if r, ok := b.vocab.rank(piece[a:c]); ok {
		return int32(r)
	}
	return -1
}

// merge byte-pair encodes piece and returns where each of its tokens
// begins (in s.cuts). It gives exactly the reference merge's tokens: at each
// step the pair of adjacent parts with the lowest rank is merged, the
// leftmost of equal ranks; a heap holds the candidates, and a candidate made
// stale by a neighbouring merge is dropped when it surfaces.
func (b *bpe) merge(piece string, s *scratch) []int32 {
	n := int32(len(piece))
	s.start, s.next, s.prev = grow(s.start, n+1), grow(s.next, n+1), grow(s.prev, n+1)
	for i := int32(0); i <= n; i++ {
		s.start[i], s.next[i], s.prev[i] = i, i+1, i-1
	}
	s.heap = s.heap[:0]
	for i := int32(0); i+2 <= n; i++ {
		if r := b.rank(s, piece, i, i+2); r >= 0 {
			s.heap = append(s.heap, makePair(r, i, i+2))
		}
	}
	for k := len(s.heap)/2 - 1; k >= 0; k-- {
		s.down(k)
	}
	for len(s.heap) > 0 {
		p := s.pop()
		i, end := p.i(), p.end()
		j := s.next[i]
		if j >= n || s.start[i] != i || s.next[j] != end {
			continue // part i or its neighbour changed since p was pushed
		}
		// Merge j into i.
		k := s.next[j]
		s.next[i] = k
		s.prev[k] = i
		s.start[j] = -1
		if k < n {
			if r := b.rank(s, piece, i, s.next[k]); r >= 0 {
				s.push(makePair(r, i, s.next[k]))
			}
		}
		if h := s.prev[i]; h >= 0 {
			if r := b.rank(s, piece, h, k); r >= 0 {
				s.push(makePair(r, h, k))
			}
		}
	}
	s.cuts = s.cuts[:0]
	for i := int32(0); i < n; i = s.next[i] {
		s.cuts = append(s.cuts, i)
	}
	return s.cuts
}

func grow(b []int32, n int32) []int32 {
	if int32(cap(b)) < n {
		return make([]int32, n)
	}
	return b[:n]
}

func (s *scratch) push(p pair) {
	h := append(s.heap, p)
	i := len(h) - 1
	for i > 0 {
		up := (i - 1) / 2
		if h[i] >= h[up] {
			break
		}
		h[i], h[up] = h[up], h[i]
		i = up
	}
	s.heap = h
}

func (s *scratch) pop() pair {
	h := s.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	s.heap = h[:last]
	s.down(0)
	return top
}

// down sifts the candidate at i down to its place.
func (s *scratch) down(i int) {
	h := s.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r] < h[l] {
			m = r
		}
		if h[m] >= h[i] {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
