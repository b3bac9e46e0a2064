package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bytedance/sonic"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// The texts a row carries, in the order of ledgerRow.textLen.
const (
	textRequestID = iota
	textBucket
	textRoute
	textTier
	textErrorCode
	nText
)

// rowTextCap holds a request id of the longest length allowed (128) with
// room for the short names beside it; a record whose texts do not fit is
// kept in a heap copy instead (one allocation, never in practice).
const rowTextCap = 240

// The ids a row carries, in the order of ledgerRow.idText.
const (
	idKey = iota
	idUser
	idOrg
	idWorkspace
	nID
)

// Flags of ledgerRow.flags.
const (
	flagEstimated = 1 << iota
	flagBilled
	flagStream
)

// ledgerRow is a UsageRecord copied by value into fixed storage: it holds
// no reference to the caller's memory (the caller may recycle its buffers
// as soon as Record returns) and copying it allocates nothing. Ids are kept
// as text and parsed by the writer, off the hot path. A row with a non-nil
// barrier is not a row but a flush request travelling the queue.
type ledgerRow struct {
	rowID                     [16]byte
	idText                    [nID][codec.UUIDLen]byte // key, user, organization, workspace
	at                        int64                    // Unix microseconds
	inTok, outTok, wTok, cost int64
	durUS, ttftUS             int64
	status                    int32
	ids                       uint8 // bit i: idText[i] holds an id
	flags                     uint8
	textLen                   [nText]uint8
	text                      [rowTextCap]byte
	long                      *[nText]string // the texts, when they did not fit in text
	barrier                   *barrier
	// traceID and spanID name the request's sampled span (zero when
	// there is none); they are not stored or spooled.
	traceID [16]byte
	spanID  [8]byte
	jseq    uint64 // the row's sequence in the journal; 0 when it is not there
	jslot   uint32 // its slot
}

// fill copies r into the row and mints its row id. It reports whether an
// id was not of a UUID's length (the row keeps null there); the writer
// checks the rest of the form.
func (w *ledgerRow) fill(r *hotpath.UsageRecord) (badID bool) {
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	w.at = at.UnixMicro()
	w.rowID = newRowID(w.at / 1000)
	w.ids = 0
	for i, s := range [nID]string{r.KeyID, r.UserID, r.OrgID, r.WorkspaceID} {
		switch len(s) {
		case 0:
		case codec.UUIDLen:
			copy(w.idText[i][:], s)
			w.ids |= 1 << i
		default:
			badID = true
		}
	}
	w.status = clampInt32(r.Status)
	w.inTok, w.outTok, w.wTok, w.cost = r.InputTokens, r.OutputTokens, r.WeightedTokens, r.CostPico
	w.durUS, w.ttftUS = r.DurationUS, r.TTFTUS
	w.flags = rowFlags(r.Estimated, r.Billed, r.Stream)
	w.traceID, w.spanID = r.TraceID, r.SpanID
	w.setTexts(&[nText]string{r.RequestID, r.Bucket, r.Route, r.Tier, r.ErrorCode})
	return badID
}

// rowFlags maps a usage record's booleans to the row's flag bits: the one
// mapping both the record and the spool line go through.
func rowFlags(estimated, billed, stream bool) uint8 {
	var f uint8
	if estimated {
		f |= flagEstimated
	}
	if billed {
		f |= flagBilled
	}
	if stream {
		f |= flagStream
	}
	return f
}

// setTexts stores the row's texts, inline when they fit.
func (w *ledgerRow) setTexts(texts *[nText]string) {
	w.long = nil
	n := 0
	for _, s := range texts {
		n += len(s) // no text is longer than rowTextCap < 256 when n fits
	}
	if n > rowTextCap {
		long := new([nText]string)
		for i, s := range texts {
			long[i] = strings.Clone(s)
		}
		w.long = long
		return
	}
	off := 0
	for i, s := range texts {
		w.textLen[i] = uint8(copy(w.text[off:], s))
		off += len(s)
	}
}

// textBytes returns text i of the row; the slice aliases the row.
func (w *ledgerRow) textBytes(i int) []byte {
	if w.long != nil {
		return []byte(w.long[i])
	}
	off := 0
	for j := 0; j < i; j++ {
		off += int(w.textLen[j])
	}
	return w.text[off : off+int(w.textLen[i])]
}

