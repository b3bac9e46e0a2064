package control

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// Bounds of a feedback payload (docs/feedback.md). Texts the issue bounds in
// KiB are counted in bytes of UTF-8; the others in characters.
const (
	feedbackCommentMax    = 2000      // characters of thumbs.comment and edit_*.reason
	feedbackEditedTextMax = 100 << 10 // bytes of edit_*.edited_text
	feedbackNameMax       = 256       // characters of test_result.name
	feedbackDetailsMax    = 10 << 10  // bytes of test_result.details
)

// registerFeedback adds the feedback route.
func (a *API) registerFeedback(r Registrar) {
	r.Handle(fasthttp.MethodPost, "/api/v1/feedback",
		hotpath.Access{Name: "feedback", Auth: hotpath.AuthUser, Family: hotpath.FamilyFeedback}, a.postFeedback)
}

func feedbackInvalid(msg string) *codec.Error { return codec.NewError(codec.CodeInvalidRequest, msg) }

// feedbackBody is the answer to POST /api/v1/feedback.
type feedbackBody struct {
	Object    string          `json:"object"`
	RequestID string          `json:"request_id"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
	Replaced  bool            `json:"replaced"`
}

// postFeedback validates a report against its type's shape and stores it
// on one of the caller's own requests. A request id that is not the
// caller's — another user's, another organization's, unknown, malformed or
// not yet in the ledger — is the same 404 request_not_found.
func (a *API) postFeedback(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	for name := range f {
		switch name {
		case "request_id", "type", "payload":
		default:
			return feedbackInvalid("Unknown field " + name + "; a feedback report has request_id, type and payload.")
		}
	}
	var requestID, typ string
	if err := sonic.Unmarshal(f["request_id"], &requestID); err != nil || !f.given("request_id") {
		return feedbackInvalid("request_id: required, a string.")
	}
	if err := sonic.Unmarshal(f["type"], &typ); err != nil || !f.given("type") {
		return feedbackInvalid("type: required, one of thumbs, edit_accepted, edit_rejected, test_result.")
	}
	payload, cerr := validateFeedbackPayload(typ, f["payload"], f.given("payload"))
	if cerr != nil {
		return cerr
	}
	if !codec.ValidRequestID([]byte(requestID)) {
		return errRequestNotFound
	}
	qctx, cancel := queryContext()
	defer cancel()
	fb, err := a.DB.PutFeedback(qctx, c.User.OrgID, c.User.UserID, requestID, typ, payload)
	if err != nil {
		return storageError(err, errRequestNotFound)
	}
	status := fasthttp.StatusCreated
	if fb.Replaced {
		status = fasthttp.StatusOK
	}
	return writeJSON(ctx, status, feedbackBody{Object: "feedback", RequestID: fb.RequestID, Type: fb.Type,
		Payload: payload, CreatedAt: fb.CreatedAt.Format(time.RFC3339), UpdatedAt: fb.UpdatedAt.Format(time.RFC3339),
		Replaced: fb.Replaced})
}

// feedbackField is one payload field's rule.
type feedbackField struct {
	kind     byte // 's' string, 'b' boolean
	required bool
	max      int  // bound on the string
	bytes    bool // max counts bytes, not characters
	enum     []string
}

var feedbackShapes = map[string]map[string]feedbackField{
	"thumbs": {
		"value":   {kind: 's', required: true, enum: []string{"up", "down"}},
		"comment": {kind: 's', max: feedbackCommentMax},
	},
	"edit_accepted": {
		"edited_text": {kind: 's', max: feedbackEditedTextMax, bytes: true},
		"reason":      {kind: 's', max: feedbackCommentMax},
	},
	"edit_rejected": {
		"edited_text": {kind: 's', max: feedbackEditedTextMax, bytes: true},
		"reason":      {kind: 's', max: feedbackCommentMax},
	},
	"test_result": {
		"passed":  {kind: 'b', required: true},
		"name":    {kind: 's', max: feedbackNameMax},
		"details": {kind: 's', max: feedbackDetailsMax, bytes: true},
	},
}

// validateFeedbackPayload checks raw against typ's shape and returns the
// payload re-encoded with only its known fields. An absent or null payload
// is an empty object, which passes only for a type with no required field.
func validateFeedbackPayload(typ string, raw json.RawMessage, given bool) ([]byte, *codec.Error) {
	shape, ok := feedbackShapes[typ]
	if !ok {
		return nil, feedbackInvalid("type: " + quoteForMessage(typ) + " is not one of thumbs, edit_accepted, edit_rejected, test_result.")
	}
	fields := map[string]json.RawMessage{}
	if given {
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return nil, feedbackInvalid("payload: must be a JSON object.")
		}
		if err := sonic.Unmarshal(raw, &fields); err != nil {
			return nil, feedbackInvalid("payload: must be a JSON object.")
		}
	}
	out := make(map[string]any, len(fields))
	for name, v := range fields {
		rule, ok := shape[name]
		if !ok {
			return nil, feedbackInvalid("payload." + quoteForMessage(name) + ": not a field of a " + typ + " payload.")
		}
		path := "payload." + name
		switch rule.kind {
		case 'b':
			var b bool
			if err := sonic.Unmarshal(v, &b); err != nil || convIsNull(v) {
				return nil, feedbackInvalid(path + ": must be a boolean.")
			}
			out[name] = b
		case 's':
			var s string
			if err := sonic.Unmarshal(v, &s); err != nil || convIsNull(v) {
				return nil, feedbackInvalid(path + ": must be a string.")
			}
			if !utf8.ValidString(s) {
				return nil, feedbackInvalid(path + ": must be valid UTF-8.")
			}
			if strings.IndexByte(s, 0) >= 0 { // PostgreSQL holds no NUL in jsonb
				return nil, feedbackInvalid(path + ": must not contain NUL characters.")
			}
			if rule.enum != nil && !slices.Contains(rule.enum, s) {
				return nil, feedbackInvalid(path + ": must be \"up\" or \"down\".")
			}
			if rule.max > 0 {
				n, unit := utf8.RuneCountInString(s), " characters."
				if rule.bytes {
					n, unit = len(s), " bytes."
				}
				if n > rule.max {
					return nil, feedbackInvalid(path + ": at most " + strconv.Itoa(rule.max) + unit)
				}
			}
			out[name] = s
		}
	}
	for name, rule := range shape {
		if _, ok := out[name]; rule.required && !ok {
			return nil, feedbackInvalid("payload." + name + ": required for a " + typ + " payload.")
		}
	}
	b, err := json.Marshal(out) // sorted keys: a stable stored form
	if err != nil {
		return nil, feedbackInvalid("payload: cannot be encoded.")
	}
	return b, nil
}

// quoteForMessage quotes a client-sent name for an error message, cut to a
// bounded length.
func quoteForMessage(s string) string {
	if len(s) > 64 {
		s = s[:64]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}
