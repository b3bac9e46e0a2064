package control

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// maxRedirectURI bounds a redirect URI.
const maxRedirectURI = 2048

// parseRedirectURI checks that s is an absolute URI without a fragment
// (RFC 6749 section 3.1.2): a scheme, and for http and https a host. It
// allows no control characters or spaces.
func parseRedirectURI(s string) (*url.URL, error) {
	if s == "" || len(s) > maxRedirectURI {
		return nil, errors.New("must be an absolute URI of at most 2048 bytes")
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return nil, errors.New("must not hold spaces, control or non-ASCII characters")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("is not a valid URI")
	}
	switch {
	case u.Scheme == "":
		return nil, errors.New("must be an absolute URI with a scheme")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, errors.New("must not have a fragment")
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host == "":
		return nil, errors.New("must name a host")
	case u.User != nil:
		return nil, errors.New("must not carry user information")
	}
	return u, nil
}

// validChallenge reports whether s is an S256 code challenge: the base64url
// encoding, without padding, of a SHA-256 (43 characters).
func validChallenge(s string) bool {
	return len(s) == 43 && validBase64URL(s)
}

func validBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validVerifier reports whether s is a code_verifier (RFC 7636 section
// 4.1): 43 to 128 unreserved characters.
func validVerifier(s string) bool {
	if len(s) < 43 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// s256 is the S256 challenge of a verifier.
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// oauthStartRequest is a parsed POST /api/v1/auth/oauth/start.
type oauthStartRequest struct {
	Provider      string
	CodeChallenge string
	RedirectURI   string
}

// parseOAuthStart reads {provider, code_challenge, code_challenge_method,
// redirect_uri} as JSON or as a form. The method must be S256: a plain
// challenge would give the verifier away.
func parseOAuthStart(contentType string, body []byte) (oauthStartRequest, error) {
	f, err := signInFields(contentType, body, "provider", "code_challenge", "code_challenge_method", "redirect_uri")
	if err != nil {
		return oauthStartRequest{}, err
	}
	req := oauthStartRequest{Provider: f["provider"], CodeChallenge: f["code_challenge"], RedirectURI: f["redirect_uri"]}
	switch {
	case req.Provider == "":
		return req, oauthError(codec.CodeInvalidRequest, "provider is required.")
	case req.CodeChallenge == "":
		return req, oauthError(codec.CodeInvalidRequest, "code_challenge is required (RFC 7636, method S256).")
	case f["code_challenge_method"] != "S256":
		return req, oauthError(codec.CodeInvalidRequest, "code_challenge_method must be S256.")
	case !validChallenge(req.CodeChallenge):
		return req, oauthError(codec.CodeInvalidRequest,
			"code_challenge must be the base64url SHA-256 of the code_verifier: 43 characters, no padding.")
	case req.RedirectURI == "":
		return req, oauthError(codec.CodeInvalidRequest, "redirect_uri is required.")
	}
	if _, err := parseRedirectURI(req.RedirectURI); err != nil {
		return req, oauthError(codec.CodeInvalidRequest, "redirect_uri "+err.Error()+".")
	}
	return req, nil
}

// oauthStartResponse is the body of POST /api/v1/auth/oauth/start.
type oauthStartResponse struct {
	AuthorizationURL string `json:"authorization_url"`
	State            string `json:"state"`
}

// oauthStart begins a native login: it records a single-use, short-lived
// state with the client's challenge and redirect URI and answers the
// provider's authorization URL.
func (s *signIn) oauthStart(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	if err := s.allow(ctx, "oauth_start"); err != nil {
		return err
	}
	req, err := parseOAuthStart(string(ctx.Request.Header.ContentType()), ctx.PostBody())
	if err != nil {
		return err
	}
	p, ok := s.providers[req.Provider]
	if !ok {
		return oauthError(codec.CodeProviderNotSupported, s.providerList())
	}
	clientID, ok := p.allowRedirect(req.RedirectURI)
	if !ok {
		return oauthError(codec.CodeRedirectURINotAllowed,
			"redirect_uri is not on the allowlist of provider "+p.name+".")
	}
	qctx, cancel := queryContext()
	defer cancel()
	state, stateHash := randomToken(32)
	nonce, _ := randomToken(16)
	authURL, err := p.authorizationURL(qctx, clientID, req.RedirectURI, state, nonce, req.CodeChallenge)
	if err != nil {
		s.log.Warn("identity provider unavailable", "provider", p.name, "err", err)
		return oauthError(codec.CodeServiceUnavailable, "The identity provider cannot be reached; retry shortly.")
	}
	err = s.db.CreateOAuthState(qctx, storage.OAuthState{Hash: stateHash, Purpose: storage.StateNative,
		Provider: p.name, ClientID: clientID, RedirectURI: req.RedirectURI, CodeChallenge: req.CodeChallenge,
		Nonce: nonce, Lifetime: s.cfg.StateLifetime})
	if err != nil {
		return storageError(err, codec.ErrInternal)
	}
	s.maybePurge()
	return writeJSON(ctx, fasthttp.StatusOK, oauthStartResponse{AuthorizationURL: authURL, State: state})
}

func (s *signIn) providerList() string {
	names := s.cfg.providerNames()
	if len(names) == 0 {
		return "No identity provider is configured for sign-in."
	}
	return "The provider is not configured; use one of: " + strings.Join(names, ", ") + "."
}

// oauthTokenRequest is a parsed POST /api/v1/auth/oauth/token.
type oauthTokenRequest struct {
	Code         string
	CodeVerifier string
	State        string
}

// parseOAuthToken reads {code, code_verifier, state} as JSON or as a form
// (where grant_type, when sent, must be authorization_code). The verifier
// is checked only once the state is spent (oauthToken).
func parseOAuthToken(contentType string, body []byte) (oauthTokenRequest, error) {
	f, err := signInFields(contentType, body, "code", "code_verifier", "state", "grant_type")
	if err != nil {
		return oauthTokenRequest{}, err
	}
	if gt, ok := f["grant_type"]; ok && gt != "authorization_code" {
		return oauthTokenRequest{}, oauthError(codec.CodeInvalidRequest, "grant_type must be authorization_code.")
	}
	req := oauthTokenRequest{Code: f["code"], CodeVerifier: f["code_verifier"], State: f["state"]}
	switch {
	case req.State == "":
		return req, oauthError(codec.CodeInvalidRequest, "state is required.")
	case req.Code == "":
		return req, oauthError(codec.CodeInvalidRequest, "code is required.")
	case len(req.Code) > 4096:
		return req, oauthError(codec.CodeInvalidRequest, "code is longer than any authorization code.")
	}
	return req, nil
}

// checkVerifier refuses a code_verifier that is missing or not of the form
// RFC 7636 gives it.
func checkVerifier(v string) error {
	switch {
	case v == "":
		return oauthError(codec.CodeInvalidRequest, "code_verifier is required.")
	case !validVerifier(v):
		return oauthError(codec.CodeInvalidRequest,
			"code_verifier must be 43 to 128 characters of A-Z, a-z, 0-9 and -._~ (RFC 7636).")
	}
	return nil
}

var (
	errStateInvalid = oauthError(codec.CodeInvalidGrant,
		"The state is unknown, expired or already used; start the login again.")
	errVerifierMismatch = oauthError(codec.CodeInvalidGrant,
		"The code_verifier does not match the code_challenge of this login; start the login again.")
	errCodeRefusedByProvider = oauthError(codec.CodeInvalidGrant,
		"The identity provider refused the authorization code; start the login again.")
	errIDTokenInvalid = oauthError(codec.CodeInvalidGrant,
		"The identity provider's ID token could not be verified; start the login again.")
	errEmailUnverified = oauthError(codec.CodeAccessDenied,
		"The identity provider did not vouch for an e-mail address; verify it there first.")
	errProviderUnavailable = oauthError(codec.CodeServiceUnavailable,
		"The identity provider cannot be reached; retry shortly.")
	errAccountRequired = oauthError(codec.CodeAccountRequired,
		"No account uses the e-mail address the identity provider verified; sign up first.")
	errOrgSelection = oauthError(codec.CodeOrgSelectionRequired,
		"The account belongs to more than one organization; use device login to choose one "+
			"(GET /api/v1/org/memberships lists them).")
	errSuspended = oauthError(codec.CodeAccountSuspended, "The account is suspended.")
)

// oauthToken finishes a native login: it spends the state, checks the
// verifier against the challenge, exchanges the code with the provider
// server side, verifies the ID token, resolves the account from the
// verified e-mail (never creating one) and issues a signed-in key.
func (s *signIn) oauthToken(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	req, err := parseOAuthToken(string(ctx.Request.Header.ContentType()), ctx.PostBody())
	if err != nil {
		return err
	}
	if len(req.State) > 128 || !validBase64URL(req.State) {
		return errStateInvalid
	}
	qctx, cancel := queryContext()
	defer cancel()
	st, err := s.db.ConsumeOAuthState(qctx, hashString(req.State), storage.StateNative)
	if errors.Is(err, storage.ErrNotFound) {
		return errStateInvalid
	}
	if err != nil {
		return storageError(err, codec.ErrInternal)
	}
	// The state is spent whatever happens next: a malformed or wrong
	// verifier cannot be retried against it.
	if err := checkVerifier(req.CodeVerifier); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(s256(req.CodeVerifier)), []byte(st.CodeChallenge)) != 1 {
		return errVerifierMismatch
	}
	p, ok := s.providers[st.Provider]
	if !ok {
		return oauthError(codec.CodeProviderNotSupported, s.providerList())
	}
	id, err := p.exchange(qctx, st.ClientID, st.RedirectURI, req.Code, req.CodeVerifier, st.Nonce)
	if err != nil {
		return s.exchangeError(p, err)
	}
	if !id.EmailVerified || id.Email == "" {
		return errEmailUnverified
	}
	acct, err := s.db.SignInAccountByEmail(qctx, id.Email)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return errAccountRequired
	case err != nil:
		return storageError(err, codec.ErrInternal)
	case acct.Suspended:
		return errSuspended
	case len(acct.Orgs) == 0:
		return errAccountRequired
	case len(acct.Orgs) > 1:
		return errOrgSelection
	}
	issued, err := s.db.CreateKey(qctx, storage.NewKey{UserID: acct.User.ID, OrgID: acct.Orgs[0].ID,
		Kind: hotpath.KindSignedIn})
	if err != nil {
		return storageError(err, codec.ErrInternal)
	}
	s.logIssued("oauth", issued)
	return writeJSON(ctx, fasthttp.StatusOK, issued)
}

// exchangeError maps a provider exchange failure to the answer.
func (s *signIn) exchangeError(p *provider, err error) error {
	switch {
	case errors.Is(err, errCodeRefused):
		return errCodeRefusedByProvider
	case errors.Is(err, errBadIDToken):
		s.log.Warn("identity provider sent an ID token that fails verification", "provider", p.name, "err", err)
		return errIDTokenInvalid
	}
	s.log.Warn("identity provider unavailable", "provider", p.name, "err", err)
	return errProviderUnavailable
}
