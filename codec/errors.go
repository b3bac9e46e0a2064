package codec

// Code identifies a gateway error. Each code has a stable slug, an HTTP status,
// an OpenAI error type and a default message.
//
// The zero Code and values past the last constant are not valid codes; their
// methods report the values of CodeInternalError so that a programming mistake
// never produces an empty envelope.
type Code uint16

// Error codes. The comment on each gives its HTTP status.
const (
	CodeInvalidRequest               Code = iota + 1 // 400
	CodeContextOverflow                              // 400
	CodeInvalidToolSchema                            // 400
	CodeInvalidSchema                                // 400
	CodeModerationRejected                           // 400
	CodeFileNotText                                  // 400
	CodeFileTooLarge                                 // 400
	CodeImageNotSupported                            // 400
	CodeInputNotCountable                            // 400
	CodeUnknownVersion                               // 400
	CodeAuthorizationPending                         // 400
	CodeAccessDenied                                 // 400
	CodeExpiredToken                                 // 400
	CodeInvalidGrant                                 // 400
	CodeProviderNotSupported                         // 400
	CodeRedirectURINotAllowed                        // 400
	CodeUnauthorized                                 // 401
	CodeAccountSuspended                             // 403
	CodeKeyScopeForbidden                            // 403
	CodeModelNotAllowed                              // 403
	CodeKeyReadOnly                                  // 403
	CodeAccountRequired                              // 403
	CodeFileNotFound                                 // 404
	CodeRequestNotFound                              // 404
	CodeEvalSuiteNotFound                            // 404
	CodeEvalCaseNotFound                             // 404
	CodeEvalRunNotFound                              // 404
	CodeNotFound                                     // 404, unknown route
	CodeMethodNotAllowed                             // 405
	CodeRequestTimeout                               // 408
	CodeIdempotencyConflict                          // 409
	CodeEvalSuiteSlugExists                          // 409
	CodeOrgSelectionRequired                         // 409
	CodePayloadTooLarge                              // 413
	CodeURITooLong                                   // 414
	CodeUnsupportedMediaType                         // 415
	CodeStructuredOutputUnsupported                  // 422
	CodeStructuredOutputUnsatisfied                  // 422
	CodeRateLimited                                  // 429
	CodeBudgetExhausted                              // 429
	CodeKeySpendCapExceeded                          // 429
	CodeWorkspaceSpendCapExceeded                    // 429
	CodeCreditsExhausted                             // 429
	CodeRequestHeadersTooLarge                       // 431
	CodeClientClosedRequest                          // 499
	CodeInternalError                                // 500
	CodeTransferEncodingNotSupported                 // 501
	CodeUpstreamError                                // 502
	CodeUpstreamOverloaded                           // 503
	CodeModelUnavailable                             // 503
	CodeLimitsUnavailable                            // 503
	CodeServerShuttingDown                           // 503
	CodeServiceUnavailable                           // 503, a dependency the request needs is down
	CodeUpstreamTimeout                              // 504

	// Collaboration-route codes (collaboration-api.md).
	CodeRulesTooLarge           // 400
	CodePIIRejected             // 400
	CodeConversationForbidden   // 403
	CodeVaultForbidden          // 403
	CodeOrgForbidden            // 403
	CodeRulesForbidden          // 403
	CodeWorkspaceForbidden      // 403
	CodeConversationNotFound    // 404
	CodeMessageNotFound         // 404
	CodeVaultNotFound           // 404
	CodeUserNotFound            // 404
	CodeInvitationNotFound      // 404
	CodeOrgMemberNotFound       // 404
	CodeWorkspaceNotFound       // 404
	CodePromptNotFound          // 404
	CodePromptVersionNotFound   // 404
	CodeVaultNameExists         // 409
	CodeVaultExternalIDConflict // 409
	CodeOrgMemberExists         // 409
	CodeWorkspaceSlugExists     // 409
	CodeWorkspaceNotEmpty       // 409
	CodeWorkspaceIsDefault      // 409
	CodePromptSlugExists        // 409
	CodeMemoryNotFound          // 404
	CodeMemoryFrozen            // 409, the gateway's own (docs/memory.md)

	// codeCount is one past the last valid code: valid codes are 1 <= c < codeCount.
	codeCount
)

