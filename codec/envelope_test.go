package codec

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// fullError sets every detail field.
var fullError = &Error{
	Code:    CodeKeyScopeForbidden,
	Message: "key \"k1\" lacks <scope>\n",
	Detail: Detail{
		RequiredScope:    "chat:write",
		RequiredVersion:  "2026-10-05",
		Reason:           "scope",
		ErrorDescription: "tab\there",
		FileID:           "file_123",
		Filename:         "notes\u2028.txt",
		Bound:            "max_tokens",
		Category:         "email",
		Position:         2,
		HasPosition:      true,
		Limit:            4096,
		HasLimit:         true,
		Tokens:           -1,
		HasTokens:        true,
		ResetAt:          1791374400, // 2026-10-07T12:00:00Z
		MiraAvailable:    1,
		VisionTiers:      []string{"pro", "team"},
		RetryAfter:       30,
	},
}

func TestAppendV1Error(t *testing.T) {
	tests := []struct {
		name      string
		err       *Error
		requestID string
		want      string
	}{
		{
			name:      "default message",
			err:       ErrRateLimited,
			requestID: "req_1",
			want:      `{"code":"rate_limited","error":"Too many requests; retry later.","request_id":"req_1"}`,
		},
		{
			name: "empty request id",
			err:  NewError(CodeNotFound, "no route"),
			want: `{"code":"not_found","error":"no route","request_id":""}`,
		},
		{
			name:      "nil error",
			requestID: "r",
			want:      `{"code":"internal_error","error":"An internal error occurred.","request_id":"r"}`,
		},
		{
			name:      "request id escaped",
			err:       ErrNotFound,
			requestID: "a\"b",
			want:      `{"code":"not_found","error":"The requested route does not exist.","request_id":"a\"b"}`,
		},
		{
			name:      "retry after not written",
			err:       &Error{Code: CodeRateLimited, Message: "slow down", Detail: Detail{RetryAfter: 7}},
			requestID: "r",
			want:      `{"code":"rate_limited","error":"slow down","request_id":"r"}`,
		},
		{
			name:      "zero limit written when set",
			err:       &Error{Code: CodeBudgetExhausted, Message: "m", Detail: Detail{HasLimit: true, HasTokens: true}},
			requestID: "r",
			want:      `{"code":"budget_exhausted","error":"m","request_id":"r","limit":0,"tokens":0}`,
		},
		{
			name:      "limit without HasLimit omitted",
			err:       &Error{Code: CodeBudgetExhausted, Message: "m", Detail: Detail{Limit: 5, Tokens: 6}},
			requestID: "r",
			want:      `{"code":"budget_exhausted","error":"m","request_id":"r"}`,
		},
		{
			name:      "mira false",
			err:       &Error{Code: CodeModelUnavailable, Message: "m", Detail: Detail{MiraAvailable: -1}},
			requestID: "r",
			want:      `{"code":"model_unavailable","error":"m","request_id":"r","mira_available":false}`,
		},
		{
			name:      "empty vision tiers omitted",
			err:       &Error{Code: CodeImageNotSupported, Message: "m", Detail: Detail{VisionTiers: []string{}}},
			requestID: "r",
			want:      `{"code":"image_not_supported","error":"m","request_id":"r"}`,
		},
		{
			name:      "pre-epoch reset",
			err:       &Error{Code: CodeRateLimited, Message: "m", Detail: Detail{ResetAt: -1}},
			requestID: "r",
			want:      `{"code":"rate_limited","error":"m","request_id":"r","reset_at":"1969-12-31T23:59:59Z"}`,
		},
		{
			name:      "all details",
			err:       fullError,
			requestID: "req_full",
			want: `{"code":"key_scope_forbidden","error":"key \"k1\" lacks <scope>\n","request_id":"req_full",` +
				`"required_scope":"chat:write","required_version":"2026-10-05","reason":"scope",` +
				`"error_description":"tab\there","file_id":"file_123","filename":"notes\u2028.txt",` +
				`"bound":"max_tokens","category":"email","position":2,"limit":4096,"tokens":-1,"reset_at":"2026-10-07T12:00:00Z",` +
				`"mira_available":true,"vision_tiers":["pro","team"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendV1Error([]byte("prefix"), tt.err, []byte(tt.requestID))
			require.Equal(t, "prefix", string(got[:6]))
			got = got[6:]
			require.Equal(t, tt.want, string(got))
			require.True(t, json.Valid(got))
		})
	}
}

func TestAppendV1ErrorDecodes(t *testing.T) {
	var got struct {
		Code             string   `json:"code"`
		Error            string   `json:"error"`
		RequestID        string   `json:"request_id"`
		RequiredScope    string   `json:"required_scope"`
		RequiredVersion  string   `json:"required_version"`
		Reason           string   `json:"reason"`
		ErrorDescription string   `json:"error_description"`
		FileID           string   `json:"file_id"`
		Filename         string   `json:"filename"`
		Bound            string   `json:"bound"`
		Category         string   `json:"category"`
		Position         *int64   `json:"position"`
		Limit            *int64   `json:"limit"`
		Tokens           *int64   `json:"tokens"`
		ResetAt          string   `json:"reset_at"`
		MiraAvailable    *bool    `json:"mira_available"`
		VisionTiers      []string `json:"vision_tiers"`
	}
	body := AppendV1Error(nil, fullError, []byte("req_9"))
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got))

	d := fullError.Detail
	require.Equal(t, "key_scope_forbidden", got.Code)
	require.Equal(t, fullError.Message, got.Error)
	require.Equal(t, "req_9", got.RequestID)
	require.Equal(t, d.RequiredScope, got.RequiredScope)
	require.Equal(t, d.RequiredVersion, got.RequiredVersion)
	require.Equal(t, d.Reason, got.Reason)
	require.Equal(t, d.ErrorDescription, got.ErrorDescription)
	require.Equal(t, d.FileID, got.FileID)
	require.Equal(t, d.Filename, got.Filename)
	require.Equal(t, d.Bound, got.Bound)
	require.Equal(t, d.Category, got.Category)
	require.Equal(t, d.Position, *got.Position)
	require.Equal(t, d.Limit, *got.Limit)
	require.Equal(t, d.Tokens, *got.Tokens)
	require.Equal(t, "2026-10-07T12:00:00Z", got.ResetAt)
	require.True(t, *got.MiraAvailable)
	require.Equal(t, d.VisionTiers, got.VisionTiers)
}

func TestAppendOpenAIError(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{
			name: "default message",
			err:  ErrUnauthorized,
			want: `{"error":{"message":"A valid API key is required.","type":"authentication_error","param":null,"code":"unauthorized"}}`,
		},
		{
			name: "details dropped",
			err:  fullError,
			want: `{"error":{"message":"key \"k1\" lacks <scope>\n","type":"permission_error","param":null,"code":"key_scope_forbidden"}}`,
		},
		{
			name: "nil error",
			want: `{"error":{"message":"An internal error occurred.","type":"server_error","param":null,"code":"internal_error"}}`,
		},
		{
			name: "client closed",
			err:  ErrClientClosedRequest,
			want: `{"error":{"message":"The client closed the request.","type":"invalid_request_error","param":null,"code":"client_closed_request"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendOpenAIError(nil, tt.err)
			require.Equal(t, tt.want, string(got))
			require.True(t, json.Valid(got))
		})
	}
}

func TestEnvelopesForEveryCode(t *testing.T) {
	for c := Code(1); c < codeCount; c++ {
		t.Run(c.String(), func(t *testing.T) {
			var v1 map[string]any
			require.NoError(t, json.Unmarshal(AppendV1Error(nil, &Error{Code: c}, []byte("r")), &v1))
			require.Equal(t, map[string]any{"code": c.String(), "error": c.DefaultMessage(), "request_id": "r"}, v1)

			var oa struct {
				Error map[string]any `json:"error"`
			}
			require.NoError(t, json.Unmarshal(AppendOpenAIError(nil, &Error{Code: c}), &oa))
			require.Equal(t, map[string]any{
				"message": c.DefaultMessage(),
				"type":    c.OpenAIType(),
				"param":   nil,
				"code":    c.String(),
			}, oa.Error)
		})
	}
}

func BenchmarkAppendV1Error(b *testing.B) {
	rid := []byte("0f8fad5b-d9cb-469f-a165-70867728950e")
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]byte, 0, 1024)
		for b.Loop() {
			dst = AppendV1Error(dst[:0], ErrRateLimited, rid)
		}
	})
	b.Run("all details", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]byte, 0, 1024)
		for b.Loop() {
			dst = AppendV1Error(dst[:0], fullError, rid)
		}
	})
}

func BenchmarkAppendOpenAIError(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, 1024)
	for b.Loop() {
		dst = AppendOpenAIError(dst[:0], ErrRateLimited)
	}
}