func clampInt32(v int) int32 {
	switch {
	case v > math.MaxInt32:
		return math.MaxInt32
	case v < math.MinInt32:
		return math.MinInt32
	}
	return int32(v)
}

// newRowID mints a version-7 UUID (codec.UUIDv7): time-ordered ids keep
// the primary key's inserts at the right edge of its index.
func newRowID(unixMilli int64) (id [16]byte) {
	hi, lo := codec.UUIDv7(unixMilli, rand.Uint64(), rand.Uint64())
	binary.BigEndian.PutUint64(id[:8], hi)
	binary.BigEndian.PutUint64(id[8:], lo)
	return id
}

// uuidPairs are the offsets of the 16 hex pairs in a UUID's text form.
var uuidPairs = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// hexValue maps a hex digit to its value and every other byte to 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
		t[strings.ToUpper(string(c))[0]] = byte(i)
	}
	return t
}()

// id returns id i of the row as a UUID; ok is false when the row has none
// or its text is not a UUID.
func (w *ledgerRow) id(i int) (id [16]byte, present, ok bool) {
	if w.ids&(1<<i) == 0 {
		return id, false, false
	}
	return id, true, parseUUID(&id, w.idText[i][:])
}

// parseUUID parses the 36-character text form of a UUID, either case.
func parseUUID[T string | []byte](dst *[16]byte, s T) bool {
	if len(s) != codec.UUIDLen || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	var bad byte
	for i, p := range uuidPairs {
		h, l := hexValue[s[p]], hexValue[s[p+1]]
		bad |= h | l
		dst[i] = h<<4 | l
	}
	return bad&0xf0 == 0
}

func unhex(c byte) (byte, bool) {
	v := hexValue[c]
	return v, v != 0xff
}

const hexDigits = "0123456789abcdef"

// appendUUID appends the lowercase text form of id.
func appendUUID(dst []byte, id *[16]byte) []byte {
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xf])
	}
	return dst
}

func uuidString(id *[16]byte) string {
	var buf [codec.UUIDLen]byte
	return string(appendUUID(buf[:0], id))
}

// The spool's line format, version 1:
//
//	<crc32c of the JSON, 8 lowercase hex digits> <space> <JSON object> <newline>
//
// The checksum finds a line a crash tore or a disk garbled; the JSON names
// every field, so an operator can read a spool with standard tools.
const spoolVersion = 1

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// spoolRecord is a spool line's JSON object.
type spoolRecord struct {
	V              int    `json:"v"`
	RowID          string `json:"row_id"`
	RequestID      string `json:"request_id"`
	CreatedAtUS    int64  `json:"created_at_us"`
	KeyID          string `json:"key_id"`
	UserID         string `json:"user_id"`
	OrgID          string `json:"org_id"`
	WorkspaceID    string `json:"workspace_id"`
	Bucket         string `json:"bucket"`
	Route          string `json:"route"`
	Tier           string `json:"tier"`
	Status         int32  `json:"status"`
	ErrorCode      string `json:"error_code"`
	InputTokens    int64  `json:"input_tokens"`
	OutputTokens   int64  `json:"output_tokens"`
	WeightedTokens int64  `json:"weighted_tokens"`
	CostPico       int64  `json:"cost_pico"`
	Estimated      bool   `json:"estimated"`
	Billed         bool   `json:"billed"`
	Stream         bool   `json:"stream"`
	DurationUS     int64  `json:"duration_us"`
	TTFTUS         int64  `json:"ttft_us"`
}

var spoolTextNames = [nText]string{"request_id", "bucket", "route", "tier", "error_code"}
var spoolIDNames = [nID]string{"key_id", "user_id", "org_id", "workspace_id"}

