// Package oidctest is a small OpenID Connect provider for tests: discovery,
// an authorization endpoint with a sign-in form a browser (or Login) fills
// in, a token endpoint that checks the client, the redirect URI and the
// PKCE verifier, and RS256-signed ID tokens with a JWKS. It signs anyone in
// under the e-mail address typed into the form; nothing is persisted.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Provider is a running test identity provider.
type Provider struct {
	// Issuer is the provider's URL and the iss of its ID tokens.
	Issuer string
	// ClientID and ClientSecret are the one confidential client it knows.
	ClientID     string
	ClientSecret string

	srv    *httptest.Server
	key    *rsa.PrivateKey
	signer jose.Signer

	mu         sync.Mutex
	redirects  map[string]bool
	unverified map[string]bool
	codes      map[string]*grant
	down       bool
	exchanges  int
	badNonce   bool
}

type grant struct {
	clientID, redirectURI, challenge, nonce, email string
	expires                                        time.Time
}

const keyID = "test-key"

// Start runs a provider until the test ends.
func Start(t testing.TB) *Provider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("cannot generate signing key: %v", err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", keyID))
	if err != nil {
		t.Fatalf("cannot create signer: %v", err)
	}
	p := &Provider{ClientID: "gateway-test", ClientSecret: randomString(24), key: key, signer: signer,
		redirects: map[string]bool{}, unverified: map[string]bool{}, codes: map[string]*grant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /authorize", p.authorizeForm)
	mux.HandleFunc("POST /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("GET /jwks", p.jwks)
	p.srv = httptest.NewServer(p.guard(mux))
	p.Issuer = p.srv.URL
	t.Cleanup(p.srv.Close)
	return p
}

// AllowRedirectURI registers redirect URIs of the client.
func (p *Provider) AllowRedirectURI(uris ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range uris {
		p.redirects[u] = true
	}
}

// SetEmailVerified sets the email_verified claim of an address (true by
// default).
func (p *Provider) SetEmailVerified(email string, verified bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unverified[strings.ToLower(email)] = !verified
}

// SetDown makes every endpoint answer 503 while down is true.
func (p *Provider) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// SetWrongNonce makes ID tokens carry a nonce other than the one asked for.
func (p *Provider) SetWrongNonce(wrong bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.badNonce = wrong
}

// Exchanges counts successful code exchanges.
func (p *Provider) Exchanges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exchanges
}

func (p *Provider) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                p.Issuer,
		"authorization_endpoint":                p.Issuer + "/authorize",
		"token_endpoint":                        p.Issuer + "/token",
		"jwks_uri":                              p.Issuer + "/jwks",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"scopes_supported":                      []string{"openid", "email", "profile"},
	})
}

func (p *Provider) jwks(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
		Key: &p.key.PublicKey, KeyID: keyID, Algorithm: string(jose.RS256), Use: "sig"}}})
}

