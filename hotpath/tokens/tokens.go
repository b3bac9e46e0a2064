// Package tokens counts tokens the one way the whole product counts them: the
// o200k_base byte-pair encoding, and a fixed chat template for prompts. The
// gateway's token count, its usage arithmetic and the upstream simulator all
// call the same functions, so a prompt has the same count wherever it is
// counted.
//
// # Chat template
//
// CountChat counts a prompt as if rendered by this template, where each
// <|…|> marker is one special token:
//
//	<|im_start|>tools\n{tool line}\n{tool line}<|im_end|>\n      only when tools are declared
//	<|im_start|>{role}\n{content}<|im_end|>\n                     one per message
//	<|im_start|>assistant\n                                       the primer of the reply
//
// A tool line is one compact JSON object per declared tool:
// {"name":…,"description":…,"parameters":…}. "description" is left out when
// empty, "parameters" when there is no schema; the schema is written
// compacted, or as a JSON string when it is not valid JSON. A
// message with a Name renders its role line as "{role} {name}". An assistant
// message's tool calls follow its content, one line per call:
// {"name":…,"arguments":…}, where arguments is the JSON-encoded string exactly
// as the call carries it; the content and each call are separated by "\n",
// and an empty content adds no line. A tool result renders as a message of
// role "tool" whose content is the result; its tool call id is not rendered.
//
// The markers are never encoded as text: each block (a message, or the tools)
// adds a fixed three tokens (<|im_start|>, <|im_end|> and the newline after
// it), the primer one plus the tokens of "assistant\n", and the text between
// the markers is encoded as one run.
//
// The encoding ships inside the binary (no network at run time), is loaded
// once, on the first count (a few hundred milliseconds), and is safe for
// concurrent use.
package tokens

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/edgegw/gateway/codec"
)

// Encoding is the name of the byte-pair encoding every count uses.
const Encoding = "o200k_base"

// perMessage is what each rendered block adds beyond its text: the
// <|im_start|> and <|im_end|> markers and the newline after <|im_end|>.
const perMessage = 3

// Message is what the template needs of a chat message.
type Message struct {
	Role, Content, Name, ToolCallID string
	ToolCalls                       []ToolCall
}

// ToolCall is a call an assistant message made.
type ToolCall struct {
	ID, Name, Arguments string
}

// Tool is a declared function tool; Parameters is its raw JSON schema.
type Tool struct {
	Name, Description string
	Parameters        []byte
}

var (
	loadOnce sync.Once
	enc      *bpe
	primer   int // tokens of "<|im_start|>assistant\n"
)

// ranksFile names the encoding's merge ranks among the loader's embedded
// files.
const ranksFile = Encoding + ".tiktoken"

// encoder returns the shared encoding, loading it on first use. The BPE
// ranks are embedded, so loading cannot fail short of a corrupt build.
func encoder() *bpe {
	loadOnce.Do(func() {
		ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(ranksFile)
		if err != nil {
			panic("tokens: cannot load " + Encoding + ": " + err.Error())
		}
		enc = newBPE(ranks)
		s := scratchPool.Get().(*scratch)
		primer = 1 + enc.count("assistant\n", s)
		scratchPool.Put(s)
	})
	return enc
}

// MaxRun is the longest stretch of text the encoder is given at once
// without a place where the pre-tokenizer splits anyway: the spec bounds
// an unbroken run at 1024 bytes for token counting, and every count here
// uses the same bound. Byte-pair encoding is quadratic in the length of one
// pre-tokenized piece, so an unbroken run is cut every MaxRun bytes and each
// part counted on its own; ordinary text, whose words are far shorter, is
// counted exactly.
const MaxRun = 1024

// maxSegment is how much text one encoder call is given: text is cut at
// the last place the pre-tokenizer splits anyway before this many bytes.
const maxSegment = 4 * MaxRun

