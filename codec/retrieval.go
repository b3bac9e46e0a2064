package codec

import (
	"strconv"
)

// Embeddings is an upstream embeddings answer read in place by
// ParseEmbeddings: Vectors[i] is the raw JSON of input i's vector, a span
// of the body, valid while the body is and unchanged.
type Embeddings struct {
	Vectors      [][]byte
	PromptTokens int64
}

// ParseEmbeddings reads body, an OpenAI embeddings answer for n inputs, into
// e, reusing e.Vectors. Every input's index appears exactly once in data,
// and each vector is of the asked encoding: a non-empty array of JSON
// numbers, or with base64 a JSON string. usage.prompt_tokens is read when
// present (a non-negative integer or null); other members are skipped,
// validated. The vectors are scanned, never decoded: they are copied out
// verbatim. It reports false for anything else, and does not allocate
// once e.Vectors has room for n.
func ParseEmbeddings(body []byte, n int, base64 bool, e *Embeddings) bool {
	if cap(e.Vectors) < n {
		e.Vectors = make([][]byte, n)
	}
	e.Vectors = e.Vectors[:n]
	clear(e.Vectors)
	e.PromptTokens = 0
	var it objectIter
	if !it.start(body, 0) {
		return false
	}
	seenData, seenUsage := false, false
	for key, ok := it.next(); ok; key, ok = it.next() {
		var good bool
		switch string(key) {
		case "data":
			if seenData {
				return false
			}
			seenData = true
			it.pos, good = parseEmbeddingData(body, it.pos, base64, e.Vectors)
		case "usage":
			if seenUsage {
				return false
			}
			seenUsage = true
			if isNull(&it) {
				good = true
				break
			}
			var u objectIter
			if !u.start(body, it.pos) {
				return false
			}
			good = true
			for k, ok := u.next(); ok && good; k, ok = u.next() {
				if string(k) == "prompt_tokens" {
					e.PromptTokens, good = tokenCount(&u)
				} else {
					_, good = u.value()
				}
			}
			good = good && u.err == nil
			it.pos = u.pos
		default:
			_, good = it.value()
		}
		if !good {
			return false
		}
	}
	if it.err != nil || !seenData || skipSpace(body, it.pos) != len(body) {
		return false
	}
	for _, v := range e.Vectors {
		if v == nil {
			return false
		}
	}
	return true
}

// parseEmbeddingData reads the data array at b[i:] into vecs by index.
func parseEmbeddingData(b []byte, i int, base64 bool, vecs [][]byte) (int, bool) {
	var arr arrayIter
	if !arr.start(b, i) {
		return arr.pos, false
	}
	for arr.next() {
		if arr.n > len(vecs) {
			return arr.pos, false
		}
		var it objectIter
		if !it.start(b, arr.pos) {
			return it.pos, false
		}
		index := -1
		var vec []byte
		for key, ok := it.next(); ok; key, ok = it.next() {
			switch string(key) {
			case "index":
				start := it.pos
				end, err := skipNumber(b, start)
				if err != nil || index >= 0 {
					return end, false
				}
				v, ok := parseInt(b[start:end])
				if !ok || v < 0 || v >= int64(len(vecs)) {
					return end, false
				}
				index, it.pos = int(v), end
			case "embedding":
				if vec != nil {
					return it.pos, false
				}
				start := it.pos
				var end int
				var err error
				if base64 {
					if start >= len(b) || b[start] != '"' {
						return start, false
					}
					end, err = skipString(b, start)
				} else {
					end, err = skipNumberArray(b, start)
				}
				if err != nil {
					return end, false
				}
				vec, it.pos = b[start:end], end
			default:
				if _, ok := it.value(); !ok {
					return it.pos, false
				}
			}
		}
		if it.err != nil || index < 0 || vec == nil || vecs[index] != nil {
			return it.pos, false
		}
		vecs[index] = vec
		arr.pos = it.pos
	}
	return arr.pos, arr.err == nil
}

// skipNumberArray skips a non-empty array of JSON numbers at b[i]. It is
// skipNumber and the separators in one loop, with digit runs taken eight
// bytes at a time: vectors are most of an embeddings answer.
func skipNumberArray(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '[' {
		return i, errJSONSyntax
	}
	i++
	n := len(b)
	for {
		for i < n && isJSONSpace(b[i]) {
			i++
		}
		if i < n && b[i] == '-' {
			i++
		}
		if i >= n {
			return i, errJSONSyntax
		}
		// -?(0|[1-9][0-9]*)
		switch c := b[i]; {
		case c == '0':
			i++
		case c-'1' <= 8:
			i = skipDigits(b, i+1)
		default:
			return i, errJSONSyntax
		}
		if i >= n {
			return i, errJSONSyntax
		}
		// (\.[0-9]+)?
		if b[i] == '.' {
			j := skipDigits(b, i+1)
			if j == i+1 || j >= n {
				return j, errJSONSyntax
			}
			i = j
		}
		// ([eE][+-]?[0-9]+)?
		if b[i]|0x20 == 'e' {
			i++
			if i < n && (b[i] == '+' || b[i] == '-') {
				i++
			}
			j := skipDigits(b, i)
			if j == i || j >= n {
				return j, errJSONSyntax
			}
			i = j
		}
		c := b[i]
		if c == ',' { // the common case: no space
			i++
			continue
		}
		for isJSONSpace(c) {
			if i++; i >= n {
				return i, errJSONSyntax
			}
			c = b[i]
		}
		switch c {
		case ',':
			i++
		case ']':
			return i + 1, nil
		default:
			return i, errJSONSyntax
		}
	}
}