type codeInfo struct {
	slug       string
	status     int
	openAIType string
	message    string
}

// OpenAI error types, derived from the HTTP status.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
)

var codeTable = [codeCount]codeInfo{
	CodeInvalidRequest:               {"invalid_request", 400, typeInvalidRequest, "The request is invalid."},
	CodeContextOverflow:              {"context_overflow", 400, typeInvalidRequest, "The input does not fit in the model's context window."},
	CodeInvalidToolSchema:            {"invalid_tool_schema", 400, typeInvalidRequest, "A tool definition has an invalid JSON schema."},
	CodeInvalidSchema:                {"invalid_schema", 400, typeInvalidRequest, "The response format has an invalid JSON schema."},
	CodeModerationRejected:           {"moderation_rejected", 400, typeInvalidRequest, "The input was rejected by moderation."},
	CodeFileNotText:                  {"file_not_text", 400, typeInvalidRequest, "The file is not a text file."},
	CodeFileTooLarge:                 {"file_too_large", 400, typeInvalidRequest, "The file is too large."},
	CodeImageNotSupported:            {"image_not_supported", 400, typeInvalidRequest, "The model does not accept image input."},
	CodeInputNotCountable:            {"input_not_countable", 400, typeInvalidRequest, "The input tokens cannot be counted for this model."},
	CodeUnknownVersion:               {"unknown_version", 400, typeInvalidRequest, "The requested Gateway-Version is not known."},
	CodeAuthorizationPending:         {"authorization_pending", 400, typeInvalidRequest, "The authorization request is still pending."},
	CodeAccessDenied:                 {"access_denied", 400, typeInvalidRequest, "The authorization request was denied."},
	CodeExpiredToken:                 {"expired_token", 400, typeInvalidRequest, "The device code has expired."},
	CodeInvalidGrant:                 {"invalid_grant", 400, typeInvalidRequest, "The grant is invalid, expired or revoked."},
	CodeProviderNotSupported:         {"provider_not_supported", 400, typeInvalidRequest, "The identity provider is not supported."},
	CodeRedirectURINotAllowed:        {"redirect_uri_not_allowed", 400, typeInvalidRequest, "The redirect URI is not allowed."},
	CodeUnauthorized:                 {"unauthorized", 401, typeAuthentication, "A valid API key is required."},
	CodeAccountSuspended:             {"account_suspended", 403, typePermission, "The account is suspended."},
	CodeKeyScopeForbidden:            {"key_scope_forbidden", 403, typePermission, "The API key lacks the scope this request requires."},
	CodeModelNotAllowed:              {"model_not_allowed", 403, typePermission, "The API key may not use this model."},
	CodeKeyReadOnly:                  {"key_read_only", 403, typePermission, "The API key is read-only."},
	CodeAccountRequired:              {"account_required", 403, typePermission, "This request requires an account."},
	CodeFileNotFound:                 {"file_not_found", 404, typeNotFound, "The file was not found."},
	CodeRequestNotFound:              {"request_not_found", 404, typeNotFound, "The request was not found."},
	CodeEvalSuiteNotFound:            {"eval_suite_not_found", 404, typeNotFound, "The eval suite was not found."},
	CodeEvalCaseNotFound:             {"eval_case_not_found", 404, typeNotFound, "The eval case was not found."},
	CodeEvalRunNotFound:              {"eval_run_not_found", 404, typeNotFound, "The eval run was not found."},
	CodeNotFound:                     {"not_found", 404, typeNotFound, "The requested route does not exist."},
	CodeMethodNotAllowed:             {"method_not_allowed", 405, typeInvalidRequest, "The method is not allowed for this route."},
	CodeRequestTimeout:               {"request_timeout", 408, typeInvalidRequest, "The request did not arrive whole within the read timeout."},
	CodeIdempotencyConflict:          {"idempotency_conflict", 409, typeInvalidRequest, "The idempotency key was already used for a different request."},
	CodeEvalSuiteSlugExists:          {"eval_suite_slug_exists", 409, typeInvalidRequest, "An eval suite with this slug already exists."},
	CodeOrgSelectionRequired:         {"org_selection_required", 409, typeInvalidRequest, "Select an organization to continue."},
	CodePayloadTooLarge:              {"payload_too_large", 413, typeInvalidRequest, "The request body is too large."},
	CodeUnsupportedMediaType:         {"unsupported_media_type", 415, typeInvalidRequest, "The request body's encoding is not supported."},
	CodeURITooLong:                   {"uri_too_long", 414, typeInvalidRequest, "The request target is too long."},
	CodeStructuredOutputUnsupported:  {"structured_output_unsupported", 422, typeInvalidRequest, "The model does not support structured output."},
	CodeStructuredOutputUnsatisfied:  {"structured_output_unsatisfied", 422, typeInvalidRequest, "The model output did not satisfy the requested schema."},
	CodeRateLimited:                  {"rate_limited", 429, typeRateLimit, "Too many requests; retry later."},
	CodeBudgetExhausted:              {"budget_exhausted", 429, typeRateLimit, "The budget for this period is exhausted."},
	CodeKeySpendCapExceeded:          {"key_spend_cap_exceeded", 429, typeRateLimit, "The API key has reached its spend cap."},
	CodeWorkspaceSpendCapExceeded:    {"workspace_spend_cap_exceeded", 429, typeRateLimit, "The workspace has reached its spend cap."},
	CodeCreditsExhausted:             {"credits_exhausted", 429, typeRateLimit, "The account has no credits left."},
	CodeRequestHeadersTooLarge:       {"request_headers_too_large", 431, typeInvalidRequest, "The request's header fields are too large."},
	CodeClientClosedRequest:          {"client_closed_request", 499, typeInvalidRequest, "The client closed the request."},
	CodeInternalError:                {"internal_error", 500, typeServer, "An internal error occurred."},
	CodeTransferEncodingNotSupported: {"transfer_encoding_not_supported", 501, typeServer, "The request's Transfer-Encoding is not supported; send chunked or a Content-Length."},
	CodeUpstreamError:                {"upstream_error", 502, typeServer, "The upstream provider returned an error."},
	CodeUpstreamOverloaded:           {"upstream_overloaded", 503, typeServer, "The upstream provider is overloaded."},
	CodeModelUnavailable:             {"model_unavailable", 503, typeServer, "The model is unavailable right now."},
	CodeLimitsUnavailable:            {"limits_unavailable", 503, typeServer, "Usage limits cannot be checked right now."},
	CodeServerShuttingDown:           {"server_shutting_down", 503, typeServer, "The server is shutting down."},
	CodeServiceUnavailable:           {"service_unavailable", 503, typeServer, "The service cannot answer this request right now; retry shortly."},
	CodeUpstreamTimeout:              {"upstream_timeout", 504, typeServer, "The upstream provider timed out."},
	CodeRulesTooLarge:                {"rules_too_large", 400, typeInvalidRequest, "A rule cap is exceeded."},
	CodePIIRejected:                  {"pii_rejected", 400, typeInvalidRequest, "The text carries personal data and was rejected."},
	CodeConversationForbidden:        {"conversation_forbidden", 403, typePermission, "The conversation is in a vault you may read but not write."},
	CodeVaultForbidden:               {"vault_forbidden", 403, typePermission, "The vault grant does not allow this operation."},
	CodeOrgForbidden:                 {"org_forbidden", 403, typePermission, "Only an owner or admin of the organization may do this."},
	CodeRulesForbidden:               {"rules_forbidden", 403, typePermission, "You may not change these rules."},
	CodeWorkspaceForbidden:           {"workspace_forbidden", 403, typePermission, "Only an owner or admin may manage workspaces."},
	CodeConversationNotFound:         {"conversation_not_found", 404, typeNotFound, "The conversation was not found."},
	CodeMessageNotFound:              {"message_not_found", 404, typeNotFound, "The message was not found."},
	CodeVaultNotFound:                {"vault_not_found", 404, typeNotFound, "The vault was not found."},
	CodeUserNotFound:                 {"user_not_found", 404, typeNotFound, "The user was not found."},
	CodeInvitationNotFound:           {"invitation_not_found", 404, typeNotFound, "The invitation was not found."},
	CodeOrgMemberNotFound:            {"org_member_not_found", 404, typeNotFound, "The organization member was not found."},
	CodeWorkspaceNotFound:            {"workspace_not_found", 404, typeNotFound, "The workspace was not found."},
	CodePromptNotFound:               {"prompt_not_found", 404, typeNotFound, "The prompt was not found."},
	CodePromptVersionNotFound:        {"prompt_version_not_found", 404, typeNotFound, "The prompt version was not found."},
	CodeVaultNameExists:              {"vault_name_exists", 409, typeInvalidRequest, "A vault with this name already exists."},
	CodeVaultExternalIDConflict:      {"vault_external_id_conflict", 409, typeInvalidRequest, "Another vault already uses this external id."},
	CodeOrgMemberExists:              {"org_member_exists", 409, typeInvalidRequest, "The user is already a member of the organization."},
	CodeWorkspaceSlugExists:          {"workspace_slug_exists", 409, typeInvalidRequest, "A workspace with this slug already exists."},
	CodeWorkspaceNotEmpty:            {"workspace_not_empty", 409, typeInvalidRequest, "The workspace holds or has held a credential."},
	CodeWorkspaceIsDefault:           {"workspace_is_default", 409, typeInvalidRequest, "The default workspace cannot be deleted."},
	CodePromptSlugExists:             {"prompt_slug_exists", 409, typeInvalidRequest, "A prompt with this slug already exists."},
	CodeMemoryNotFound:               {"memory_not_found", 404, typeNotFound, "The memory was not found."},
	CodeMemoryFrozen:                 {"memory_frozen", 409, typeInvalidRequest, "The memory is frozen until its departed author's memory is settled."},
}

