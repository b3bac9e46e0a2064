package codec

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bytedance/sonic"
)

// strictJSON decodes request bodies: object keys match field names exactly
// ("MODEL" is not model), and strings must be valid JSON strings (no raw
// control characters, no unknown escapes) wherever they are, raw fields
// included.
var strictJSON = sonic.Config{CaseSensitive: true, ValidateString: true}.Froze()

// errBodyNotObject refuses a body that is valid JSON but not an object.
var errBodyNotObject = &Error{Code: CodeInvalidRequest, Message: "The request body must be a JSON object."}

// DecodeRequest decodes a JSON request body into v, a pointer to a struct,
// strictly: keys match case-sensitively, every string is a valid JSON
// string, and the whole body is valid UTF-8. A refusal is 400
// invalid_request naming the field at fault and, for a type error, the type
// the field takes. The work is linear in the body; a body that decodes
// allocates only what v holds.
func DecodeRequest(body []byte, v any) *Error {
	if !utf8.Valid(body) {
		off := invalidUTF8At(body)
		return fieldRefusal(body, off, "is not valid UTF-8 (byte "+strconv.Itoa(off)+"); send text as UTF-8.")
	}
	if err := strictJSON.Unmarshal(body, v); err == nil {
		return nil
	}
	return explainDecodeError(body, v)
}

// explainDecodeError runs the standard decoder, whose errors carry the
// offset and the Go type, over a body the fast decoder refused, and turns
// its error into a refusal naming the field. It runs only on bad input.
func explainDecodeError(body []byte, v any) *Error {
	fresh := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	err := json.Unmarshal(body, fresh)
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.As(err, &te):
		if te.Field == "" && te.Struct == "" {
			return errBodyNotObject
		}
		return fieldRefusal(body, int(te.Offset)-1, "must be "+jsonTypeName(te.Type)+", got "+article(te.Value)+".")
	case errors.As(err, &se):
		off := int(se.Offset) - 1
		if strings.Contains(se.Error(), " in string") || strings.Contains(se.Error(), "escape") {
			return fieldRefusal(body, off, "is not a valid JSON string: "+se.Error()+" (byte "+strconv.Itoa(off)+").")
		}
		return &Error{Code: CodeInvalidRequest,
			Message: "The request body is not valid JSON: " + se.Error() + " (byte " + strconv.Itoa(off) + ")."}
	}
	return ErrMalformedJSON
}

// fieldRefusal is invalid_request naming the field at byte off of body.
func fieldRefusal(body []byte, off int, msg string) *Error {
	path := JSONPathAt(body, off)
	if path == "" {
		return &Error{Code: CodeInvalidRequest, Message: "The request body " + msg}
	}
	return &Error{Code: CodeInvalidRequest, Message: path + ": " + msg}
}

// invalidUTF8At is the offset of the first byte of b that is not part of
// a valid UTF-8 sequence.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonTypeName names the JSON type a Go field takes, with its article.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a different type"
}

// article puts an article before a JSON value kind the standard decoder
// reports ("string", "number", "number 1.5", "bool", "array", "object").
func article(kind string) string {
	kind, _, _ = strings.Cut(kind, " ")
	switch kind {
	case "bool":
		return "a boolean"
	case "array", "object":
		return "an " + kind
	case "":
		return "another type"
	}
	return "a " + kind
}

// JSONPathAt names the value of the JSON document b that byte off lies in
// (or, past a value, the last one read before it) as a path such as
// messages[0].content, or "" at the top level. b need only be well formed
// up to off. It is linear in off and meant for error messages.
func JSONPathAt(b []byte, off int) string {
	type frame struct {
		array bool
		index int
		key   []byte
	}
	var stack []frame
	expectKey := false
	for i := 0; i < off && i < len(b); {
		switch c := b[i]; c {
		case '{':
			stack = append(stack, frame{})
			expectKey = true
			i++
		case '[':
			stack = append(stack, frame{array: true})
			expectKey = false
			i++
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expectKey = false
			i++
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].array {
					stack[n-1].index++
				} else {
					stack[n-1].key, expectKey = nil, true
				}
			}
			i++
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if n := len(stack); n > 0 && !stack[n-1].array && expectKey {
				stack[n-1].key = b[i+1 : min(j, len(b))]
				expectKey = false
			}
			i = j + 1
		default:
			i++
		}
	}
	var sb strings.Builder
	for _, f := range stack {
		switch {
		case f.array:
			sb.WriteByte('[')
			sb.WriteString(strconv.Itoa(f.index))
			sb.WriteByte(']')
		case f.key != nil:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.Write(f.key)
		default:
			return sb.String()
		}
	}
	return sb.String()
}
