package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Errors of a provider exchange, mapped to codes by the handlers.
var (
	// errProviderDown: the provider could not be reached or answered with a
	// server error.
	errProviderDown = errors.New("identity provider is unavailable")
	// errCodeRefused: the provider refused the authorization code (unknown,
	// expired, used, or a code_verifier that does not match).
	errCodeRefused = errors.New("identity provider refused the authorization code")
	// errBadIDToken: the ID token is missing or fails verification.
	errBadIDToken = errors.New("identity provider's ID token is not valid")
)

// discoveryRetry is how long a failed discovery is remembered before the
// provider is asked again.
const discoveryRetry = 5 * time.Second

// provider is one OpenID Connect identity provider: discovered on first
// use (so that the gateway starts while a provider is down), then cached.
type provider struct {
	name   string
	cfg    OIDCProvider
	client *http.Client

	mu       sync.Mutex
	oidc     *oidc.Provider
	style    oauth2.AuthStyle
	failedAt time.Time
}

// identity is what a verified ID token says about the person.
type identity struct {
	Subject       string
	Email         string
	EmailVerified bool
}

func newProvider(name string, cfg OIDCProvider, client *http.Client) *provider {
	return &provider{name: name, cfg: cfg, client: client}
}

// discover returns the provider's metadata, fetching the discovery
// document on first use. A failure is errProviderDown.
func (p *provider) discover(ctx context.Context) (*oidc.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oidc != nil {
		return p.oidc, nil
	}
	if !p.failedAt.IsZero() && time.Since(p.failedAt) < discoveryRetry {
		return nil, errProviderDown
	}
	op, err := oidc.NewProvider(oidc.ClientContext(ctx, p.client), p.cfg.Issuer)
	if err != nil {
		p.failedAt = time.Now()
		return nil, fmt.Errorf("cannot discover provider %s: %w: %v", p.name, errProviderDown, err)
	}
	var meta struct {
		AuthMethods []string `json:"token_endpoint_auth_methods_supported"`
	}
	_ = op.Claims(&meta)
	// client_secret_basic is the default when the document says nothing.
	p.style = oauth2.AuthStyleInHeader
	if len(meta.AuthMethods) > 0 && !slices.Contains(meta.AuthMethods, "client_secret_basic") &&
		slices.Contains(meta.AuthMethods, "client_secret_post") {
		p.style = oauth2.AuthStyleInParams
	}
	p.oidc = op
	return op, nil
}

// clientFor returns the credentials of clientID: the provider's own client
// or the client of an allowed redirect URI.
func (p *provider) clientFor(clientID string) (secret string, ok bool) {
	if clientID == p.cfg.ClientID {
		return p.cfg.ClientSecret, true
	}
	for _, r := range p.cfg.RedirectURIs {
		if r.ClientID == clientID {
			return r.ClientSecret, true
		}
	}
	return "", false
}

// allowRedirect matches a native client's redirect URI against the
// provider's allowlist and returns the client id logins with it use. Matching
// is exact, except that an allowed loopback URI (http://127.0.0.1/path or
// http://[::1]/path, without a port) admits any port, as RFC 8252 section
// 7.3 asks for native apps.
func (p *provider) allowRedirect(uri string) (clientID string, ok bool) {
	for _, r := range p.cfg.RedirectURIs {
		if r.URI == uri || loopbackMatch(r.URI, uri) {
			if r.ClientID != "" {
				return r.ClientID, true
			}
			return p.cfg.ClientID, true
		}
	}
	return "", false
}

func loopbackMatch(allowed, got string) bool {
	a, err := url.Parse(allowed)
	if err != nil || a.Scheme != "http" || a.Port() != "" || !isLoopbackIP(a.Hostname()) {
		return false
	}
	g, err := url.Parse(got)
	if err != nil || g.Scheme != "http" || g.Hostname() != a.Hostname() || g.User != nil {
		return false
	}
	return g.EscapedPath() == a.EscapedPath() && g.RawQuery == a.RawQuery && g.Fragment == ""
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isLoopbackHost(host string) bool { return host == "localhost" || isLoopbackIP(host) }

// oauth2Config is the client configuration of one login.
func (p *provider) oauth2Config(op *oidc.Provider, clientID, redirectURI string) *oauth2.Config {
	secret, _ := p.clientFor(clientID)
	ep := op.Endpoint()
	ep.AuthStyle = p.style
	if secret == "" {
		ep.AuthStyle = oauth2.AuthStyleInParams // a public client sends only its id
	}
	return &oauth2.Config{ClientID: clientID, ClientSecret: secret, Endpoint: ep, RedirectURL: redirectURI,
		Scopes: p.cfg.Scopes}
}

// authorizationURL is where a person signs in: the authorization code flow
// with an S256 PKCE challenge and a nonce.
func (p *provider) authorizationURL(ctx context.Context, clientID, redirectURI, state, nonce, challenge string) (string, error) {
	op, err := p.discover(ctx)
	if err != nil {
		return "", err
	}
	return p.oauth2Config(op, clientID, redirectURI).AuthCodeURL(state, oidc.Nonce(nonce),
		oauth2.SetAuthURLParam("code_challenge", challenge),
		oauth2.SetAuthURLParam("code_challenge_method", "S256")), nil
}

// exchange trades an authorization code for the provider's tokens, server
// side, and verifies the ID token: signature, issuer, audience, expiry and
// nonce. The provider's tokens go no further than this function.
func (p *provider) exchange(ctx context.Context, clientID, redirectURI, code, verifier, nonce string) (identity, error) {
	op, err := p.discover(ctx)
	if err != nil {
		return identity{}, err
	}
	octx := context.WithValue(oidc.ClientContext(ctx, p.client), oauth2.HTTPClient, p.client)
	tok, err := p.oauth2Config(op, clientID, redirectURI).Exchange(octx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
			return identity{}, errCodeRefused
		}
		return identity{}, fmt.Errorf("cannot exchange code at %s: %w", p.name, errProviderDown)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return identity{}, fmt.Errorf("%w: the token response has no id_token", errBadIDToken)
	}
	idt, err := op.Verifier(&oidc.Config{ClientID: clientID}).Verify(octx, raw)
	if err != nil {
		return identity{}, fmt.Errorf("%w: %v", errBadIDToken, err)
	}
	if idt.Nonce != nonce {
		return identity{}, fmt.Errorf("%w: the nonce does not match", errBadIDToken)
	}
	var claims struct {
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"`
	}
	if err := idt.Claims(&claims); err != nil {
		return identity{}, fmt.Errorf("%w: %v", errBadIDToken, err)
	}
	// Some providers send the flag as a string.
	verified := claims.EmailVerified == true || claims.EmailVerified == "true"
	return identity{Subject: idt.Subject, Email: strings.TrimSpace(claims.Email), EmailVerified: verified}, nil
}