// cutAt returns the length of the first segment of text: at most maxSegment
// bytes, ending where the encoder's pre-tokenizer would split anyway (before
// a space that opens a word, or after a newline), or, when text holds no
// such place for MaxRun bytes, after MaxRun bytes on a UTF-8 boundary. It is
// linear in the segment's length.
func cutAt(text string) int {
	last := 0 // the last exact cut found, 0 for none
	for i := 1; i < len(text); i++ {
		if isCut(text, i) {
			last = i
		}
		if i >= maxSegment && last > 0 {
			return last
		}
		if i-last >= MaxRun {
			if last > 0 {
				return last
			}
			j := i
			for j > 0 && !utf8.RuneStart(text[j]) {
				j--
			}
			if j == 0 {
				j = i
			}
			return j
		}
	}
	return len(text)
}

// isCut reports whether i (0 < i < len(text)) is a place where the
// encoder's pre-tokenizer always splits: before a space that opens a word,
// or after a newline before a word.
func isCut(text string, i int) bool {
	c, prev := text[i], text[i-1]
	return !isSpace(c) && prev == '\n' || c == ' ' && !isSpace(prev) && i+1 < len(text) && !isSpace(text[i+1])
}

// minTokens is a lower bound on the tokens of text, found without the
// encoder: the pre-tokenizer splits at every isCut place and each piece is at
// least one token. It stops reading once the bound passes limit (a prompt
// far over a window is refused having read little more than a window's
// worth), reads each byte at most once and allocates nothing.
func minTokens(text string, limit int) int {
	if text == "" {
		return 0
	}
	n := 1
	var mark time.Time // the scan makes way as a count does (makeWay)
	for i := 1; i < len(text) && n <= limit; i++ {
		if isCut(text, i) {
			n++
		}
		if i%minScanClockEvery == 0 {
			mark = makeWay(mark)
		}
	}
	return n
}

// minScanClockEvery is how many bytes the lower bound reads between looks
// at the clock: about a tenth of a millisecond of scanning.
const minScanClockEvery = 64 << 10

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'
}

// countText adds the tokens of text to n, segment by segment, and stops as
// soon as the sum passes limit or stop is set (then the result is limit+1).
func countText(e *bpe, n int, text string, limit int, stop *atomic.Bool) int {
	s := scratchPool.Get().(*scratch)
	var (
		mark  time.Time // when the count last made way
		since int       // bytes counted since the clock was last read
		seen  segmentMemo
	)
	for len(text) > 0 && n <= limit {
		if stop != nil && stop.Load() {
			n = limit + 1
			break
		}
		k := cutAt(text)
		seg := text[:k]
		c, ok := seen.get(seg)
		if !ok {
			c = e.count(seg, s)
			seen.put(seg, c)
		}
		n += c
		text = text[k:]
		if since += k; since >= clockEvery {
			since = 0
			mark = makeWay(mark)
		}
	}
	scratchPool.Put(s)
	return n
}

// segmentMemo remembers the counts of the last few long segments of one
// text, so that a segment met again is not encoded again. A segment's count
// depends on its bytes alone (each is encoded on its own), and the
// commonest unbroken run, one character or a short pattern repeated, is
// cut into MaxRun parts of which only a few differ: 280 KiB of one letter
// is one encoding and 279 comparisons, not 280 encodings. Text without
// repeats pays a length comparison per slot and segment. The memo lives in
// one call, holding only the caller's own text.
type segmentMemo struct {
	seg  [memoSlots]string
	n    [memoSlots]int
	next int
}

const (
	// memoSlots is how many segments are remembered. A run of a pattern
	// of p bytes is cut into at most p/gcd(p, MaxRun) different parts:
	// one for a repeated character (or any pattern whose length divides
	// MaxRun), at most memoSlots for a pattern of up to memoSlots bytes.
	memoSlots = 8
	// memoMin is the shortest segment remembered; shorter ones cost too
	// little to encode to be worth a comparison.
	memoMin = MaxRun / 4
)

