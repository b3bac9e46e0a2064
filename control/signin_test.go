package control

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

func TestUserCodes(t *testing.T) {
	seen := map[string]bool{}
	counts := map[byte]int{}
	for range 2000 {
		c := newUserCode()
		require.Len(t, c, userCodeLen)
		for i := 0; i < len(c); i++ {
			require.Contains(t, userCodeAlphabet, string(c[i]))
			counts[c[i]]++
		}
		n, ok := normalizeUserCode(formatUserCode(c))
		require.True(t, ok)
		require.Equal(t, c, n)
		seen[c] = true
	}
	require.Greater(t, len(seen), 1990, "codes are random")
	require.Len(t, counts, len(userCodeAlphabet), "every letter of the alphabet is drawn")
	for letter, n := range counts {
		// 16000 letters over 20: about 800 each.
		require.InDelta(t, 800, n, 200, "letter %c is drawn about as often as the others", letter)
	}
}

func TestNormalizeUserCode(t *testing.T) {
	f := func(in, want string, ok bool) {
		t.Helper()
		got, gotOK := normalizeUserCode(in)
		require.Equal(t, ok, gotOK, "normalizeUserCode(%q)", in)
		require.Equal(t, want, got, "normalizeUserCode(%q)", in)
	}
	f("BCDF-GHJK", "BCDFGHJK", true)
	f("bcdf-ghjk", "BCDFGHJK", true)
	f(" bcdf ghjk ", "BCDFGHJK", true)
	f("BCDFGHJK", "BCDFGHJK", true)
	f("BCDF-GHJ", "", false)   // short
	f("BCDF-GHJKL", "", false) // long
	f("BCDF-GHJA", "", false)  // a vowel is not in the alphabet
	f("BCDF-GH0K", "", false)  // nor a digit
	f("BCDF_GHJK", "", false)  // nor another separator
	f("", "", false)           // empty
	f("ÄCDF-GHJK", "", false)  // nor anything outside ASCII
	f(strings.Repeat("B", 40), "", false)
	require.Equal(t, "BCDF-GHJK", formatUserCode("BCDFGHJK"))
}

func TestParseDeviceTokenRequest(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	cases := []struct {
		name, ct, body, want, code string
	}{
		{"json", "application/json", `{"device_code":"abc"}`, "abc", ""},
		{"form as x/oauth2 sends it", form, "client_id=cli&grant_type=" + strings.ReplaceAll(deviceGrantType, ":", "%3A") +
			"&device_code=abc", "abc", ""},
		{"form without grant_type", form + "; charset=utf-8", "device_code=abc", "abc", ""},
		{"wrong grant_type", form, "grant_type=password&device_code=abc", "", "invalid_request"},
		{"missing device_code", "application/json", `{}`, "", "invalid_request"},
		{"empty body", "", ``, "", "invalid_request"},
		{"device_code not a string", "application/json", `{"device_code":42}`, "", "invalid_request"},
		{"not JSON", "application/json", `{"device_code":`, "", "invalid_request"},
		{"JSON array", "application/json", `["device_code"]`, "", "invalid_request"},
		{"JSON null", "application/json", `null`, "", "invalid_request"},
		{"repeated form field", form, "device_code=a&device_code=b", "", "invalid_request"},
		{"broken form", form, "device_code=%zz", "", "invalid_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseDeviceTokenRequest(tc.ct, []byte(tc.body))
			if tc.code == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, req.DeviceCode)
				return
			}
			var cerr *codec.Error
			require.True(t, errors.As(err, &cerr), "err %v", err)
			require.Equal(t, tc.code, cerr.Code.String())
			require.Equal(t, tc.code, cerr.Message, "error carries the OAuth code")
			require.NotEmpty(t, cerr.Detail.ErrorDescription)
		})
	}
}

