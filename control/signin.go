package control

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// SignInConfig configures device login, native OAuth and the approval page.
type SignInConfig struct {
	// PublicURL is the gateway's address as people and clients reach it,
	// such as https://gateway.example.com: the base of verification_uri and
	// of the approval page's sign-in callback. Empty derives it from each
	// request's Host header (for development only).
	PublicURL string
	// DeviceCodeLifetime is how long a device login may wait for a
	// decision. Default 15m.
	DeviceCodeLifetime time.Duration
	// PollInterval is the least time between two polls of one device code,
	// whole seconds. Default 5s.
	PollInterval time.Duration
	// StateLifetime is how long an OAuth state works. Default 10m.
	StateLifetime time.Duration
	// SessionLifetime is how long a person stays signed in on the approval
	// page. Default 15m.
	SessionLifetime time.Duration
	// RateLimit is how many device logins and OAuth starts one client
	// address may begin per minute, each. Default 10.
	RateLimit int
	// ApprovalProvider names the provider the approval page signs people in
	// with. Default: the only provider, when there is exactly one.
	ApprovalProvider string
	// Providers are the OpenID Connect identity providers, by name.
	Providers map[string]OIDCProvider
	// HTTPClient talks to the providers. Default: a client with a 10s
	// timeout.
	HTTPClient *http.Client
}

// OIDCProvider is an OpenID Connect identity provider.
type OIDCProvider struct {
	// Issuer is the provider's issuer URL; its discovery document is at
	// Issuer + "/.well-known/openid-configuration". HTTPS, except on a
	// loopback address.
	Issuer string
	// ClientID and ClientSecret are the gateway's client at the provider.
	// An empty secret makes a public client (PKCE only).
	ClientID     string
	ClientSecret string
	// Scopes requested. Default openid, email, profile.
	Scopes []string
	// RedirectURIs is the allowlist of native clients' redirect URIs.
	RedirectURIs []RedirectURI
}

// RedirectURI is one allowed native redirect URI. A client of its own (the
// iOS or Android client some providers issue) replaces the provider's
// client for logins that name this URI.
type RedirectURI struct {
	URI          string
	ClientID     string
	ClientSecret string
}

const (
	maxPollInterval = 60 * time.Second
	// pollTolerance is how much sooner than the interval a poll may come
	// and still count: clients that tick at the interval arrive with jitter.
	pollTolerance = 500 * time.Millisecond
)

// Validate checks the configuration and fills in defaults. Errors name the
// setting.
func (c *SignInConfig) Validate() error {
	c.defaults()
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" ||
			u.Fragment != "" || u.User != nil {
			return fmt.Errorf("public_url: %q is not an http or https URL without query or fragment", hotpath.RedactURL(c.PublicURL))
		}
	}
	switch {
	case c.DeviceCodeLifetime < time.Minute || c.DeviceCodeLifetime > time.Hour:
		return errors.New("device.code_lifetime: must be between 1m and 1h")
	case c.PollInterval < time.Second || c.PollInterval > maxPollInterval || c.PollInterval%time.Second != 0:
		return errors.New("device.poll_interval: must be whole seconds between 1s and 60s")
	case c.StateLifetime < time.Minute || c.StateLifetime > time.Hour:
		return errors.New("oauth.state_lifetime: must be between 1m and 1h")
	case c.SessionLifetime < time.Minute || c.SessionLifetime > 24*time.Hour:
		return errors.New("approval.session_lifetime: must be between 1m and 24h")
	case c.RateLimit < 1:
		return errors.New("rate_limit_per_minute: must be at least 1")
	}
	for _, name := range c.providerNames() {
		p := c.Providers[name]
		if err := p.validate(); err != nil {
			return fmt.Errorf("providers.%s.%w", name, err)
		}
		c.Providers[name] = p // with its defaults
	}
	if c.ApprovalProvider != "" {
		if _, ok := c.Providers[c.ApprovalProvider]; !ok {
			return fmt.Errorf("approval.provider: %q is not one of the providers", c.ApprovalProvider)
		}
	}
	return nil
}

