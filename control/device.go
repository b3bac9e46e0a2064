package control

import (
	"crypto/rand"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// userCodeAlphabet is what user codes are drawn from: twenty consonants, so
// that a code spells no word and holds no character a person confuses with
// another (no 0/O, 1/I/L pairs, no vowels). Eight characters give 20^8, about
// 2.6e10 codes (34 bits).
const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"

// userCodeLen is the number of characters of a user code, shown as XXXX-XXXX.
const userCodeLen = 8

// deviceGrantType is the grant_type of RFC 8628 token requests.
const deviceGrantType = "urn:ietf:params:oauth:grant-type:device_code"

// newUserCode draws a user code uniformly from the alphabet, normalized (no
// dash).
func newUserCode() string {
	const limit = 256 - 256%len(userCodeAlphabet) // rejection sampling keeps letters equally likely
	out := make([]byte, 0, userCodeLen)
	var rnd [16]byte
	for len(out) < userCodeLen {
		_, _ = rand.Read(rnd[:])
		for _, b := range rnd {
			if int(b) >= limit {
				continue
			}
			out = append(out, userCodeAlphabet[int(b)%len(userCodeAlphabet)])
			if len(out) == userCodeLen {
				break
			}
		}
	}
	return string(out)
}

// normalizeUserCode turns what a person typed into the stored form: letters
// upper-cased, dashes and spaces dropped. It reports false when the result
// is not eight letters of the alphabet.
func normalizeUserCode(s string) (string, bool) {
	if len(s) > 32 {
		return "", false
	}
	out := make([]byte, 0, userCodeLen)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == ' ':
			continue
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		if strings.IndexByte(userCodeAlphabet, c) < 0 || len(out) == userCodeLen {
			return "", false
		}
		out = append(out, c)
	}
	if len(out) != userCodeLen {
		return "", false
	}
	return string(out), true
}

// formatUserCode shows a normalized code as XXXX-XXXX.
func formatUserCode(code string) string {
	if len(code) != userCodeLen {
		return code
	}
	return code[:4] + "-" + code[4:]
}

// deviceCodeResponse is the body of POST /api/v1/device/code.
type deviceCodeResponse struct {
	DeviceCode              string `json:"device_code"`
	UserCode                string `json:"user_code"`
	VerificationURI         string `json:"verification_uri"`
	VerificationURIComplete string `json:"verification_uri_complete"`
	ExpiresIn               int    `json:"expires_in"`
	Interval                int    `json:"interval"`
}

// deviceCode starts a device login (RFC 8628 section 3.1). The body is not
// read: standard clients send client_id and scope, which mean nothing here.
func (s *signIn) deviceCode(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	if err := s.allow(ctx, "device_code"); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	deviceCode, hash := randomToken(32)
	var userCode string
	for attempt := 0; ; attempt++ {
		userCode = newUserCode()
		err := s.db.CreateDeviceCode(qctx, storage.NewDeviceCode{Hash: hash, UserCode: userCode,
			Lifetime: s.cfg.DeviceCodeLifetime, Interval: s.cfg.PollInterval})
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrConflict) || attempt == 4 {
			return storageError(err, codec.ErrInternal)
		}
	}
	s.maybePurge()
	verify := s.publicURL(ctx) + approvalPath
	shown := formatUserCode(userCode)
	return writeJSON(ctx, fasthttp.StatusOK, deviceCodeResponse{
		DeviceCode:              deviceCode,
		UserCode:                shown,
		VerificationURI:         verify,
		VerificationURIComplete: verify + "?user_code=" + url.QueryEscape(shown),
		ExpiresIn:               int(s.cfg.DeviceCodeLifetime / time.Second),
		Interval:                int(s.cfg.PollInterval / time.Second),
	})
}

// deviceTokenRequest is a parsed POST /api/v1/device/token.
type deviceTokenRequest struct {
	DeviceCode string
}