// rerankSeenBits bounds the indexes ParseRerank checks for duplicates with
// a bitmap on the stack.
const rerankSeenBits = 4096

// RerankScore is one scored document of a rerank answer.
type RerankScore struct {
	Index int
	Score float64
}

// ParseRerank reads body, a rerank answer for n documents, into scores
// (reused, in the upstream's order): with tei a bare array of
// {index, score} (text-embeddings-inference), else Cohere's
// {results:[{index, relevance_score}], usage:{total_tokens}}. Every index
// appears exactly once. It returns the scores and usage.total_tokens (0
// when absent), and ok false for anything else. It does not allocate once
// scores has room for n.
func ParseRerank(body []byte, n int, tei bool, scores []RerankScore) (_ []RerankScore, usage int64, ok bool) {
	scores = scores[:0]
	if tei {
		end, ok := parseRerankResults(body, 0, n, "score", &scores)
		return scores, 0, ok && skipSpace(body, end) == len(body) && len(scores) == n
	}
	var it objectIter
	if !it.start(body, 0) {
		return scores, 0, false
	}
	seen := false
	for key, ok := it.next(); ok; key, ok = it.next() {
		var good bool
		switch string(key) {
		case "results":
			if seen {
				return scores, 0, false
			}
			seen = true
			it.pos, good = parseRerankResults(body, it.pos, n, "relevance_score", &scores)
		case "usage":
			if isNull(&it) {
				good = true
				break
			}
			var u objectIter
			if !u.start(body, it.pos) {
				return scores, 0, false
			}
			good = true
			for k, ok := u.next(); ok && good; k, ok = u.next() {
				if string(k) == "total_tokens" {
					usage, good = tokenCount(&u)
				} else {
					_, good = u.value()
				}
			}
			good = good && u.err == nil
			it.pos = u.pos
		default:
			_, good = it.value()
		}
		if !good {
			return scores, 0, false
		}
	}
	ok = it.err == nil && seen && skipSpace(body, it.pos) == len(body) && len(scores) == n
	return scores, usage, ok
}

// parseRerankResults reads the array of scored documents at b[i:], whose
// score member is scoreKey, into scores; every index below n at most once.
func parseRerankResults(b []byte, i, n int, scoreKey string, scores *[]RerankScore) (int, bool) {
	// Indexes seen: a bit each up to rerankSeenBits, past it a scan of
	// what was read.
	var seen [rerankSeenBits / 64]uint64
	var arr arrayIter
	if !arr.start(b, i) {
		return arr.pos, false
	}
	for arr.next() {
		if arr.n > n {
			return arr.pos, false
		}
		var it objectIter
		if !it.start(b, arr.pos) {
			return it.pos, false
		}
		index, hasScore := -1, false
		var score float64
		for key, ok := it.next(); ok; key, ok = it.next() {
			switch string(key) {
			case "index":
				start := it.pos
				end, err := skipNumber(b, start)
				if err != nil || index >= 0 {
					return end, false
				}
				v, ok := parseInt(b[start:end])
				if !ok || v < 0 || v >= int64(n) {
					return end, false
				}
				index, it.pos = int(v), end
			case scoreKey:
				start := it.pos
				end, err := skipNumber(b, start)
				if err != nil || hasScore {
					return end, false
				}
				f, err := strconv.ParseFloat(b2s(b[start:end]), 64)
				if err != nil {
					return end, false
				}
				score, hasScore, it.pos = f, true, end
			default:
				if _, ok := it.value(); !ok {
					return it.pos, false
				}
			}
		}
		if it.err != nil || index < 0 || !hasScore {
			return it.pos, false
		}
		if index < rerankSeenBits {
			if seen[index>>6]&(1<<(index&63)) != 0 {
				return it.pos, false
			}
			seen[index>>6] |= 1 << (index & 63)
		} else {
			for _, s := range *scores {
				if s.Index == index {
					return it.pos, false
				}
			}
		}
		*scores = append(*scores, RerankScore{Index: index, Score: score})
		arr.pos = it.pos
	}
	return arr.pos, arr.err == nil
}