func (c *SignInConfig) defaults() {
	if c.DeviceCodeLifetime == 0 {
		c.DeviceCodeLifetime = 15 * time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.StateLifetime == 0 {
		c.StateLifetime = 10 * time.Minute
	}
	if c.SessionLifetime == 0 {
		c.SessionLifetime = 15 * time.Minute
	}
	if c.RateLimit == 0 {
		c.RateLimit = 10
	}
	if c.ApprovalProvider == "" && len(c.Providers) == 1 {
		for name := range c.Providers {
			c.ApprovalProvider = name
		}
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
}

func (c *SignInConfig) providerNames() []string {
	names := make([]string, 0, len(c.Providers))
	for name := range c.Providers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (p *OIDCProvider) validate() error {
	u, err := url.Parse(p.Issuer)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" ||
		!(u.Scheme == "https" || u.Scheme == "http" && isLoopbackHost(u.Hostname())) {
		return fmt.Errorf("issuer: %q is not an https URL (http only on a loopback address)", hotpath.RedactURL(p.Issuer))
	}
	if p.ClientID == "" {
		return errors.New("client_id: must be set")
	}
	if len(p.Scopes) == 0 {
		p.Scopes = []string{"openid", "email", "profile"}
	}
	hasOpenID := false
	for _, s := range p.Scopes {
		hasOpenID = hasOpenID || s == "openid"
	}
	if !hasOpenID {
		return errors.New("scopes: must include openid")
	}
	seen := map[string]bool{}
	for i, r := range p.RedirectURIs {
		if _, err := parseRedirectURI(r.URI); err != nil {
			return fmt.Errorf("redirect_uris[%d]: %w", i, err)
		}
		if seen[r.URI] {
			return fmt.Errorf("redirect_uris[%d]: %q is listed twice", i, r.URI)
		}
		seen[r.URI] = true
		if r.ClientSecret != "" && r.ClientID == "" {
			return fmt.Errorf("redirect_uris[%d]: a client secret needs its client_id", i)
		}
	}
	return nil
}

// LoginLimiter paces the public sign-in routes that start something
// (device codes, OAuth starts) per client address. Allow reports whether one
// more event under key is allowed at now and, when it is not, how long to
// wait.
type LoginLimiter interface {
	Allow(key string, now time.Time) (ok bool, retryAfter time.Duration)
}

// signIn is the state behind the sign-in routes.
type signIn struct {
	cfg       SignInConfig
	db        *storage.DB
	log       *slog.Logger
	limiter   LoginLimiter
	providers map[string]*provider
	now       func() time.Time
	lastPurge atomic.Int64
	tmpl      *pageTemplates
}

// registerSignIn adds the device-login and native OAuth routes and the
// approval page.
func (a *API) registerSignIn(r Registrar) {
	cfg := a.SignIn
	if err := cfg.Validate(); err != nil {
		// The command line validates the configuration before it builds
		// the API; a configuration that gets here broken signs nobody in.
		a.Log.Error("sign-in is misconfigured; no identity provider is enabled", "err", err)
		cfg.Providers, cfg.ApprovalProvider = nil, ""
	}
	s := &signIn{cfg: cfg, db: a.DB, log: a.Log, limiter: a.LoginLimiter, now: time.Now,
		providers: map[string]*provider{}, tmpl: mustPageTemplates()}
	if s.limiter == nil {
		s.limiter = NewMemoryLoginLimiter(cfg.RateLimit, time.Minute)
	}
	for name, p := range cfg.Providers {
		s.providers[name] = newProvider(name, p, cfg.HTTPClient)
	}
	a.signin = s
	public := func(name string) hotpath.Access { return hotpath.Access{Name: name, Auth: hotpath.AuthNone} }
	r.Handle(fasthttp.MethodPost, "/api/v1/device/code", public("device_code"), s.oauthRoute(s.deviceCode))
	r.Handle(fasthttp.MethodPost, "/api/v1/device/token", public("device_token"), s.oauthRoute(s.deviceToken))
	r.Handle(fasthttp.MethodPost, "/api/v1/auth/oauth/start", public("oauth_start"), s.oauthRoute(s.oauthStart))
	r.Handle(fasthttp.MethodPost, "/api/v1/auth/oauth/token", public("oauth_token"), s.oauthRoute(s.oauthToken))
	s.registerApproval(r)
}

// maxSignInBody bounds the body of every sign-in route: each carries a few
// short fields.
const maxSignInBody = 8 << 10

// oauthRoute gives a sign-in handler what every answer of these routes
// carries, success or not: no caching, and a bound on the body, each field
// being short. Its errors are written by the edge in the envelope the
// sign-in paths answer in (proxy.EnvelopeOAuth), as are the edge's own
// refusals before the handler runs (a bad version pin, a wrong method, a
// body over the server's limit): code is the gateway's stable code, error
// is the OAuth error code itself (RFC 6749 section 5.2, RFC 8628 section
// 3.5), so that standard clients work unmodified, and error_description
// carries the text for people (codec.AsOAuth).
func (s *signIn) oauthRoute(h func(*fasthttp.RequestCtx, *hotpath.Call) error) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		ctx.Response.Header.Set("Cache-Control", "no-store")
		ctx.Response.Header.Set("Pragma", "no-cache")
		if len(ctx.PostBody()) > maxSignInBody {
			return oauthError(codec.CodePayloadTooLarge, "The request body is larger than a sign-in request can be.")
		}
		return h(ctx, c)
	}
}

// oauthError is an error of the sign-in routes: error carries the OAuth
// code, error_description the text (the code's default when desc is empty).
func oauthError(code codec.Code, desc string) *codec.Error {
	if desc == "" {
		desc = code.DefaultMessage()
	}
	return &codec.Error{Code: code, Message: code.OAuthCode(), Detail: codec.Detail{ErrorDescription: desc}}
}

// rateLimited is the 429 of the sign-in routes, with Retry-After in whole
// seconds (at least 1).
func rateLimited(wait time.Duration, desc string) *codec.Error {
	e := oauthError(codec.CodeRateLimited, desc)
	e.Detail.RetryAfter = int((wait + time.Second - 1) / time.Second)
	if e.Detail.RetryAfter < 1 {
		e.Detail.RetryAfter = 1
	}
	return e
}

// allow applies the login limiter to one start of route from the client's
// address.
func (s *signIn) allow(ctx *fasthttp.RequestCtx, route string) error {
	ok, wait := s.limiter.Allow(route+"|"+ctx.RemoteIP().String(), s.now())
	if ok {
		return nil
	}
	return rateLimited(wait, "Too many sign-in attempts from this address; retry after the time in Retry-After.")
}

// signInFields reads a sign-in request body: a JSON object of string
// fields, or an application/x-www-form-urlencoded form (what OAuth clients
// send). Only the named fields are read. The JSON is read as on every other
// route (codec.DecodeRequest): invalid UTF-8 or a raw control character in
// any string is refused, and a key given twice counts once, the last time;
// a parameter given twice in a form is refused (RFC 6749 section 3.1). An
// empty body yields no fields.
func signInFields(contentType string, body []byte, names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	if len(body) == 0 {
		return out, nil
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/x-www-form-urlencoded" {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, oauthError(codec.CodeInvalidRequest, "The request body is not a valid form.")
		}
		for _, n := range names {
			switch v := vals[n]; len(v) {
			case 0:
			case 1:
				out[n] = v[0]
			default:
				return nil, oauthError(codec.CodeInvalidRequest, "The parameter "+n+" is given more than once.")
			}
		}
		return out, nil
	}
	var obj map[string]any
	if cerr := codec.DecodeRequest(body, &obj); cerr != nil {
		return nil, oauthError(codec.CodeInvalidRequest, cerr.Message)
	}
	if obj == nil {
		return nil, oauthError(codec.CodeInvalidRequest, "The request body is not a JSON object.")
	}
	for _, n := range names {
		raw, ok := obj[n]
		if !ok || raw == nil {
			continue
		}
		v, ok := raw.(string)
		if !ok {
			return nil, oauthError(codec.CodeInvalidRequest, "The field "+n+" must be a string.")
		}
		out[n] = v
	}
	return out, nil
}