func (m *segmentMemo) get(seg string) (int, bool) {
	if len(seg) < memoMin {
		return 0, false
	}
	for i := range m.seg {
		if m.seg[i] == seg {
			return m.n[i], true
		}
	}
	return 0, false
}

func (m *segmentMemo) put(seg string, n int) {
	if len(seg) < memoMin {
		return
	}
	m.seg[m.next], m.n[m.next] = seg, n
	m.next = (m.next + 1) % memoSlots
}

// A long count makes way for other requests once it has run for
// yieldAfter, by pausing for yieldPause. It parks rather than calling
// runtime.Gosched: a goroutine that only yields goes back on the run queue,
// and the scheduler runs it again before it polls the network, so while a
// garbage collection worker holds the other processor no request that
// arrived meanwhile is read until the count ends (measured: 13 ms of
// nothing but the count and the collector, every connection waiting). A
// parked count leaves its processor free to poll. Ordinary prompts end
// long before yieldAfter and never pause; a count of a megabyte of one
// unbroken word pauses about 80 times, 2% of its time.
const (
	yieldAfter = time.Millisecond
	yieldPause = 20 * time.Microsecond
	// clockEvery is how much text a count reads between looks at the clock.
	clockEvery = 8 << 10
)

// makeWay pauses the count when it has run for yieldAfter since mark, and
// returns the new mark (the first look only starts the clock).
func makeWay(mark time.Time) time.Time {
	now := time.Now()
	switch {
	case mark.IsZero():
		return now
	case now.Sub(mark) < yieldAfter:
		return mark
	}
	time.Sleep(yieldPause)
	return time.Now()
}

// Count returns the number of tokens in text. Special-token markers in text
// are counted as the ordinary text they are; runs longer than MaxRun are
// counted in parts.
func Count(text string) int {
	return CountLimit(text, math.MaxInt)
}

// CountLimit is Count that stops once the count passes limit: the result
// is then some number above limit. Its work is linear in the text it reads,
// and it reads little more than limit tokens' worth.
func CountLimit(text string, limit int) int {
	if text == "" {
		return 0
	}
	if limit < math.MaxInt {
		if lower := minTokens(text, limit); lower > limit {
			return lower
		}
	}
	return countText(encoder(), 0, text, limit, nil)
}

// CountChat returns the prompt tokens of msgs and tools under the chat
// template of the package comment, scaffolding and reply primer included.
func CountChat(msgs []Message, tools []Tool) int {
	return CountChatLimit(msgs, tools, math.MaxInt)
}

// CountChatLimit is CountChat that stops once the count passes limit, the
// way a context-window check needs it: the result is then some number above
// limit. The work is linear in the prompt and stops with the count.
func CountChatLimit(msgs []Message, tools []Tool, limit int) int {
	return CountChatUntil(msgs, tools, limit, nil)
}

// CountChatUntil is CountChatLimit that also gives up once stop is set — the
// client the count is for has left — and then returns some number above
// limit. stop is read between segments, so giving up takes at most one
// segment's work.
func CountChatUntil(msgs []Message, tools []Tool, limit int, stop *atomic.Bool) int {
	if limit < math.MaxInt {
		// A prompt whose words alone outnumber the limit is over it
		// without encoding anything.
		lower := primer
		for i := range msgs {
			if lower += perMessage; lower > limit {
				return lower
			}
			lower += minTokens(msgs[i].Content, limit-lower)
		}
		if lower > limit {
			return lower
		}
	}
	e := encoder()
	n := primer
	var buf []byte
	if len(tools) > 0 {
		buf = appendTools(buf[:0], tools)
		n = countText(e, n+perMessage, string(buf), limit, stop)
	}
	for i := range msgs {
		if n > limit {
			return n
		}
		m := &msgs[i]
		if len(m.Content) <= maxSegment {
			buf = appendMessage(buf[:0], m)
			n = countText(e, n+perMessage, string(buf), limit, stop)
			continue
		}
		// A long content is counted where it lies, not copied: the role
		// line with the content's first segment, then the rest from the
		// cut, which is a place where the counting would cut anyway.
		k := cutAt(m.Content)
		head := *m
		head.Content, head.ToolCalls = m.Content[:k], nil
		buf = appendMessage(buf[:0], &head)
		n = countText(e, n+perMessage, string(buf), limit, stop)
		n = countText(e, n, m.Content[k:], limit, stop)
		if len(m.ToolCalls) > 0 && n <= limit {
			buf = appendMessage(buf[:0], &Message{ToolCalls: m.ToolCalls, Content: "x"})
			n = countText(e, n, string(buf[2:]), limit, stop) // the calls after the content, without "\nx"
		}
	}
	return n
}

