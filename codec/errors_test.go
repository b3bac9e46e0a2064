package codec

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCodeTableComplete(t *testing.T) {
	seen := make(map[string]Code)
	for c := Code(1); c < codeCount; c++ {
		info := codeTable[c]
		require.NotEmptyf(t, info.slug, "code %d has no slug", c)
		prev, dup := seen[info.slug]
		require.Falsef(t, dup, "slug %q used by codes %d and %d", info.slug, prev, c)
		seen[info.slug] = c
		require.NotZerof(t, info.status, "%s has no status", info.slug)
		require.NotEmptyf(t, info.message, "%s has no message", info.slug)
		require.Equalf(t, wantOpenAIType(info.status), info.openAIType, "%s", info.slug)
		require.Truef(t, c.Valid(), "%s", info.slug)

		got, ok := LookupCode(info.slug)
		require.True(t, ok)
		require.Equal(t, c, got)
		require.Equal(t, info.slug, c.String())
		require.Equal(t, info.status, c.Status())
		require.Equal(t, info.openAIType, c.OpenAIType())
		require.Equal(t, info.message, c.DefaultMessage())
	}
	require.Len(t, seen, int(codeCount-1))
	require.Len(t, codeBySlug, int(codeCount)-1)
}

// wantOpenAIType is the status-to-type rule, written independently of the table.
func wantOpenAIType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	case status == 400, status == 405, status == 408, status == 409, status == 413, status == 414, status == 415, status == 422,
		status == 431, status == 499:
		return "invalid_request_error"
	}
	return fmt.Sprintf("unexpected status %d", status)
}