// parseDeviceTokenRequest reads {device_code} as JSON or as the form RFC
// 8628 clients send (with grant_type, which must then be the device grant).
func parseDeviceTokenRequest(contentType string, body []byte) (deviceTokenRequest, error) {
	f, err := signInFields(contentType, body, "device_code", "grant_type")
	if err != nil {
		return deviceTokenRequest{}, err
	}
	if gt, ok := f["grant_type"]; ok && gt != deviceGrantType {
		return deviceTokenRequest{}, oauthError(codec.CodeInvalidRequest, "grant_type must be "+deviceGrantType+".")
	}
	if f["device_code"] == "" {
		return deviceTokenRequest{}, oauthError(codec.CodeInvalidRequest, "device_code is required.")
	}
	return deviceTokenRequest{DeviceCode: f["device_code"]}, nil
}

// validSecretToken reports whether s looks like a token this gateway
// issues: base64url text of a sane length. Anything else is refused before
// a database round trip.
func validSecretToken(s string) bool {
	if len(s) < 16 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

var (
	errDeviceInvalid = oauthError(codec.CodeInvalidGrant, "The device code is not valid; start a new login.")
	errDeviceUsed    = oauthError(codec.CodeInvalidGrant, "The device code was already used; start a new login.")
	errDevicePending = oauthError(codec.CodeAuthorizationPending,
		"The login has not been approved yet; keep polling at the interval.")
	errDeviceDenied  = oauthError(codec.CodeAccessDenied, "The person declined this login; stop polling.")
	errDeviceExpired = oauthError(codec.CodeExpiredToken, "The device code has expired; start a new login.")
	errDeviceRevoked = &codec.Error{Code: codec.CodeAccessDenied, Message: "access_denied", Detail: codec.Detail{
		Reason: storage.RefusalMembershipRevoked,
		ErrorDescription: "The organization membership this login was approved for has ended; " +
			"start a new login, which may bind to another organization.",
	}}
	errDeviceSuspended = oauthError(codec.CodeAccountSuspended, "The account that approved this login is suspended.")
)

// deviceToken answers one poll (RFC 8628 section 3.4): the token response
// once, when the login was approved; otherwise the state as an OAuth error.
func (s *signIn) deviceToken(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	req, err := parseDeviceTokenRequest(string(ctx.Request.Header.ContentType()), ctx.PostBody())
	if err != nil {
		return err
	}
	if !validSecretToken(req.DeviceCode) {
		return errDeviceInvalid
	}
	qctx, cancel := queryContext()
	defer cancel()
	poll, err := s.db.PollDeviceCode(qctx, hashString(req.DeviceCode), pollTolerance)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return errDeviceInvalid
	case err != nil:
		return storageError(err, codec.ErrInternal)
	case poll.RetryAfter > 0:
		return rateLimited(poll.RetryAfter,
			"Polling faster than the interval; wait the time in Retry-After, then poll at the interval.")
	}
	switch poll.Status {
	case storage.DeviceDenied:
		return errDeviceDenied
	case storage.DeviceRefused:
		if poll.Refusal == storage.RefusalAccountSuspended {
			return errDeviceSuspended
		}
		return errDeviceRevoked
	case storage.DeviceRedeemed:
		return errDeviceUsed
	}
	if poll.Expired {
		return errDeviceExpired
	}
	if poll.Status == storage.DevicePending {
		return errDevicePending
	}
	issued, err := s.db.RedeemDeviceCode(qctx, poll.ID)
	switch {
	case errors.Is(err, storage.ErrMembershipEnded):
		return errDeviceRevoked
	case errors.Is(err, storage.ErrAccountSuspended):
		return errDeviceSuspended
	case errors.Is(err, storage.ErrCodeUsed):
		return errDeviceUsed
	case err != nil:
		return storageError(err, codec.ErrInternal)
	}
	s.logIssued("device", issued)
	return writeJSON(ctx, fasthttp.StatusOK, issued)
}

// NormalizeUserCode turns a user code as a person types it (any case,
// with or without the dash) into its stored form; false when it is not a
// user code.
func NormalizeUserCode(s string) (string, bool) { return normalizeUserCode(s) }

// FormatUserCode shows a stored user code as people see it: XXXX-XXXX.
func FormatUserCode(code string) string { return formatUserCode(code) }
