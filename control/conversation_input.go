package control

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bytedance/sonic"

	"github.com/edgegw/gateway/codec"
)

// Limits of the conversation routes (spec: Limits), and the bounds this
// gateway adds where the specification names none.
const (
	convListDefault    = 50
	convListMax        = 100
	convMessageDefault = 100
	convMessageMax     = 200
	convSearchDefault  = 20
	convSearchMax      = 50
	convMetaMax        = 4096 // bytes of the compacted object
	convTitleDerived   = 80   // characters of a derived title, ellipsis included
	convFilesMax       = 20   // distinct files per message

	convTitleMax       = 1000 // characters of a title set by the client
	convModelMax       = 256  // bytes of the model label
	convFileIDMax      = 128  // bytes of one file id
	convToolCallIDMax  = 256  // bytes of a tool call id
	convSearchQueryMax = 2000 // bytes of a search query
	convIdemKeyMax     = 255  // bytes of an Idempotency-Key
)

func convInvalid(msg string) *codec.Error { return codec.NewError(codec.CodeInvalidRequest, msg) }

var (
	errConvBodyUTF8   = convInvalid("The request body is not valid UTF-8.")
	errConvBodyObject = convInvalid("The request body must be a JSON object.")
)

// convFields is a request body decoded one level deep, so that each field
// is checked on its own with a message naming it, and an explicit null is
// told apart from an absent field.
type convFields map[string]json.RawMessage

// parseConvFields decodes a JSON object body. An empty body is an empty object.
func parseConvFields(body []byte) (convFields, *codec.Error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return convFields{}, nil
	}
	if !utf8.Valid(body) {
		return nil, errConvBodyUTF8
	}
	var f convFields
	if err := sonic.Unmarshal(body, &f); err != nil {
		if !sonic.Valid(body) {
			return nil, codec.ErrMalformedJSON
		}
		return nil, errConvBodyObject
	}
	if f == nil {
		return nil, errConvBodyObject
	}
	return f, nil
}

// present reports whether the field was sent, null included.
func (f convFields) present(name string) bool {
	_, ok := f[name]
	return ok
}

// given reports whether the field was sent with a value other than null.
func (f convFields) given(name string) bool {
	raw, ok := f[name]
	return ok && !convIsNull(raw)
}

func convIsNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// str reads an optional string field: nil when absent or null.
func (f convFields) str(name string) (*string, *codec.Error) {
	if !f.given(name) {
		return nil, nil
	}
	var s string
	if err := sonic.Unmarshal(f[name], &s); err != nil {
		return nil, convInvalid(name + ": must be a string.")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return nil, convInvalid(name + ": must not contain NUL characters.")
	}
	return &s, nil
}

// boolean reads an optional boolean field: false when absent or null.
func (f convFields) boolean(name string) (bool, *codec.Error) {
	if !f.given(name) {
		return false, nil
	}
	var b bool
	if err := sonic.Unmarshal(f[name], &b); err != nil {
		return false, convInvalid(name + ": must be a boolean.")
	}
	return b, nil
}

// strings reads an optional array of strings: nil when absent or null.
func (f convFields) strings(name string) ([]string, *codec.Error) {
	if !f.given(name) {
		return nil, nil
	}
	var out []string
	if err := sonic.Unmarshal(f[name], &out); err != nil {
		return nil, convInvalid(name + ": must be an array of strings.")
	}
	for _, s := range out {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, convInvalid(name + ": must not contain NUL characters.")
		}
	}
	return out, nil
}

// convCompactObject checks that raw is a JSON object and returns it compacted:
// insignificant whitespace removed, everything else (key order, escapes,
// number spelling) kept as sent.
func convCompactObject(name string, raw json.RawMessage) ([]byte, *codec.Error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, convInvalid(name + ": must be a JSON object.")
	}
	return buf.Bytes(), nil
}

// convPageLimit parses a page size query parameter: def when absent, otherwise
// an integer from 1 to max.
func convPageLimit(name string, raw []byte, def, max int) (int, *codec.Error) {
	if raw == nil {
		return def, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 1 || n > max {
		return 0, convInvalid(name + ": must be an integer from 1 to " + strconv.Itoa(max) +
			" (the page limit is " + strconv.Itoa(max) + ").")
	}
	return n, nil
}

// deriveConvTitle names a conversation after a user message: the first line
// that has a letter, digit or symbol, with whitespace runs collapsed to one
// space and control characters dropped, cut to 80 characters on a word
// boundary with an ellipsis. Content without a letter, digit or symbol
// yields "", which leaves the title null.
func deriveConvTitle(content string) string {
	for line := range strings.FieldsFuncSeq(content, convLineBreak) {
		t := convCleanTitleLine(line)
		if strings.IndexFunc(t, convWordish) < 0 {
			continue
		}
		return convTruncateTitle(t)
	}
	return ""
}

func convLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

func convWordish(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.IsSymbol(r)
}

// convCleanTitleLine collapses whitespace to single spaces, trims it, and drops
// the other control characters.
func convCleanTitleLine(line string) string {
	var b strings.Builder
	space := false
	for _, r := range line {
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
		case unicode.IsControl(r):
		default:
			if space {
				b.WriteByte(' ')
				space = false
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// convTruncateTitle cuts t to at most 80 characters, the ellipsis included.
// The cut falls on the last space when that keeps at least half of the
// room; a title that is one long word is cut inside it.
func convTruncateTitle(t string) string {
	if utf8.RuneCountInString(t) <= convTitleDerived {
		return t
	}
	r := []rune(t)
	room := convTitleDerived - 1 // one character for the ellipsis
	cut := r[:room]
	if r[room] != ' ' {
		for i := room - 1; i >= room/2; i-- {
			if cut[i] == ' ' {
				cut = cut[:i]
				break
			}
		}
	}
	return strings.TrimRight(string(cut), " ") + "…"
}
