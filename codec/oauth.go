package codec

// The sign-in routes (device login and native OAuth) answer in the
// gateway's envelope with one difference: "error" is the OAuth error code
// (RFC 6749 section 5.2, RFC 8628 section 3.5) and the text for people is in
// "error_description", so that standard OAuth clients read the answer
// unmodified (docs/signin.md).

// OAuthCode returns the OAuth error code that stands for c on the sign-in
// routes. A refusal of the request itself that has no OAuth code of its
// own (a bad version pin, a wrong method, a body too large or in an
// encoding the gateway does not read) is invalid_request; an unavailable
// service is temporarily_unavailable; anything else is server_error.
func (c Code) OAuthCode() string {
	switch c {
	case CodeAuthorizationPending, CodeAccessDenied, CodeExpiredToken, CodeInvalidGrant, CodeInvalidRequest:
		return c.String()
	case CodeRateLimited:
		return "slow_down"
	case CodeAccountRequired, CodeOrgSelectionRequired, CodeAccountSuspended:
		return "access_denied"
	case CodeTransferEncodingNotSupported:
		// 501, but it is the request's framing that is refused.
		return "invalid_request"
	}
	switch s := c.Status(); {
	case s >= 400 && s < 500:
		return "invalid_request"
	case s == 503:
		return "temporarily_unavailable"
	}
	return "server_error"
}

// AsOAuth returns e as the sign-in routes answer it: the OAuth code in
// Message (written as "error") and the text for people in
// Detail.ErrorDescription. An error already in that form (its description
// set) is returned as it is; any other is copied, never changed, since
// errors such as ErrPayloadTooLarge are shared.
func AsOAuth(e *Error) *Error {
	if e == nil {
		e = ErrInternal
	}
	if e.Detail.ErrorDescription != "" {
		return e
	}
	o := *e
	o.Message = e.Code.OAuthCode()
	o.Detail.ErrorDescription = e.Code.DefaultMessage()
	if e.Message != "" && e.Message != o.Message {
		o.Detail.ErrorDescription = e.Message
	}
	return &o
}