// appendTools appends the text of the tools block: "tools" and one JSON line
// per tool.
func appendTools(dst []byte, tools []Tool) []byte {
	dst = append(dst, "tools"...)
	for i := range tools {
		t := &tools[i]
		dst = append(dst, `
{"name":`...)
		dst = codec.AppendJSONString(dst, t.Name)
		if t.Description != "" {
			dst = append(dst, `,"description":`...)
			dst = codec.AppendJSONString(dst, t.Description)
		}
		if len(bytes.TrimSpace(t.Parameters)) > 0 {
			dst = append(dst, `,"parameters":`...)
			dst = appendCompact(dst, t.Parameters)
		}
		dst = append(dst, '}')
	}
	return dst
}

// appendCompact appends raw JSON without insignificant whitespace, or, when
// raw is not valid JSON, as a JSON string.
func appendCompact(dst, raw []byte) []byte {
	b := bytes.NewBuffer(dst)
	if err := json.Compact(b, raw); err != nil {
		return codec.AppendJSONBytes(dst, raw)
	}
	return b.Bytes()
}

// appendMessage appends the text between a message's markers.
func appendMessage(dst []byte, m *Message) []byte {
	dst = append(dst, m.Role...)
	if m.Name != "" {
		dst = append(dst, ' ')
		dst = append(dst, m.Name...)
	}
	dst = append(dst, '\n')
	dst = append(dst, m.Content...)
	for i := range m.ToolCalls {
		c := &m.ToolCalls[i]
		if i > 0 || m.Content != "" {
			dst = append(dst, '\n')
		}
		dst = append(dst, `{"name":`...)
		dst = codec.AppendJSONString(dst, c.Name)
		dst = append(dst, `,"arguments":`...)
		dst = codec.AppendJSONString(dst, c.Arguments)
		dst = append(dst, '}')
	}
	return dst
}

// Split returns the text of each token of text, in order; the pieces joined
// are text (invalid UTF-8 is first replaced by U+FFFD, as the encoder reads
// it). A token that ends inside a UTF-8 sequence is joined with the
// tokens that complete it, so every piece is valid UTF-8 when text is, and
// len(Split(text)) is Count(text) for text whose tokens all end on character
// boundaries (ASCII text always does).
func Split(text string) []string {
	if text == "" {
		return nil
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	e := encoder()
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	var pieces []string
	from, at := 0, 0 // the pending token's start; the current piece's start
	one := []int32{0}
	for rest := text; len(rest) > 0; {
		k := cutAt(rest)
		e.segment(rest[:k], func(piece string) {
			cuts := one
			if _, ok := e.vocab.rank(piece); !ok {
				cuts = e.merge(piece, s)
			}
			for _, c := range cuts[1:] {
				if end := at + int(c); utf8.RuneStart(text[end]) {
					pieces = append(pieces, text[from:end])
					from = end
				} // else the next token completes this character
			}
			at += len(piece)
			pieces = append(pieces, text[from:at])
			from = at
		})
		rest = rest[k:]
	}
	return pieces
}