var codeBySlug = func() map[string]Code {
	m := make(map[string]Code, codeCount)
	for c := Code(1); c < codeCount; c++ {
		m[codeTable[c].slug] = c
	}
	return m
}()

func (c Code) info() *codeInfo {
	if !c.Valid() {
		return &codeTable[CodeInternalError]
	}
	return &codeTable[c]
}

// Valid reports whether c is one of the Code constants.
func (c Code) Valid() bool {
	return c >= 1 && c < codeCount
}

// String returns the code's slug, such as "rate_limited".
func (c Code) String() string {
	return c.info().slug
}

// Status returns the HTTP status the code is sent with.
func (c Code) Status() int {
	return c.info().status
}

// OpenAIType returns the OpenAI error "type" for the code, derived from its
// HTTP status: "invalid_request_error", "authentication_error",
// "permission_error", "not_found_error", "rate_limit_error" or "server_error".
func (c Code) OpenAIType() string {
	return c.info().openAIType
}

// DefaultMessage returns a short human sentence describing the code. Writers
// use it when an Error carries no message.
func (c Code) DefaultMessage() string {
	return c.info().message
}

// LookupCode returns the code whose slug is slug.
func LookupCode(slug string) (Code, bool) {
	c, ok := codeBySlug[slug]
	return c, ok
}