// appendSpoolLine appends the row as one spool line. It allocates nothing
// once dst has room.
func appendSpoolLine(dst []byte, w *ledgerRow) []byte {
	start := len(dst)
	dst = append(dst, "00000000 "...)
	js := len(dst)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, spoolVersion, 10)
	dst = append(dst, `,"row_id":"`...)
	dst = appendUUID(dst, &w.rowID)
	dst = append(dst, `","created_at_us":`...)
	dst = strconv.AppendInt(dst, w.at, 10)
	for i := range nID {
		if w.ids&(1<<i) == 0 {
			continue
		}
		dst = append(dst, `,"`...)
		dst = append(dst, spoolIDNames[i]...)
		dst = append(dst, `":`...)
		dst = codec.AppendJSONBytes(dst, w.idText[i][:])
	}
	for i := 0; i < nText; i++ {
		dst = append(dst, `,"`...)
		dst = append(dst, spoolTextNames[i]...)
		dst = append(dst, `":`...)
		dst = codec.AppendJSONBytes(dst, w.textBytes(i))
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"status", int64(w.status)}, {"input_tokens", w.inTok}, {"output_tokens", w.outTok},
		{"weighted_tokens", w.wTok}, {"cost_pico", w.cost}, {"duration_us", w.durUS}, {"ttft_us", w.ttftUS}} {
		dst = append(dst, `,"`...)
		dst = append(dst, f.name...)
		dst = append(dst, `":`...)
		dst = strconv.AppendInt(dst, f.v, 10)
	}
	for _, f := range [...]struct {
		name string
		bit  uint8
	}{{"estimated", flagEstimated}, {"billed", flagBilled}, {"stream", flagStream}} {
		dst = append(dst, `,"`...)
		dst = append(dst, f.name...)
		dst = append(dst, `":`...)
		dst = strconv.AppendBool(dst, w.flags&f.bit != 0)
	}
	dst = append(dst, '}')
	sum := crc32.Checksum(dst[js:], crcTable)
	for i := 7; i >= 0; i-- {
		dst[start+i] = hexDigits[sum&0xf]
		sum >>= 4
	}
	return append(dst, '\n')
}

var errBadSpoolLine = errors.New("bad spool line")

// parseSpoolLine reads one spool line (without its newline) back into w.
func parseSpoolLine(line []byte, w *ledgerRow) error {
	if len(line) < 10 || line[8] != ' ' {
		return fmt.Errorf("%w: no checksum", errBadSpoolLine)
	}
	var want uint32
	for _, c := range line[:8] {
		d, ok := unhex(c)
		if !ok {
			return fmt.Errorf("%w: no checksum", errBadSpoolLine)
		}
		want = want<<4 | uint32(d)
	}
	js := line[9:]
	if crc32.Checksum(js, crcTable) != want {
		return fmt.Errorf("%w: checksum mismatch", errBadSpoolLine)
	}
	var rec spoolRecord
	if err := sonic.Unmarshal(js, &rec); err != nil {
		return fmt.Errorf("%w: %v", errBadSpoolLine, err)
	}
	if rec.V != spoolVersion {
		return fmt.Errorf("%w: version %d", errBadSpoolLine, rec.V)
	}
	*w = ledgerRow{at: rec.CreatedAtUS, status: rec.Status, inTok: rec.InputTokens, outTok: rec.OutputTokens,
		wTok: rec.WeightedTokens, cost: rec.CostPico, durUS: rec.DurationUS, ttftUS: rec.TTFTUS}
	if !parseUUID(&w.rowID, rec.RowID) {
		return fmt.Errorf("%w: row_id", errBadSpoolLine)
	}
	for i, s := range [nID]string{rec.KeyID, rec.UserID, rec.OrgID, rec.WorkspaceID} {
		if s == "" {
			continue
		}
		if len(s) != codec.UUIDLen {
			return fmt.Errorf("%w: %s", errBadSpoolLine, spoolIDNames[i])
		}
		copy(w.idText[i][:], s)
		w.ids |= 1 << i
	}
	w.flags |= rowFlags(rec.Estimated, rec.Billed, rec.Stream)
	w.setTexts(&[nText]string{rec.RequestID, rec.Bucket, rec.Route, rec.Tier, rec.ErrorCode})
	return nil
}

// cleanAlready reports whether b is valid UTF-8 without NUL bytes: text
// PostgreSQL takes as it is.
func cleanAlready(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// cleanText makes b safe for a PostgreSQL text column: valid UTF-8 and no
// NUL byte, each stored as U+FFFD. A ledger row's texts come from the
// gateway's own names and a validated request id, so there this never
// changes a real row; it only keeps a malformed one from failing its whole
// batch. An eval result's reply is the model's, which may hold either.
func cleanText(b []byte) string {
	if cleanAlready(b) {
		return string(b)
	}
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
}
