package codec

import (
	"bytes"
	"errors"
	"slices"
)

// DefaultMaxSSEEvent is the event size cap of a scanner created with a
// non-positive maxEvent, and of the zero SSEScanner.
const DefaultMaxSSEEvent = 1 << 20

// sseBufCeiling is the capacity past which Reset drops a scanner's buffers
// instead of keeping them for reuse.
const sseBufCeiling = 4 << 20

// ErrEventTooLarge is returned by SSEScanner.Next and Finish when one event,
// or one line outside an event, is longer than the scanner's cap.
var ErrEventTooLarge = errors.New("SSE event too large")

// sseBOM is the UTF-8 byte order mark, skipped once at the start of a stream.
const sseBOM = "\xef\xbb\xbf"

// SSEEvent is one dispatched server-sent event.
//
// Its slices alias the scanner's buffers: they are valid until the next call
// to Feed, Next, Finish or Reset on the scanner that returned them. Copy what
// must live longer.
type SSEEvent struct {
	// Event is the value of the event's last "event" field, or empty when
	// it had none (the event type is then "message").
	Event []byte
	// Data is the event's "data" field values joined by "\n". It may be
	// empty: a lone "data:" line dispatches an event with empty data.
	Data []byte
	// ID is the stream's last event id: the value of the most recent "id"
	// field seen so far in the stream, in this event or an earlier one. An
	// "id" field with an empty value clears it.
	ID []byte
}

// SSEScanner splits a text/event-stream body into events, following the
// event stream interpretation of the WHATWG HTML standard:
//
//   - a single UTF-8 byte order mark at the start of the stream is skipped;
//   - lines end in CRLF, LF or CR, and a CR at the end of the bytes fed so
//     far may be the first half of a CRLF whose LF comes with the next Feed;
//   - lines starting with ':' are comments;
//   - "name:value" sets a field, with one optional space after the colon
//     removed; a line without a colon is a field with an empty value;
//   - "data" values accumulate, joined by "\n"; "event" sets the event
//     type; "id" sets the last event id unless the value contains NUL;
//     "retry" and unknown fields are ignored;
//   - an empty line dispatches the event when at least one "data" field
//     was seen, and otherwise only clears the event type.
//
// Bytes are not decoded: invalid UTF-8 passes through unchanged.
//
// Feed the body as it arrives and call Next until it reports ok=false after
// each Feed; at the end of the body call Finish the same way, and Reset
// before scanning another stream. A scanner
// holds the unconsumed tail of what it was fed, so calling Feed repeatedly
// without draining Next grows its buffer without bound.
//
// An event longer than the cap makes Next return ErrEventTooLarge; its
// length runs from the start of its first field line to the end of its
// last line, without that line's end but with the line ends and comments
// before it. A comment line outside an event longer than the cap does too.
// The verdict depends only on the stream's bytes, not on how they were
// split into Feed calls. The scanner then stays failed until Reset.
//
// In steady state Feed, Next and Finish allocate nothing: single-line data
// is returned in place, and multi-line data is joined in a buffer the
// scanner reuses. The zero SSEScanner is ready to use with the default cap.
// A scanner must not be used by several goroutines at once.
type SSEScanner struct {
	buf   []byte // bytes fed; buf[keep():] is still needed
	pos   int    // start of the next line to read
	noEOL int    // buf[pos:noEOL] is known to hold no line end

	// The event being assembled. Spans are offsets into buf, shifted when
	// Feed compacts it.
	inEvent      bool // a field line was read since the last empty line
	evStart      int  // start of the event's first field line, when inEvent
	typLo, typHi int  // event type value, when typHi > typLo
	datLo, datHi int  // the first data value, when nData > 0
	nData        int  // data fields read; from two on the joined value is in data

	data []byte // joined data values of a multi-line event
	id   []byte // last event id

	maxEvent int
	skipLF   bool  // the last line ended in CR: an LF at pos belongs to it
	started  bool  // the byte order mark check is done
	err      error // sticky error
}

// NewSSEScanner returns a scanner that refuses events longer than maxEvent
// bytes; a maxEvent <= 0 selects DefaultMaxSSEEvent.
func NewSSEScanner(maxEvent int) *SSEScanner {
	return &SSEScanner{maxEvent: maxEvent}
}

// Reset prepares s for a new stream, keeping its cap and, unless they grew
// past 4 MiB, the capacity of its buffers.
func (s *SSEScanner) Reset() {
	*s = SSEScanner{
		buf:      keepBuf(s.buf),
		data:     keepBuf(s.data),
		id:       keepBuf(s.id),
		maxEvent: s.maxEvent,
	}
}

// keepBuf returns b emptied, or nil when its capacity is past the ceiling.
func keepBuf(b []byte) []byte {
	if cap(b) > sseBufCeiling {
		return nil
	}
	return b[:0]
}

// Feed appends a copy of p to the stream. It first discards the bytes that
// are no longer needed, which invalidates the events returned so far. After
// an error Feed discards p.
func (s *SSEScanner) Feed(p []byte) {
	if s.err != nil || len(p) == 0 {
		return
	}
	s.compact()
	s.buf = append(s.buf, p...)
}

// Space returns at least min bytes of free space at the end of the
// scanner's buffer, for a caller to read into directly; Commit then adds
// the bytes written. Together they replace Feed without a second buffer or
// a copy. The slice is valid until the next call on s.
func (s *SSEScanner) Space(min int) []byte {
	s.compact()
	s.buf = slices.Grow(s.buf, min)
	return s.buf[len(s.buf):cap(s.buf)]
}

// Commit adds n bytes written into the slice Space returned.
func (s *SSEScanner) Commit(n int) {
	if s.err != nil || n <= 0 {
		return
	}
	s.buf = s.buf[:len(s.buf)+n]
}