var formPage = template.Must(template.New("form").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test identity provider</title></head>
<body><h1>Test identity provider</h1>
<form method="post" action="/authorize">
{{range $k, $v := .}}<input type="hidden" name="{{$k}}" value="{{$v}}">
{{end}}<label for="email">E-mail</label> <input id="email" name="email" type="email" required>
<button type="submit" id="idp-sign-in" name="action" value="signin">Sign in</button>
<button type="submit" id="idp-cancel" name="action" value="cancel" formnovalidate>Cancel</button>
</form></body></html>`))

// authParams are the parameters the sign-in form carries through.
var authParams = []string{"client_id", "redirect_uri", "response_type", "scope", "state", "nonce",
	"code_challenge", "code_challenge_method"}

// checkAuthorize validates an authorization request; it returns the
// redirect URI to send errors to, or an error when there is none to trust.
func (p *Provider) checkAuthorize(v url.Values) (string, string, error) {
	p.mu.Lock()
	allowed := p.redirects[v.Get("redirect_uri")]
	p.mu.Unlock()
	if v.Get("client_id") != p.ClientID {
		return "", "", errors.New("unknown client_id")
	}
	if !allowed {
		return "", "", errors.New("redirect_uri is not registered")
	}
	switch {
	case v.Get("response_type") != "code":
		return v.Get("redirect_uri"), "unsupported_response_type", nil
	case !strings.Contains(" "+v.Get("scope")+" ", " openid "):
		return v.Get("redirect_uri"), "invalid_scope", nil
	case v.Get("code_challenge") == "" || v.Get("code_challenge_method") != "S256":
		return v.Get("redirect_uri"), "invalid_request", nil
	}
	return v.Get("redirect_uri"), "", nil
}

func (p *Provider) authorizeForm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect, oauthErr, err := p.checkAuthorize(q)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if oauthErr != "" {
		redirectWith(w, r, redirect, url.Values{"error": {oauthErr}, "state": {q.Get("state")}})
		return
	}
	fields := map[string]string{}
	for _, k := range authParams {
		fields[k] = q.Get(k)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = formPage.Execute(w, fields)
}

func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	v := r.PostForm
	redirect, oauthErr, err := p.checkAuthorize(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	state := v.Get("state")
	if oauthErr == "" && v.Get("action") == "cancel" {
		oauthErr = "access_denied"
	}
	if oauthErr != "" {
		redirectWith(w, r, redirect, url.Values{"error": {oauthErr}, "state": {state}})
		return
	}
	email := strings.TrimSpace(v.Get("email"))
	if email == "" {
		http.Error(w, "email is required", http.StatusBadRequest)
		return
	}
	code := randomString(32)
	p.mu.Lock()
	p.codes[code] = &grant{clientID: v.Get("client_id"), redirectURI: redirect, challenge: v.Get("code_challenge"),
		nonce: v.Get("nonce"), email: email, expires: time.Now().Add(time.Minute)}
	p.mu.Unlock()
	redirectWith(w, r, redirect, url.Values{"code": {code}, "state": {state}})
}

func redirectWith(w http.ResponseWriter, r *http.Request, to string, q url.Values) {
	u, err := url.Parse(to)
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	all := u.Query()
	for k, v := range q {
		all[k] = v
	}
	u.RawQuery = all.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	v := r.PostForm
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = v.Get("client_id"), v.Get("client_secret")
	}
	if id != p.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(p.ClientSecret)) != 1 {
		tokenError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	if v.Get("grant_type") != "authorization_code" {
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	p.mu.Lock()
	g := p.codes[v.Get("code")]
	delete(p.codes, v.Get("code")) // a code works once, whatever happens
	badNonce := p.badNonce
	unverified := g != nil && p.unverified[strings.ToLower(g.email)]
	p.mu.Unlock()
	if g == nil || time.Now().After(g.expires) || g.clientID != id || g.redirectURI != v.Get("redirect_uri") {
		tokenError(w, http.StatusBadRequest, "invalid_grant")
		return
	}
	sum := sha256.Sum256([]byte(v.Get("code_verifier")))
	if base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		tokenError(w, http.StatusBadRequest, "invalid_grant")
		return
	}
	nonce := g.nonce
	if badNonce {
		nonce = "not-" + nonce
	}
	now := time.Now()
	claims, _ := json.Marshal(map[string]any{
		"iss": p.Issuer, "sub": "user-" + fmt.Sprintf("%x", sha256.Sum256([]byte(strings.ToLower(g.email))))[:16],
		"aud": id, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "nonce": nonce,
		"email": g.email, "email_verified": !unverified,
	})
	sig, err := p.signer.Sign(claims)
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "server_error")
		return
	}
	idToken, err := sig.CompactSerialize()
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "server_error")
		return
	}
	p.mu.Lock()
	p.exchanges++
	p.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": randomString(24), "token_type": "Bearer",
		"expires_in": 300, "id_token": idToken})
}

func tokenError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Login signs email in at an authorization URL the way a browser would
// after the person filled in the form, and returns the URL the provider
// redirects to (with code and state, or error).
func (p *Provider) Login(authorizationURL, email string) (*url.URL, error) {
	return p.post(authorizationURL, email, "signin")
}

// Cancel declines at an authorization URL and returns the redirect.
func (p *Provider) Cancel(authorizationURL string) (*url.URL, error) {
	return p.post(authorizationURL, "", "cancel")
}

func (p *Provider) post(authorizationURL, email, action string) (*url.URL, error) {
	u, err := url.Parse(authorizationURL)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(authorizationURL, p.Issuer+"/authorize") {
		return nil, fmt.Errorf("%s is not this provider's authorization endpoint", u.Redacted())
	}
	form := url.Values{}
	for _, k := range authParams {
		form.Set(k, u.Query().Get(k))
	}
	form.Set("email", email)
	form.Set("action", action)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(p.Issuer+"/authorize", form)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		return nil, fmt.Errorf("authorization refused: %s", resp.Status)
	}
	return url.Parse(resp.Header.Get("Location"))
}