func TestCodes(t *testing.T) {
	tests := []struct {
		code   Code
		slug   string
		status int
		typ    string
	}{
		{CodeInvalidRequest, "invalid_request", 400, "invalid_request_error"},
		{CodeContextOverflow, "context_overflow", 400, "invalid_request_error"},
		{CodeInvalidToolSchema, "invalid_tool_schema", 400, "invalid_request_error"},
		{CodeInvalidSchema, "invalid_schema", 400, "invalid_request_error"},
		{CodeModerationRejected, "moderation_rejected", 400, "invalid_request_error"},
		{CodeFileNotText, "file_not_text", 400, "invalid_request_error"},
		{CodeFileTooLarge, "file_too_large", 400, "invalid_request_error"},
		{CodeImageNotSupported, "image_not_supported", 400, "invalid_request_error"},
		{CodeInputNotCountable, "input_not_countable", 400, "invalid_request_error"},
		{CodeUnknownVersion, "unknown_version", 400, "invalid_request_error"},
		{CodeAuthorizationPending, "authorization_pending", 400, "invalid_request_error"},
		{CodeAccessDenied, "access_denied", 400, "invalid_request_error"},
		{CodeExpiredToken, "expired_token", 400, "invalid_request_error"},
		{CodeInvalidGrant, "invalid_grant", 400, "invalid_request_error"},
		{CodeProviderNotSupported, "provider_not_supported", 400, "invalid_request_error"},
		{CodeRedirectURINotAllowed, "redirect_uri_not_allowed", 400, "invalid_request_error"},
		{CodeUnauthorized, "unauthorized", 401, "authentication_error"},
		{CodeAccountSuspended, "account_suspended", 403, "permission_error"},
		{CodeKeyScopeForbidden, "key_scope_forbidden", 403, "permission_error"},
		{CodeModelNotAllowed, "model_not_allowed", 403, "permission_error"},
		{CodeKeyReadOnly, "key_read_only", 403, "permission_error"},
		{CodeAccountRequired, "account_required", 403, "permission_error"},
		{CodeFileNotFound, "file_not_found", 404, "not_found_error"},
		{CodeRequestNotFound, "request_not_found", 404, "not_found_error"},
		{CodeEvalSuiteNotFound, "eval_suite_not_found", 404, "not_found_error"},
		{CodeEvalCaseNotFound, "eval_case_not_found", 404, "not_found_error"},
		{CodeEvalRunNotFound, "eval_run_not_found", 404, "not_found_error"},
		{CodeNotFound, "not_found", 404, "not_found_error"},
		{CodeMethodNotAllowed, "method_not_allowed", 405, "invalid_request_error"},
		{CodeRequestTimeout, "request_timeout", 408, "invalid_request_error"},
		{CodeIdempotencyConflict, "idempotency_conflict", 409, "invalid_request_error"},
		{CodeEvalSuiteSlugExists, "eval_suite_slug_exists", 409, "invalid_request_error"},
		{CodeOrgSelectionRequired, "org_selection_required", 409, "invalid_request_error"},
		{CodePayloadTooLarge, "payload_too_large", 413, "invalid_request_error"},
		{CodeURITooLong, "uri_too_long", 414, "invalid_request_error"},
		{CodeUnsupportedMediaType, "unsupported_media_type", 415, "invalid_request_error"},
		{CodeStructuredOutputUnsupported, "structured_output_unsupported", 422, "invalid_request_error"},
		{CodeStructuredOutputUnsatisfied, "structured_output_unsatisfied", 422, "invalid_request_error"},
		{CodeRateLimited, "rate_limited", 429, "rate_limit_error"},
		{CodeBudgetExhausted, "budget_exhausted", 429, "rate_limit_error"},
		{CodeKeySpendCapExceeded, "key_spend_cap_exceeded", 429, "rate_limit_error"},
		{CodeWorkspaceSpendCapExceeded, "workspace_spend_cap_exceeded", 429, "rate_limit_error"},
		{CodeCreditsExhausted, "credits_exhausted", 429, "rate_limit_error"},
		{CodeRequestHeadersTooLarge, "request_headers_too_large", 431, "invalid_request_error"},
		{CodeClientClosedRequest, "client_closed_request", 499, "invalid_request_error"},
		{CodeInternalError, "internal_error", 500, "server_error"},
		{CodeTransferEncodingNotSupported, "transfer_encoding_not_supported", 501, "server_error"},
		{CodeUpstreamError, "upstream_error", 502, "server_error"},
		{CodeUpstreamOverloaded, "upstream_overloaded", 503, "server_error"},
		{CodeModelUnavailable, "model_unavailable", 503, "server_error"},
		{CodeLimitsUnavailable, "limits_unavailable", 503, "server_error"},
		{CodeServerShuttingDown, "server_shutting_down", 503, "server_error"},
		{CodeServiceUnavailable, "service_unavailable", 503, "server_error"},
		{CodeUpstreamTimeout, "upstream_timeout", 504, "server_error"},
		{CodeRulesTooLarge, "rules_too_large", 400, "invalid_request_error"},
		{CodePIIRejected, "pii_rejected", 400, "invalid_request_error"},
		{CodeConversationForbidden, "conversation_forbidden", 403, "permission_error"},
		{CodeVaultForbidden, "vault_forbidden", 403, "permission_error"},
		{CodeOrgForbidden, "org_forbidden", 403, "permission_error"},
		{CodeRulesForbidden, "rules_forbidden", 403, "permission_error"},
		{CodeWorkspaceForbidden, "workspace_forbidden", 403, "permission_error"},
		{CodeConversationNotFound, "conversation_not_found", 404, "not_found_error"},
		{CodeMessageNotFound, "message_not_found", 404, "not_found_error"},
		{CodeVaultNotFound, "vault_not_found", 404, "not_found_error"},
		{CodeUserNotFound, "user_not_found", 404, "not_found_error"},
		{CodeInvitationNotFound, "invitation_not_found", 404, "not_found_error"},
		{CodeOrgMemberNotFound, "org_member_not_found", 404, "not_found_error"},
		{CodeWorkspaceNotFound, "workspace_not_found", 404, "not_found_error"},
		{CodePromptNotFound, "prompt_not_found", 404, "not_found_error"},
		{CodePromptVersionNotFound, "prompt_version_not_found", 404, "not_found_error"},
		{CodeVaultNameExists, "vault_name_exists", 409, "invalid_request_error"},
		{CodeVaultExternalIDConflict, "vault_external_id_conflict", 409, "invalid_request_error"},
		{CodeOrgMemberExists, "org_member_exists", 409, "invalid_request_error"},
		{CodeWorkspaceSlugExists, "workspace_slug_exists", 409, "invalid_request_error"},
		{CodeWorkspaceNotEmpty, "workspace_not_empty", 409, "invalid_request_error"},
		{CodeWorkspaceIsDefault, "workspace_is_default", 409, "invalid_request_error"},
		{CodePromptSlugExists, "prompt_slug_exists", 409, "invalid_request_error"},
		{CodeMemoryNotFound, "memory_not_found", 404, "not_found_error"},
		{CodeMemoryFrozen, "memory_frozen", 409, "invalid_request_error"},
	}
	require.Len(t, tests, int(codeCount)-1, "every code is listed")
	for _, tt := range tests {
		t.Run(tt.slug, func(t *testing.T) {
			require.Equal(t, tt.slug, tt.code.String())
			require.Equal(t, tt.status, tt.code.Status())
			require.Equal(t, tt.typ, tt.code.OpenAIType())
			got, ok := LookupCode(tt.slug)
			require.True(t, ok)
			require.Equal(t, tt.code, got)
		})
	}
}