// compact drops the bytes s no longer needs, shifting the spans it keeps.
func (s *SSEScanner) compact() {
	if k := s.keep(); k > 0 {
		s.buf = s.buf[:copy(s.buf, s.buf[k:])]
		s.pos -= k
		s.noEOL -= k
		if s.inEvent {
			s.evStart -= k
			s.typLo -= k
			s.typHi -= k
			s.datLo -= k
			s.datHi -= k
		}
	}
}

// keep returns the offset of the first byte s still needs.
func (s *SSEScanner) keep() int {
	if s.inEvent {
		return s.evStart
	}
	return s.pos
}

// Next returns the next complete event. It reports ok=false with a nil
// error when the bytes fed so far hold no further complete event.
func (s *SSEScanner) Next() (ev SSEEvent, ok bool, err error) {
	if s.err != nil {
		return SSEEvent{}, false, s.err
	}
	b := s.buf
	for {
		i := s.pos
		if s.skipLF {
			if i == len(b) {
				return SSEEvent{}, false, nil
			}
			s.skipLF = false
			if b[i] == '\n' {
				i++
				s.pos = i
			}
		}
		if !s.started {
			if len(b)-i < len(sseBOM) && sseBOM[:len(b)-i] == string(b[i:]) {
				return SSEEvent{}, false, nil // could still be a byte order mark
			}
			s.started = true
			if len(b)-i >= len(sseBOM) && string(b[i:i+len(sseBOM)]) == sseBOM {
				i += len(sseBOM)
				s.pos = i
			}
		}

		// Find the end of the line at i: the first LF, unless a CR comes
		// before it. Bytes already searched on an earlier call are not
		// searched again, so a long line fed in small pieces costs linear
		// time.
		from := max(i, s.noEOL)
		lf := bytes.IndexByte(b[from:], '\n')
		var cr int
		if lf < 0 {
			cr = bytes.IndexByte(b[from:], '\r')
		} else {
			cr = bytes.IndexByte(b[from:from+lf], '\r')
		}
		var end, next int // end of the line's content; start of the next line
		switch {
		case cr >= 0:
			end = from + cr
			next = end + 1
			if next == len(b) {
				s.skipLF = true
			} else if b[next] == '\n' {
				next++
			}
		case lf >= 0:
			end = from + lf
			next = end + 1
		default:
			// An incomplete line, or none: wait for more bytes.
			s.noEOL = len(b)
			if i < len(b) && s.tooLong(i, len(b)) {
				return SSEEvent{}, false, s.fail()
			}
			return SSEEvent{}, false, nil
		}
		s.pos = next
		n := end - i

		if n == 0 { // an empty line dispatches the event
			if !s.inEvent {
				continue
			}
			s.inEvent = false
			if s.nData == 0 {
				continue
			}
			if s.typHi > s.typLo {
				ev.Event = b[s.typLo:s.typHi]
			}
			if s.nData == 1 {
				ev.Data = b[s.datLo:s.datHi]
			} else {
				ev.Data = s.data
			}
			if len(s.id) > 0 {
				ev.ID = s.id
			}
			return ev, true, nil
		}

		if b[i] == ':' { // a comment
			if s.tooLong(i, end) {
				return SSEEvent{}, false, s.fail()
			}
			continue
		}

		if !s.inEvent {
			s.inEvent = true
			s.evStart = i
			s.typLo, s.typHi, s.nData = 0, 0, 0
		}
		if s.tooLong(i, end) {
			return SSEEvent{}, false, s.fail()
		}
		line := b[i:end]
		name, vLo := line, end
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			name = line[:c]
			vLo = i + c + 1
			if vLo < end && b[vLo] == ' ' {
				vLo++
			}
		}
		switch string(name) {
		case "data":
			switch s.nData {
			case 0:
				s.datLo, s.datHi = vLo, end
			case 1:
				s.data = append(s.data[:0], b[s.datLo:s.datHi]...)
				fallthrough
			default:
				s.data = append(s.data, '\n')
				s.data = append(s.data, b[vLo:end]...)
			}
			s.nData++
		case "event":
			s.typLo, s.typHi = vLo, end
		case "id":
			if bytes.IndexByte(b[vLo:end], 0) < 0 {
				s.id = append(s.id[:0], b[vLo:end]...)
			}
		}
	}
}

// Finish is Next at the end of the body: it returns the remaining complete
// events one per call, then discards what is left and reports ok=false. As
// the WHATWG standard requires, an event that the body ends in the middle
// of (before its terminating empty line) is not dispatched, even when it
// has data.
func (s *SSEScanner) Finish() (ev SSEEvent, ok bool, err error) {
	ev, ok, err = s.Next()
	if !ok && err == nil {
		s.pos = len(s.buf)
		s.inEvent, s.skipLF, s.started = false, false, true
	}
	return ev, ok, err
}

// tooLong reports whether the bytes up to end exceed the cap, counting from
// the start of the current event, or from lineStart outside an event.
func (s *SSEScanner) tooLong(lineStart, end int) bool {
	from := lineStart
	if s.inEvent {
		from = s.evStart
	}
	limit := s.maxEvent
	if limit <= 0 {
		limit = DefaultMaxSSEEvent
	}
	return end-from > limit
}

// SetMaxEvent sets the cap on one event's bytes; n <= 0 selects
// DefaultMaxSSEEvent. Reset keeps it.
func (s *SSEScanner) SetMaxEvent(n int) { s.maxEvent = n }

// fail makes s fail with ErrEventTooLarge and returns it.
func (s *SSEScanner) fail() error {
	s.err = ErrEventTooLarge
	s.inEvent = false
	s.pos = len(s.buf)
	return s.err
}