// Error is a gateway error: a code, an optional message overriding the code's
// default message, and optional envelope details.
//
// AppendV1Error and AppendOpenAIError render an Error as a response body.
type Error struct {
	// Code selects the slug, HTTP status and OpenAI type.
	Code Code
	// Message is the human-readable message. When empty, the code's
	// DefaultMessage is used.
	Message string
	// Detail holds optional fields of the gateway's own envelope.
	Detail Detail
}

// Detail holds the optional fields of a v1 error envelope. Each field is
// written only when set; the zero Detail adds nothing to the envelope.
type Detail struct {
	// RequiredScope is written as "required_scope" when non-empty.
	RequiredScope string
	// RequiredVersion is written as "required_version" when non-empty.
	RequiredVersion string
	// Reason is written as "reason" when non-empty.
	Reason string
	// ErrorDescription is written as "error_description" when non-empty.
	ErrorDescription string
	// FileID is written as "file_id" when non-empty.
	FileID string
	// Filename is written as "filename" when non-empty.
	Filename string
	// Bound is written as "bound" when non-empty.
	Bound string
	// Category is written as "category" when non-empty (the kind of
	// personal data a pii_rejected text carried).
	Category string

	// Position is written as "position" when HasPosition is true (the
	// index of the offending element of an array field).
	Position int64
	// HasPosition reports whether Position is set.
	HasPosition bool

	// Limit is written as "limit" when HasLimit is true.
	Limit int64
	// HasLimit reports whether Limit is set.
	HasLimit bool
	// Tokens is written as "tokens" when HasTokens is true.
	Tokens int64
	// HasTokens reports whether Tokens is set.
	HasTokens bool

	// ResetAt is a time in Unix seconds, written as "reset_at" in RFC 3339
	// UTC form (2026-10-07T12:00:00Z) when non-zero.
	ResetAt int64
	// MiraAvailable is written as "mira_available": 0 leaves it out, a
	// positive value writes true and a negative value writes false.
	MiraAvailable int8
	// VisionTiers is written as "vision_tiers" when non-empty.
	VisionTiers []string
	// Categories is written as "categories" when non-empty: the moderation
	// categories that refused a chat input (moderation_rejected).
	Categories []string

	// RetryAfter is a delay in seconds for the Retry-After header. It is
	// never written in the body; the HTTP layer sets the header when it is
	// positive.
	RetryAfter int
}