func TestLookupCodeUnknown(t *testing.T) {
	tests := []struct {
		name string
		slug string
	}{
		{"empty", ""},
		{"upper case", "RATE_LIMITED"},
		{"trailing space", "rate_limited "},
		{"openai type", "rate_limit_error"},
		{"unknown", "teapot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := LookupCode(tt.slug)
			require.False(t, ok)
			require.Zero(t, c)
		})
	}
}

func TestInvalidCodeFallsBackToInternal(t *testing.T) {
	tests := []struct {
		name string
		code Code
	}{
		{"zero", 0},
		{"count", codeCount},
		{"max", ^Code(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.False(t, tt.code.Valid())
			require.Equal(t, "internal_error", tt.code.String())
			require.Equal(t, 500, tt.code.Status())
			require.Equal(t, "server_error", tt.code.OpenAIType())
			require.Equal(t, CodeInternalError.DefaultMessage(), tt.code.DefaultMessage())
		})
	}
}

func TestError(t *testing.T) {
	tests := []struct {
		name   string
		err    *Error
		want   string
		status int
	}{
		{"default message", NewError(CodeRateLimited, ""), "rate_limited: Too many requests; retry later.", 429},
		{"custom message", NewError(CodeFileNotFound, "no such file: f_1"), "file_not_found: no such file: f_1", 404},
		{"bad version", ErrBadVersion, "invalid_request: The Gateway-Version header must be a date in the form YYYY-MM-DD, from 2000-01-01 on.", 400},
		{"malformed json", ErrMalformedJSON, "invalid_request: The request body is not valid JSON.", 400},
		{"unauthorized", ErrUnauthorized, "unauthorized: A valid API key is required.", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error = tt.err
			require.EqualError(t, err, tt.want)
			require.Equal(t, tt.status, tt.err.Status())

			var e *Error
			require.True(t, errors.As(fmt.Errorf("cannot serve request: %w", err), &e))
			require.Same(t, tt.err, e)
		})
	}
}

func TestPreallocatedErrors(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		code Code
	}{
		{"ErrInvalidRequest", ErrInvalidRequest, CodeInvalidRequest},
		{"ErrMalformedJSON", ErrMalformedJSON, CodeInvalidRequest},
		{"ErrBadVersion", ErrBadVersion, CodeInvalidRequest},
		{"ErrUnknownVersion", ErrUnknownVersion, CodeUnknownVersion},
		{"ErrUnauthorized", ErrUnauthorized, CodeUnauthorized},
		{"ErrAccountSuspended", ErrAccountSuspended, CodeAccountSuspended},
		{"ErrKeyReadOnly", ErrKeyReadOnly, CodeKeyReadOnly},
		{"ErrNotFound", ErrNotFound, CodeNotFound},
		{"ErrMethodNotAllowed", ErrMethodNotAllowed, CodeMethodNotAllowed},
		{"ErrPayloadTooLarge", ErrPayloadTooLarge, CodePayloadTooLarge},
		{"ErrRateLimited", ErrRateLimited, CodeRateLimited},
		{"ErrClientClosedRequest", ErrClientClosedRequest, CodeClientClosedRequest},
		{"ErrInternal", ErrInternal, CodeInternalError},
		{"ErrUpstreamTimeout", ErrUpstreamTimeout, CodeUpstreamTimeout},
		{"ErrServerShuttingDown", ErrServerShuttingDown, CodeServerShuttingDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.code, tt.err.Code)
			require.Zero(t, tt.err.Detail.RetryAfter)
			require.NotEmpty(t, tt.err.Error())
		})
	}
}

func BenchmarkLookupCode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := LookupCode("workspace_spend_cap_exceeded"); !ok {
			b.Fatal("not found")
		}
	}
}