func TestParseOAuthStart(t *testing.T) {
	challenge := s256(strings.Repeat("v", 43))
	ok := `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"com.example.app:/cb"}`
	req, err := parseOAuthStart("application/json", []byte(ok))
	require.NoError(t, err)
	require.Equal(t, oauthStartRequest{Provider: "corp", CodeChallenge: challenge, RedirectURI: "com.example.app:/cb"}, req)

	bad := []struct{ name, body, hint string }{
		{"no provider", `{"code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"app:/cb"}`, "provider"},
		{"no challenge", `{"provider":"corp","code_challenge_method":"S256","redirect_uri":"app:/cb"}`, "code_challenge"},
		{"plain method", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"plain","redirect_uri":"app:/cb"}`, "S256"},
		{"no method", `{"provider":"corp","code_challenge":"` + challenge + `","redirect_uri":"app:/cb"}`, "S256"},
		{"short challenge", `{"provider":"corp","code_challenge":"abc","code_challenge_method":"S256","redirect_uri":"app:/cb"}`, "43"},
		{"padded challenge", `{"provider":"corp","code_challenge":"` + challenge[:42] + `=","code_challenge_method":"S256","redirect_uri":"app:/cb"}`, "43"},
		{"no redirect", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256"}`, "redirect_uri"},
		{"relative redirect", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"/cb"}`, "scheme"},
		{"fragment", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"https://a.example/cb#x"}`, "fragment"},
		{"space", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"https://a.example/c b"}`, "spaces"},
		{"no host", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"https:///cb"}`, "host"},
		{"userinfo", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"https://u:p@a.example/cb"}`, "user"},
		{"bad escape", `{"provider":"corp","code_challenge":"` + challenge + `","code_challenge_method":"S256","redirect_uri":"https://a.example/%zz"}`, "valid"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseOAuthStart("application/json", []byte(tc.body))
			var cerr *codec.Error
			require.True(t, errors.As(err, &cerr))
			require.Equal(t, codec.CodeInvalidRequest, cerr.Code)
			require.Contains(t, cerr.Detail.ErrorDescription, tc.hint)
		})
	}
}

func TestParseOAuthToken(t *testing.T) {
	verifier := strings.Repeat("a", 43)
	req, err := parseOAuthToken("application/json", []byte(`{"code":"c","code_verifier":"`+verifier+`","state":"s"}`))
	require.NoError(t, err)
	require.Equal(t, oauthTokenRequest{Code: "c", CodeVerifier: verifier, State: "s"}, req)
	req, err = parseOAuthToken("application/x-www-form-urlencoded",
		[]byte("grant_type=authorization_code&code=c&code_verifier="+verifier+"&state=s"))
	require.NoError(t, err)
	require.Equal(t, "c", req.Code)
	for name, body := range map[string]string{
		"no state":  `{"code":"c","code_verifier":"` + verifier + `"}`,
		"no code":   `{"state":"s","code_verifier":"` + verifier + `"}`,
		"huge code": `{"state":"s","code":"` + strings.Repeat("c", 5000) + `","code_verifier":"` + verifier + `"}`,
	} {
		_, err := parseOAuthToken("application/json", []byte(body))
		var cerr *codec.Error
		require.True(t, errors.As(err, &cerr), name)
		require.Equal(t, codec.CodeInvalidRequest, cerr.Code, name)
	}
	// The verifier is read as sent and checked once the state is spent.
	req, err = parseOAuthToken("application/json", []byte(`{"state":"s","code":"c","code_verifier":"abc"}`))
	require.NoError(t, err)
	require.Equal(t, "abc", req.CodeVerifier)
	require.NoError(t, checkVerifier(verifier))
	require.NoError(t, checkVerifier(strings.Repeat("a", 128)))
	for name, v := range map[string]string{
		"no verifier":    "",
		"short verifier": "abc",
		"bad verifier":   strings.Repeat("a", 42) + "!",
		"long verifier":  strings.Repeat("a", 129),
	} {
		var cerr *codec.Error
		require.True(t, errors.As(checkVerifier(v), &cerr), name)
		require.Equal(t, codec.CodeInvalidRequest, cerr.Code, name)
	}
	_, err = parseOAuthToken("application/x-www-form-urlencoded", []byte("grant_type=refresh_token&code=c&state=s&code_verifier="+verifier))
	require.Error(t, err)
}

func TestRedirectAllowlist(t *testing.T) {
	p := newProvider("corp", OIDCProvider{ClientID: "web", RedirectURIs: []RedirectURI{
		{URI: "com.example.app:/oauth2redirect"},
		{URI: "http://127.0.0.1/callback"},
		{URI: "http://[::1]/callback"},
		{URI: "https://app.example.com/cb"},
		{URI: "com.googleusercontent.apps.123:/oauth2redirect", ClientID: "ios-client"},
	}}, nil)
	f := func(uri, wantClient string) {
		t.Helper()
		got, ok := p.allowRedirect(uri)
		require.Equal(t, wantClient != "", ok, "allowRedirect(%q)", uri)
		require.Equal(t, wantClient, got, "allowRedirect(%q)", uri)
	}
	f("com.example.app:/oauth2redirect", "web")
	f("com.googleusercontent.apps.123:/oauth2redirect", "ios-client")
	f("http://127.0.0.1/callback", "web")
	f("http://127.0.0.1:53124/callback", "web") // any port on loopback (RFC 8252)
	f("http://[::1]:8000/callback", "web")
	f("https://app.example.com/cb", "web")
	f("https://app.example.com:8443/cb", "")  // exact match elsewhere
	f("https://app.example.com/cb/", "")      // no prefix matching
	f("https://app.example.com/cb?x=1", "")   // no added query
	f("http://127.0.0.1:53124/callback2", "") // path must match
	f("http://127.0.0.1:53124/callback?x", "")
	f("http://localhost:53124/callback", "") // a name is not the loopback literal
	f("https://127.0.0.1:53124/callback", "")
	f("com.example.app:/oauth2redirect/evil", "")
	f("COM.EXAMPLE.APP:/oauth2redirect", "")
}

func TestOAuthCodes(t *testing.T) {
	for code, want := range map[codec.Code]string{
		codec.CodeAuthorizationPending: "authorization_pending",
		codec.CodeAccessDenied:         "access_denied",
		codec.CodeExpiredToken:         "expired_token",
		codec.CodeInvalidGrant:         "invalid_grant",
		codec.CodeInvalidRequest:       "invalid_request",
		codec.CodeRateLimited:          "slow_down",
		codec.CodeProviderNotSupported: "invalid_request",
		codec.CodeAccountRequired:      "access_denied",
		codec.CodeOrgSelectionRequired: "access_denied",
		codec.CodeServiceUnavailable:   "temporarily_unavailable",
		codec.CodeInternalError:        "server_error",
		// The edge's refusals before the handler runs.
		codec.CodeUnknownVersion:               "invalid_request",
		codec.CodeMethodNotAllowed:             "invalid_request",
		codec.CodeNotFound:                     "invalid_request",
		codec.CodePayloadTooLarge:              "invalid_request",
		codec.CodeUnsupportedMediaType:         "invalid_request",
		codec.CodeURITooLong:                   "invalid_request",
		codec.CodeRequestHeadersTooLarge:       "invalid_request",
		codec.CodeRequestTimeout:               "invalid_request",
		codec.CodeTransferEncodingNotSupported: "invalid_request",
		codec.CodeServerShuttingDown:           "temporarily_unavailable",
	} {
		require.Equal(t, want, code.OAuthCode(), code.String())
	}
	shared := *codec.ErrPayloadTooLarge
	e := codec.AsOAuth(codec.ErrPayloadTooLarge)
	require.Equal(t, codec.Error{Code: codec.CodePayloadTooLarge, Message: "invalid_request",
		Detail: codec.Detail{ErrorDescription: codec.CodePayloadTooLarge.DefaultMessage()}}, *e)
	require.Equal(t, shared, *codec.ErrPayloadTooLarge, "a shared error is copied, never changed")
	require.Same(t, errDeviceRevoked, codec.AsOAuth(errDeviceRevoked), "an OAuth error is answered as it is")
	require.Equal(t, "The Gateway-Version header must be a date in the form YYYY-MM-DD, from 2000-01-01 on.",
		codec.AsOAuth(codec.ErrBadVersion).Detail.ErrorDescription, "a message moves to error_description")
	e = rateLimited(1500*time.Millisecond, "slow")
	require.Equal(t, 2, e.Detail.RetryAfter, "Retry-After rounds up")
	require.Equal(t, 1, rateLimited(time.Millisecond, "").Detail.RetryAfter)
	b := codec.AppendV1Error(nil, errDeviceRevoked, []byte("rid"))
	require.JSONEq(t, `{"code":"access_denied","error":"access_denied","request_id":"rid",
		"reason":"org_membership_revoked","error_description":"`+errDeviceRevoked.Detail.ErrorDescription+`"}`, string(b))
}

func TestMemoryLoginLimiter(t *testing.T) {
	l := NewMemoryLoginLimiter(3, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		ok, _ := l.Allow("a", t0)
		require.True(t, ok, "burst %d", i)
	}
	ok, wait := l.Allow("a", t0)
	require.False(t, ok)
	require.Equal(t, 20*time.Second, wait, "one token per window/limit")
	ok, _ = l.Allow("b", t0)
	require.True(t, ok, "keys are independent")
	ok, wait = l.Allow("a", t0.Add(15*time.Second))
	require.False(t, ok)
	require.Equal(t, 5*time.Second, wait)
	ok, _ = l.Allow("a", t0.Add(20*time.Second))
	require.True(t, ok)
	ok, _ = l.Allow("a", t0.Add(20*time.Second))
	require.False(t, ok, "the refilled token was spent")

	l.maxKeys = 2
	_, _ = l.Allow("c", t0.Add(time.Hour))
	require.LessOrEqual(t, len(l.buckets), 2, "idle keys are forgotten")
}

func TestSignInConfigValidate(t *testing.T) {
	valid := func() SignInConfig {
		return SignInConfig{Providers: map[string]OIDCProvider{"corp": {Issuer: "https://login.example.com",
			ClientID: "gw", RedirectURIs: []RedirectURI{{URI: "com.example.app:/cb"}}}}}
	}
	c := valid()
	require.NoError(t, c.Validate())
	require.Equal(t, "corp", c.ApprovalProvider, "the only provider signs the approval page in")
	require.Equal(t, 5*time.Second, c.PollInterval)
	require.Equal(t, 15*time.Minute, c.DeviceCodeLifetime)
	require.Equal(t, []string{"openid", "email", "profile"}, c.Providers["corp"].Scopes)

	bad := map[string]func(*SignInConfig){
		"issuer": func(c *SignInConfig) {
			p := c.Providers["corp"]
			p.Issuer = "http://login.example.com"
			c.Providers["corp"] = p
		},
		"client_id": func(c *SignInConfig) { p := c.Providers["corp"]; p.ClientID = ""; c.Providers["corp"] = p },
		"redirect_uris": func(c *SignInConfig) {
			p := c.Providers["corp"]
			p.RedirectURIs[0].URI = "/relative"
			c.Providers["corp"] = p
		},
		"scopes":         func(c *SignInConfig) { p := c.Providers["corp"]; p.Scopes = []string{"email"}; c.Providers["corp"] = p },
		"poll_interval":  func(c *SignInConfig) { c.PollInterval = 1500 * time.Millisecond },
		"code_lifetime":  func(c *SignInConfig) { c.DeviceCodeLifetime = 2 * time.Hour },
		"public_url":     func(c *SignInConfig) { c.PublicURL = "ftp://x" },
		"approval":       func(c *SignInConfig) { c.ApprovalProvider = "other" },
		"rate_limit":     func(c *SignInConfig) { c.RateLimit = -1 },
		"state_lifetime": func(c *SignInConfig) { c.StateLifetime = time.Second },
	}
	for want, mutate := range bad {
		c := valid()
		mutate(&c)
		err := c.Validate()
		require.Error(t, err, want)
		require.Contains(t, err.Error(), want)
	}
	loop := valid()
	p := loop.Providers["corp"]
	p.Issuer = "http://127.0.0.1:5556/dex"
	loop.Providers["corp"] = p
	require.NoError(t, loop.Validate(), "plain http is fine on loopback")
}

func TestCSRFTokenIsBoundToTheSession(t *testing.T) {
	a, b := csrfToken("session-one-secret-value"), csrfToken("session-two-secret-value")
	require.NotEqual(t, a, b)
	require.Equal(t, a, csrfToken("session-one-secret-value"))
	require.Len(t, a, 43)
}