// randomToken returns n random bytes, base64url without padding, and the
// SHA-256 of that text.
func randomToken(n int) (string, [32]byte) {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	s := base64.RawURLEncoding.EncodeToString(b)
	return s, sha256.Sum256([]byte(s))
}

func hashString(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// publicURL is the base URL people and clients reach the gateway at.
func (s *signIn) publicURL(ctx *fasthttp.RequestCtx) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimSuffix(s.cfg.PublicURL, "/")
	}
	scheme := "http"
	if ctx.IsTLS() {
		scheme = "https"
	}
	return scheme + "://" + string(ctx.Host())
}

// purgeEvery is how often a process deletes sign-in rows long expired.
const purgeEvery = 10 * time.Minute

// maybePurge deletes long-expired sign-in rows, at most once per purgeEvery
// per process.
func (s *signIn) maybePurge() {
	now := s.now().UnixNano()
	last := s.lastPurge.Load()
	if now-last < int64(purgeEvery) || !s.lastPurge.CompareAndSwap(last, now) {
		return
	}
	qctx, cancel := queryContext()
	defer cancel()
	if n, err := s.db.PurgeSignIn(qctx); err != nil {
		s.log.Warn("cannot purge expired sign-in rows", "err", err)
	} else if n > 0 {
		s.log.Debug("purged expired sign-in rows", "rows", n)
	}
}

// logIssued records an issued key: its id and expiry, nothing else about it.
func (s *signIn) logIssued(flow string, k storage.IssuedKey) {
	expires := ""
	if k.ExpiresAt != nil {
		expires = *k.ExpiresAt
	}
	s.log.Info("signed-in key issued", "flow", flow, "key_id", k.KeyID, "expires_at", expires)
}

// errSignedInNotRevocable refuses DELETE /api/v1/keys/{id} on the caller's
// own signed-in credential: its holder cannot revoke it (it ends at
// expires_at, when support revokes it, or with the membership).
var errSignedInNotRevocable = codec.NewError(codec.CodeInvalidRequest,
	"A signed-in credential cannot be revoked by its holder; it stops working at its expires_at, "+
		"when support revokes it, or when the organization membership ends.")