// NewError returns an Error with the given code and message. An empty msg
// selects the code's default message.
func NewError(code Code, msg string) *Error {
	return &Error{Code: code, Message: msg}
}

// Error implements error. It returns "slug: message".
func (e *Error) Error() string {
	return e.Code.String() + ": " + e.message()
}

// Status returns the HTTP status of e's code.
func (e *Error) Status() int {
	return e.Code.Status()
}

// message returns e.Message or the code's default message when it is empty.
func (e *Error) message() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Code.DefaultMessage()
}

// Preallocated errors for frequent refusals. They are shared: treat them as
// read-only and copy one (v := *ErrRateLimited) before setting details.
var (
	// ErrInvalidRequest is a generic invalid_request refusal.
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest}
	// ErrMalformedJSON refuses a request body that is not valid JSON.
	ErrMalformedJSON = &Error{Code: CodeInvalidRequest, Message: "The request body is not valid JSON."}
	// ErrBadVersion refuses a Gateway-Version header that is not a date.
	ErrBadVersion = &Error{Code: CodeInvalidRequest, Message: "The Gateway-Version header must be a date in the form YYYY-MM-DD, from 2000-01-01 on."}
	// ErrUnknownVersion refuses a well-formed Gateway-Version the gateway
	// does not know.
	ErrUnknownVersion = &Error{Code: CodeUnknownVersion}
	// ErrUnauthorized refuses a request without a valid API key.
	ErrUnauthorized = &Error{Code: CodeUnauthorized}
	// ErrAccountSuspended refuses a request from a suspended account.
	ErrAccountSuspended = &Error{Code: CodeAccountSuspended}
	// ErrKeyReadOnly refuses a write made with a read-only key.
	ErrKeyReadOnly = &Error{Code: CodeKeyReadOnly}
	// ErrNotFound refuses a request for an unknown route.
	ErrNotFound = &Error{Code: CodeNotFound}
	// ErrMethodNotAllowed refuses a method the route does not serve.
	ErrMethodNotAllowed = &Error{Code: CodeMethodNotAllowed}
	// ErrPayloadTooLarge refuses a request body over the size limit.
	ErrPayloadTooLarge = &Error{Code: CodePayloadTooLarge}
	// ErrRateLimited refuses a request over the rate limit.
	ErrRateLimited = &Error{Code: CodeRateLimited}
	// ErrClientClosedRequest records a request the client abandoned.
	ErrClientClosedRequest = &Error{Code: CodeClientClosedRequest}
	// ErrInternal reports an internal error.
	ErrInternal = &Error{Code: CodeInternalError}
	// ErrUpstreamTimeout reports an upstream provider that did not answer in time.
	ErrUpstreamTimeout = &Error{Code: CodeUpstreamTimeout}
	// ErrServerShuttingDown refuses a request that arrives during shutdown.
	ErrServerShuttingDown = &Error{Code: CodeServerShuttingDown}
	// ErrServiceUnavailable refuses a request whose answer needs a
	// dependency (such as the database behind an uncached key) that is down.
	ErrServiceUnavailable = &Error{Code: CodeServiceUnavailable}
)
