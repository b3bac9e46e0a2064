package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/edgegw/gateway/control/oidctest"
)

// signInApp is a gateway with sign-in configured against a test identity
// provider.
type signInApp struct {
	*testApp
	idp  *oidctest.Provider
	base string
}

type signInOptions struct {
	ratePerMinute int
}

func startSignInApp(t *testing.T, opts ...signInOptions) *signInApp {
	t.Helper()
	o := signInOptions{ratePerMinute: 1000}
	if len(opts) > 0 {
		o = opts[0]
	}
	idp := oidctest.Start(t)
	t.Setenv("GW_TEST_OIDC_SECRET", idp.ClientSecret)
	cfg := fmt.Sprintf(`sign_in:
  rate_limit_per_minute: %d
  device:
    poll_interval: 1s
  providers:
    test:
      issuer: %s
      client_id: %s
      client_secret_env: GW_TEST_OIDC_SECRET
      redirect_uris:
        - com.example.app:/oauth2redirect
        - http://127.0.0.1/callback
`, o.ratePerMinute, idp.Issuer, idp.ClientID)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = path })
	base := "http://" + ta.Addr()
	idp.AllowRedirectURI(base+"/device/callback", "com.example.app:/oauth2redirect", "http://127.0.0.1:49152/callback")
	return &signInApp{testApp: ta, idp: idp, base: base}
}

// post sends a raw body to the app.
func (sa *signInApp) post(t *testing.T, path, contentType, body string, headers ...string) resp {
	t.Helper()
	req, err := http.NewRequest("POST", sa.base+path, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, req)
}

func (sa *signInApp) postJSON(t *testing.T, path string, body any) resp {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return sa.post(t, path, "application/json", string(b))
}

// requireOAuthError checks a refusal of the sign-in routes: the status,
// the gateway's code, the OAuth code in error, the text in
// error_description and the request id.
func requireOAuthError(t *testing.T, r resp, status int, code, oauthCode string) {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.raw)
	require.Equal(t, code, r.body["code"], "%s", r.raw)
	require.Equal(t, oauthCode, r.body["error"], "%s", r.raw)
	require.NotEmpty(t, r.body["error_description"], "%s", r.raw)
	require.NotEmpty(t, r.body["request_id"])
	require.Equal(t, r.header.Get("X-Request-Id"), r.body["request_id"])
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
}

// deviceCode starts a device login over the wire.
func (sa *signInApp) deviceCode(t *testing.T) map[string]any {
	t.Helper()
	r := sa.post(t, "/api/v1/device/code", "", "")
	require.Equal(t, 200, r.status, "%s", r.raw)
	return r.body
}

// allowPoll lets the next poll of every device code count at once, as if
// the client had waited its interval.
func (sa *signInApp) allowPoll(t *testing.T) {
	t.Helper()
	_, err := sa.db.Pool.Exec(context.Background(), `update device_codes set last_polled_at = null`)
	require.NoError(t, err)
}

func (sa *signInApp) pollDevice(t *testing.T, deviceCode string) resp {
	t.Helper()
	sa.allowPoll(t)
	return sa.post(t, "/api/v1/device/token", "application/x-www-form-urlencoded",
		url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {deviceCode}}.Encode())
}

func (sa *signInApp) signedInKeys(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, sa.db.Pool.QueryRow(context.Background(),
		`select count(*) from api_keys where kind = 'signed_in'`).Scan(&n))
	return n
}

// newUser creates an account, optionally a member of another organization,
// and returns its id and that organization's id.
func newUser(t *testing.T, dbURL, email string, withOrg string) (userID, orgID string) {
	t.Helper()
	args := []string{"user", "create", "--email", email}
	if withOrg != "" {
		org := admin(t, dbURL, "org", "create", "--name", withOrg)
		orgID = org["id"].(string)
		args = append(args, "--org", orgID, "--role", "member")
	}
	return admin(t, dbURL, args...)["id"].(string), orgID
}

func deviceClient(base string) *oauth2.Config {
	return &oauth2.Config{ClientID: "gateway-cli", Endpoint: oauth2.Endpoint{
		DeviceAuthURL: base + "/api/v1/device/code", TokenURL: base + "/api/v1/device/token"}}
}

type tokenResult struct {
	tok *oauth2.Token
	err error
}

// startPolling runs x/oauth2's DeviceAccessToken in the background and
// waits until its first poll has been answered authorization_pending.
func (sa *signInApp) startPolling(t *testing.T, cfg *oauth2.Config, da *oauth2.DeviceAuthResponse) <-chan tokenResult {
	t.Helper()
	ch := make(chan tokenResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	go func() {
		tok, err := cfg.DeviceAccessToken(ctx, da)
		ch <- tokenResult{tok, err}
	}()
	h := sha256.Sum256([]byte(da.DeviceCode))
	require.Eventually(t, func() bool {
		var polled bool
		err := sa.db.Pool.QueryRow(context.Background(),
			`select last_polled_at is not null from device_codes where hash = $1`, h[:]).Scan(&polled)
		return err == nil && polled
	}, 10*time.Second, 20*time.Millisecond, "the client polls")
	return ch
}

func waitToken(t *testing.T, ch <-chan tokenResult) tokenResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("the device client got no answer")
	}
	return tokenResult{}
}

// TestDeviceLoginWithOAuth2Client drives the whole device flow with the
// standard RFC 8628 client of golang.org/x/oauth2: code, pending polls,
// approval, the key, and a redeemed code that works no more.
func TestDeviceLoginWithOAuth2Client(t *testing.T) {
	sa := startSignInApp(t)
	ctx := context.Background()
	userID, _ := newUser(t, sa.dbURL, "ann@example.com", "")
	cfg := deviceClient(sa.base)

	da, err := cfg.DeviceAuth(ctx, oauth2.SetAuthURLParam("scope", "ignored"))
	require.NoError(t, err)
	require.Regexp(t, `^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`, da.UserCode)
	require.Equal(t, sa.base+"/device", da.VerificationURI)
	require.Equal(t, sa.base+"/device?user_code="+da.UserCode, da.VerificationURIComplete)
	require.Equal(t, int64(1), da.Interval)
	require.WithinDuration(t, time.Now().Add(15*time.Minute), da.Expiry, 5*time.Second)
	require.GreaterOrEqual(t, len(da.DeviceCode), 43)

	ch := sa.startPolling(t, cfg, da)
	approved := admin(t, sa.dbURL, "device", "approve", "--user-code", strings.ToLower(da.UserCode), "--user", userID)
	require.Equal(t, "approved", approved["status"])
	res := waitToken(t, ch)
	require.NoError(t, res.err)
	tok := res.tok
	require.Regexp(t, `^gw_live_`, tok.AccessToken)
	require.Equal(t, "Bearer", tok.Type())
	keyID, _ := tok.Extra("key_id").(string)
	require.NotEmpty(t, keyID)
	require.Equal(t, userID, tok.Extra("user_id"))
	org, _ := tok.Extra("org").(map[string]any)
	require.Equal(t, "ann@example.com", org["name"], "bound to the user's only organization")
	require.Equal(t, "owner", org["role"])
	expires, err := time.Parse(time.RFC3339, tok.Extra("expires_at").(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(90*24*time.Hour), expires, time.Minute)

	me := sa.call(t, "GET", "/api/v1/me", tok.AccessToken, nil)
	require.Equal(t, 200, me.status)
	require.Equal(t, keyID, me.body["api_key_id"])
	keys := sa.call(t, "GET", "/api/v1/keys", tok.AccessToken, nil)
	require.Equal(t, "signed_in", keys.body["data"].([]any)[0].(map[string]any)["kind"])

	// The code is redeemed once: the same client polling again is refused.
	_, err = cfg.DeviceAccessToken(ctx, da)
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_grant", re.ErrorCode)
	require.Equal(t, 1, sa.signedInKeys(t))

	require.Contains(t, sa.logs.String(), keyID, "the issue is logged by key id")
	requireNoSecretsLogged(t, sa, tok.AccessToken, da.DeviceCode, da.UserCode,
		strings.ReplaceAll(da.UserCode, "-", ""))
}

// TestDeviceLoginDeclinedWithOAuth2Client: a declined login ends the
// standard client's polling with access_denied.
func TestDeviceLoginDeclinedWithOAuth2Client(t *testing.T) {
	sa := startSignInApp(t)
	cfg := deviceClient(sa.base)
	da, err := cfg.DeviceAuth(context.Background())
	require.NoError(t, err)
	ch := sa.startPolling(t, cfg, da)
	denied := admin(t, sa.dbURL, "device", "deny", "--user-code", da.UserCode)
	require.Equal(t, map[string]any{"user_code": da.UserCode, "status": "denied"}, denied)
	res := waitToken(t, ch)
	var re *oauth2.RetrieveError
	require.ErrorAs(t, res.err, &re)
	require.Equal(t, "access_denied", re.ErrorCode)
	require.Equal(t, 400, re.Response.StatusCode)
	require.Zero(t, sa.signedInKeys(t))
}

// TestDeviceTokenStates walks every row of the device login table.
func TestDeviceTokenStates(t *testing.T) {
	sa := startSignInApp(t)
	ctx := context.Background()
	userID, teamID := newUser(t, sa.dbURL, "bo@example.com", "Team")

	t.Run("invalid", func(t *testing.T) {
		requireOAuthError(t, sa.pollDevice(t, "not-a-device-code-at-all-but-long-enough"), 400, "invalid_grant", "invalid_grant")
		requireOAuthError(t, sa.pollDevice(t, "x"), 400, "invalid_grant", "invalid_grant")
		requireOAuthError(t, sa.postJSON(t, "/api/v1/device/token", map[string]any{}), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, sa.postJSON(t, "/api/v1/device/token", map[string]any{"device_code": 7}), 400,
			"invalid_request", "invalid_request")
		requireOAuthError(t, sa.post(t, "/api/v1/device/token", "application/json", `{"device_code":`), 400,
			"invalid_request", "invalid_request")
		requireOAuthError(t, sa.post(t, "/api/v1/device/token", "application/x-www-form-urlencoded",
			"grant_type=password&device_code=abc"), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, sa.post(t, "/api/v1/device/token", "application/json",
			`{"device_code":"`+strings.Repeat("a", 20000)+`"}`), 413, "payload_too_large", "invalid_request")
	})

	t.Run("pending, then too fast", func(t *testing.T) {
		dc := sa.deviceCode(t)
		code := dc["device_code"].(string)
		requireOAuthError(t, sa.pollDevice(t, code), 400, "authorization_pending", "authorization_pending")
		r := sa.postJSON(t, "/api/v2/device/token", map[string]any{"device_code": code})
		requireOAuthError(t, r, 429, "rate_limited", "slow_down")
		require.Equal(t, "1", r.header.Get("Retry-After"))
		// One interval later (as the database's clock sees it) the poll counts.
		_, err := sa.db.Pool.Exec(ctx, `update device_codes set last_polled_at = last_polled_at - interval '1 second'`)
		require.NoError(t, err)
		requireOAuthError(t, sa.postJSON(t, "/api/v1/device/token", map[string]any{"device_code": code}),
			400, "authorization_pending", "authorization_pending")
	})

	t.Run("denied", func(t *testing.T) {
		dc := sa.deviceCode(t)
		admin(t, sa.dbURL, "device", "deny", "--user-code", dc["user_code"].(string))
		requireOAuthError(t, sa.pollDevice(t, dc["device_code"].(string)), 400, "access_denied", "access_denied")
		requireOAuthError(t, sa.postJSON(t, "/api/v1/device/token", map[string]any{"device_code": dc["device_code"]}),
			400, "access_denied", "access_denied") // a final answer is not paced
	})

	t.Run("expired", func(t *testing.T) {
		dc := sa.deviceCode(t)
		_, err := sa.db.Pool.Exec(ctx, `update device_codes set expires_at = now() - interval '1 second'
			where user_code = $1`, strings.ReplaceAll(dc["user_code"].(string), "-", ""))
		require.NoError(t, err)
		requireOAuthError(t, sa.pollDevice(t, dc["device_code"].(string)), 400, "expired_token", "expired_token")
		code, _, stderr := runCLI("admin", "device", "approve", "--user-code", dc["user_code"].(string),
			"--user", userID, "--org", teamID, "--database-url", sa.dbURL)
		require.Equal(t, 1, code, "an expired code cannot be approved")
		require.Contains(t, stderr, "unknown, expired or already decided")
	})

	t.Run("membership ended after approval", func(t *testing.T) {
		dc := sa.deviceCode(t)
		admin(t, sa.dbURL, "device", "approve", "--user-code", dc["user_code"].(string), "--user", userID, "--org", teamID)
		_, err := sa.db.Pool.Exec(ctx, `delete from memberships where user_id = $1 and org_id = $2`, userID, teamID)
		require.NoError(t, err)
		r := sa.pollDevice(t, dc["device_code"].(string))
		requireOAuthError(t, r, 400, "access_denied", "access_denied")
		require.Equal(t, "org_membership_revoked", r.body["reason"])
		require.Contains(t, r.body["error_description"], "membership")
		r = sa.pollDevice(t, dc["device_code"].(string))
		require.Equal(t, "org_membership_revoked", r.body["reason"], "the refusal stands")
	})

	t.Run("approved, redeemed once", func(t *testing.T) {
		dc := sa.deviceCode(t)
		admin(t, sa.dbURL, "device", "approve", "--user-code", dc["user_code"].(string), "--user", userID)
		r := sa.pollDevice(t, dc["device_code"].(string))
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.ElementsMatch(t, []string{"access_token", "token_type", "key_id", "user_id", "expires_at", "org"}, keys(r.body))
		require.Equal(t, "bearer", r.body["token_type"])
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		require.Empty(t, r.header.Values("Set-Cookie"), "no cookie is set")
		requireOAuthError(t, sa.pollDevice(t, dc["device_code"].(string)), 400, "invalid_grant", "invalid_grant")
	})
	require.Equal(t, 1, sa.signedInKeys(t), "only the approved login issued a key")
}

// TestSignInJSONIsReadStrictly: a sign-in body is JSON as every route reads
// it: invalid UTF-8, a raw control character or an unknown escape anywhere
// in it is 400 invalid_request naming the field; a key given twice counts
// the last time.
func TestSignInJSONIsReadStrictly(t *testing.T) {
	sa := startSignInApp(t)
	for name, body := range map[string]string{
		"invalid UTF-8":         "{\"device_code\":\"abc\xff\"}",
		"raw control character": "{\"device_code\":\"a\x01b\"}",
		"unknown escape":        `{"device_code":"a\qb"}`,
	} {
		r := sa.post(t, "/api/v1/device/token", "application/json", body)
		requireOAuthError(t, r, 400, "invalid_request", "invalid_request")
		require.Contains(t, r.body["error_description"], "device_code", name)
	}
	_, challenge := pkce(t)
	r := sa.post(t, "/api/v1/auth/oauth/start", "application/json", `{"provider":"test","code_challenge":"`+challenge+
		`","code_challenge_method":"S256","redirect_uri":"com.example.app:/oauth2redirect","note":"`+"\xfe"+`"}`)
	requireOAuthError(t, r, 400, "invalid_request", "invalid_request")
	require.Contains(t, r.body["error_description"], "note", "a field the route does not read is checked too")

	code := sa.deviceCode(t)["device_code"].(string)
	requireOAuthError(t, sa.post(t, "/api/v1/device/token", "application/json",
		`{"device_code":"not-this-one","device_code":"`+code+`"}`), 400, "authorization_pending", "authorization_pending")
	sa.allowPoll(t)
	requireOAuthError(t, sa.post(t, "/api/v1/device/token", "application/json",
		`{"device_code":"`+code+`","device_code":"not-this-one"}`), 400, "invalid_grant", "invalid_grant")
}

func TestDeviceCodeIsRateLimited(t *testing.T) {
	sa := startSignInApp(t, signInOptions{ratePerMinute: 2})
	sa.deviceCode(t)
	sa.deviceCode(t)
	r := sa.post(t, "/api/v1/device/code", "", "")
	requireOAuthError(t, r, 429, "rate_limited", "slow_down")
	require.Equal(t, "30", r.header.Get("Retry-After"), "one more start every 30 seconds")
	r = sa.postJSON(t, "/api/v1/auth/oauth/start", map[string]any{})
	require.Equal(t, 400, r.status, "each route has its own allowance")
}

// TestSignInEdgeRefusalsAreOAuthErrors: what the edge refuses before a
// sign-in handler runs is answered as the handlers answer, error being an
// OAuth code, with Cache-Control: no-store.
func TestSignInEdgeRefusalsAreOAuthErrors(t *testing.T) {
	sa := startSignInApp(t)
	for _, path := range []string{"/api/v1/device/code", "/api/v2/device/token", "/api/v1/auth/oauth/start",
		"/api/v2/auth/oauth/token"} {
		t.Run(path, func(t *testing.T) {
			requireOAuthError(t, sa.post(t, path, "application/json", "{}", "Gateway-Version", "2999-01-01"), 400,
				"unknown_version", "invalid_request")
			requireOAuthError(t, sa.post(t, path, "application/json", "{}", "Gateway-Version", "yesterday"), 400,
				"invalid_request", "invalid_request")
			requireOAuthError(t, sa.post(t, path, "application/json", "{}", "Content-Encoding", "gzip"), 415,
				"unsupported_media_type", "invalid_request")
			r := sa.call(t, "GET", path, "", nil)
			requireOAuthError(t, r, 405, "method_not_allowed", "invalid_request")
			require.Equal(t, "POST", r.header.Get("Allow"))

			// A body over --max-body-size is refused from its
			// Content-Length, before it is read.
			conn, err := net.Dial("tcp", sa.Addr())
			require.NoError(t, err)
			defer conn.Close()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
				path, 2<<20)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			defer res.Body.Close()
			r = resp{status: res.StatusCode, header: res.Header}
			r.raw, err = io.ReadAll(res.Body)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(r.raw, &r.body), "%s", r.raw)
			requireOAuthError(t, r, 413, "payload_too_large", "invalid_request")
		})
	}
	requireOAuthError(t, sa.post(t, "/api/v1/auth/oauth/refresh", "application/json", "{}"), 404,
		"not_found", "invalid_request")
}

// pkce returns a fresh code_verifier and its S256 challenge.
func pkce(t *testing.T) (verifier, challenge string) {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	verifier = base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// oauthLogin runs a native login up to the code: start, then the person
// signs in at the provider. It returns the code, the state and the verifier.
func (sa *signInApp) oauthLogin(t *testing.T, email, redirectURI string) (code, state, verifier string) {
	t.Helper()
	verifier, challenge := pkce(t)
	r := sa.postJSON(t, "/api/v1/auth/oauth/start", map[string]any{"provider": "test", "code_challenge": challenge,
		"code_challenge_method": "S256", "redirect_uri": redirectURI})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.ElementsMatch(t, []string{"authorization_url", "state"}, keys(r.body))
	authURL := r.body["authorization_url"].(string)
	state = r.body["state"].(string)
	u, err := url.Parse(authURL)
	require.NoError(t, err)
	require.Equal(t, sa.idp.Issuer+"/authorize", u.Scheme+"://"+u.Host+u.Path)
	q := u.Query()
	require.Equal(t, state, q.Get("state"))
	require.Equal(t, challenge, q.Get("code_challenge"))
	require.Equal(t, "S256", q.Get("code_challenge_method"))
	require.Equal(t, redirectURI, q.Get("redirect_uri"))
	require.NotEmpty(t, q.Get("nonce"))
	require.Contains(t, q.Get("scope"), "openid")
	back, err := sa.idp.Login(authURL, email)
	require.NoError(t, err)
	require.Equal(t, state, back.Query().Get("state"))
	return back.Query().Get("code"), state, verifier
}

func (sa *signInApp) oauthToken(t *testing.T, code, state, verifier string) resp {
	t.Helper()
	return sa.postJSON(t, "/api/v1/auth/oauth/token", map[string]any{"code": code, "state": state, "code_verifier": verifier})
}

// TestNativeOAuthLogin exchanges a code with the provider and issues the
// same token response as device login.
func TestNativeOAuthLogin(t *testing.T) {
	sa := startSignInApp(t)
	userID, _ := newUser(t, sa.dbURL, "cy@example.com", "")
	code, state, verifier := sa.oauthLogin(t, "CY@example.com", "com.example.app:/oauth2redirect")
	r := sa.oauthToken(t, code, state, verifier)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.ElementsMatch(t, []string{"access_token", "token_type", "key_id", "user_id", "expires_at", "org"}, keys(r.body))
	require.Equal(t, userID, r.body["user_id"])
	require.Equal(t, "cy@example.com", r.body["org"].(map[string]any)["name"])
	require.Empty(t, r.header.Values("Set-Cookie"))
	require.NotContains(t, string(r.raw), "id_token", "no provider token is returned")
	key := r.body["access_token"].(string)
	require.Equal(t, 200, sa.call(t, "GET", "/api/v1/me", key, nil).status)
	expires, err := time.Parse(time.RFC3339, r.body["expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(90*24*time.Hour), expires, time.Minute)

	// The state is single-use.
	requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 400, "invalid_grant", "invalid_grant")

	// A loopback redirect may use any port.
	code, state, verifier = sa.oauthLogin(t, "cy@example.com", "http://127.0.0.1:49152/callback")
	r = sa.oauthToken(t, code, state, verifier)
	require.Equal(t, 200, r.status, "%s", r.raw)

	// Form encoding works too.
	code, state, verifier = sa.oauthLogin(t, "cy@example.com", "com.example.app:/oauth2redirect")
	r = sa.post(t, "/api/v2/auth/oauth/token", "application/x-www-form-urlencoded", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "state": {state}, "code_verifier": {verifier}}.Encode())
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, 3, sa.signedInKeys(t))
	requireNoSecretsLogged(t, sa, key, code, state, verifier, sa.idp.ClientSecret, "cy@example.com", "CY@example.com")
}

// TestNativeOAuthRefusals: every bad input is a clear error and issues
// nothing.
func TestNativeOAuthRefusals(t *testing.T) {
	sa := startSignInApp(t)
	ctx := context.Background()
	newUser(t, sa.dbURL, "solo@example.com", "")
	newUser(t, sa.dbURL, "multi@example.com", "Two Orgs")
	suspendedID, _ := newUser(t, sa.dbURL, "sus@example.com", "")
	admin(t, sa.dbURL, "user", "suspend", "--user", suspendedID)
	_, challenge := pkce(t)
	start := func(fields map[string]any) resp {
		t.Helper()
		body := map[string]any{"provider": "test", "code_challenge": challenge, "code_challenge_method": "S256",
			"redirect_uri": "com.example.app:/oauth2redirect"}
		for k, v := range fields {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		return sa.postJSON(t, "/api/v1/auth/oauth/start", body)
	}

	t.Run("start", func(t *testing.T) {
		requireOAuthError(t, start(map[string]any{"provider": "github"}), 400, "provider_not_supported", "invalid_request")
		requireOAuthError(t, start(map[string]any{"redirect_uri": "https://evil.example/cb"}), 400,
			"redirect_uri_not_allowed", "invalid_request")
		requireOAuthError(t, start(map[string]any{"redirect_uri": "com.example.app:/oauth2redirect/x"}), 400,
			"redirect_uri_not_allowed", "invalid_request")
		requireOAuthError(t, start(map[string]any{"redirect_uri": "http://localhost:49152/callback"}), 400,
			"redirect_uri_not_allowed", "invalid_request")
		for _, bad := range []string{"not a uri", "/relative", "https://a.example/cb#frag", "https://%zz", "http:///x"} {
			requireOAuthError(t, start(map[string]any{"redirect_uri": bad}), 400, "invalid_request", "invalid_request")
		}
		requireOAuthError(t, start(map[string]any{"code_challenge_method": "plain"}), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, start(map[string]any{"code_challenge_method": nil}), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, start(map[string]any{"code_challenge": "short"}), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, start(map[string]any{"provider": nil}), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, sa.post(t, "/api/v1/auth/oauth/start", "application/json", "[1,2"), 400,
			"invalid_request", "invalid_request")
		requireOAuthError(t, sa.post(t, "/api/v1/auth/oauth/start", "application/json",
			`{"provider":"`+strings.Repeat("x", 9000)+`"}`), 413, "payload_too_large", "invalid_request")
	})

	t.Run("forged and replayed state", func(t *testing.T) {
		code, state, verifier := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		requireOAuthError(t, sa.oauthToken(t, code, "forged"+state[6:], verifier), 400, "invalid_grant", "invalid_grant")
		requireOAuthError(t, sa.oauthToken(t, code, "!!", verifier), 400, "invalid_grant", "invalid_grant")
		require.Equal(t, 200, sa.oauthToken(t, code, state, verifier).status)
		requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 400, "invalid_grant", "invalid_grant")
	})

	t.Run("wrong code_verifier", func(t *testing.T) {
		exchanges := sa.idp.Exchanges()
		code, state, _ := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		other, _ := pkce(t)
		r := sa.oauthToken(t, code, state, other)
		requireOAuthError(t, r, 400, "invalid_grant", "invalid_grant")
		require.Contains(t, r.body["error_description"], "code_verifier")
		require.Equal(t, exchanges, sa.idp.Exchanges(), "a wrong verifier never reaches the provider")
	})

	t.Run("malformed code_verifier spends the state", func(t *testing.T) {
		exchanges := sa.idp.Exchanges()
		code, state, verifier := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		r := sa.oauthToken(t, code, state, "short")
		requireOAuthError(t, r, 400, "invalid_request", "invalid_request")
		require.Contains(t, r.body["error_description"], "code_verifier")
		requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 400, "invalid_grant", "invalid_grant")
		code, state, verifier = sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		requireOAuthError(t, sa.oauthToken(t, code, state, ""), 400, "invalid_request", "invalid_request")
		requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 400, "invalid_grant", "invalid_grant")
		require.Equal(t, exchanges, sa.idp.Exchanges(), "nothing reached the provider")
	})

	t.Run("code refused by the provider", func(t *testing.T) {
		_, state, verifier := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		requireOAuthError(t, sa.oauthToken(t, "made-up-code", state, verifier), 400, "invalid_grant", "invalid_grant")
	})

	t.Run("accounts", func(t *testing.T) {
		for _, tc := range []struct {
			email, code, oauth string
			status             int
		}{
			{"nobody@example.com", "account_required", "access_denied", 403},
			{"multi@example.com", "org_selection_required", "access_denied", 409},
			{"sus@example.com", "account_suspended", "access_denied", 403},
		} {
			code, state, verifier := sa.oauthLogin(t, tc.email, "com.example.app:/oauth2redirect")
			requireOAuthError(t, sa.oauthToken(t, code, state, verifier), tc.status, tc.code, tc.oauth)
		}
		var users int
		require.NoError(t, sa.db.Pool.QueryRow(ctx, `select count(*) from users where email = 'nobody@example.com'`).Scan(&users))
		require.Zero(t, users, "no account is ever created")
	})

	t.Run("unverified e-mail", func(t *testing.T) {
		sa.idp.SetEmailVerified("solo@example.com", false)
		defer sa.idp.SetEmailVerified("solo@example.com", true)
		code, state, verifier := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 400, "access_denied", "access_denied")
	})

	t.Run("ID token with the wrong nonce", func(t *testing.T) {
		sa.idp.SetWrongNonce(true)
		defer sa.idp.SetWrongNonce(false)
		code, state, verifier := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 400, "invalid_grant", "invalid_grant")
	})

	t.Run("provider down", func(t *testing.T) {
		code, state, verifier := sa.oauthLogin(t, "solo@example.com", "com.example.app:/oauth2redirect")
		sa.idp.SetDown(true)
		defer sa.idp.SetDown(false)
		requireOAuthError(t, sa.oauthToken(t, code, state, verifier), 503, "service_unavailable", "temporarily_unavailable")
	})
	require.Equal(t, 1, sa.signedInKeys(t), "only the one good exchange issued a key")
}

// browser is a cookie-keeping HTTP client that does not follow redirects,
// standing in for a person's browser on the approval page.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, target string, form url.Values, headers ...string) (*http.Response, string) {
	b.t.Helper()
	if strings.HasPrefix(target, "/") {
		target = b.base + target
	}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.base)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r, err := b.c.Do(req)
	require.NoError(b.t, err)
	defer r.Body.Close()
	raw, err := io.ReadAll(r.Body)
	require.NoError(b.t, err)
	return r, string(raw)
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	orgRadio  = regexp.MustCompile(`name="org_id" value="([^"]+)"`)
)

// signIn goes through the page's sign-in at the provider and returns the
// page the callback leads to.
func (b *browser) signIn(sa *signInApp, userCode, email string) (*http.Response, string) {
	b.t.Helper()
	login := "/device/login"
	if userCode != "" {
		login += "?user_code=" + url.QueryEscape(userCode)
	}
	r, _ := b.do("GET", login, nil)
	require.Equal(b.t, 303, r.StatusCode)
	cookie := r.Header.Get("Set-Cookie")
	require.Contains(b.t, cookie, "gw_approval_login=")
	require.Contains(b.t, cookie, "HttpOnly")
	require.Contains(b.t, cookie, "SameSite=Lax")
	require.Contains(b.t, strings.ToLower(cookie), "path=/device")
	back, err := sa.idp.Login(r.Header.Get("Location"), email)
	require.NoError(b.t, err)
	return b.do("GET", back.String(), nil)
}

// TestApprovalPage drives the approval page as a browser would, over HTTP:
// sign in at the provider, confirm, approve; and its defences.
func TestApprovalPage(t *testing.T) {
	sa := startSignInApp(t)
	_, teamID := newUser(t, sa.dbURL, "dee@example.com", "Dee's Team")
	dc := sa.deviceCode(t)
	userCode := dc["user_code"].(string)
	b := newBrowser(t, sa.base)

	r, page := b.do("GET", dc["verification_uri_complete"].(string), nil)
	require.Equal(t, 200, r.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
	require.Contains(t, r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "DENY", r.Header.Get("X-Frame-Options"))
	require.Equal(t, "same-origin", r.Header.Get("Referrer-Policy"))
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	require.Contains(t, page, `href="/device/login?user_code=`+userCode+`"`)

	r, page = b.signIn(sa, userCode, "dee@example.com")
	require.Equal(t, 303, r.StatusCode, page)
	require.Equal(t, sa.base+"/device?user_code="+userCode, r.Header.Get("Location"))
	session := strings.Join(r.Header.Values("Set-Cookie"), "\n")
	require.Regexp(t, `gw_approval=[A-Za-z0-9_-]{43}; max-age=900; path=/device; HttpOnly; SameSite=Lax`, session)
	require.NotContains(t, session, "Secure", "not behind TLS here")

	r, page = b.do("GET", r.Header.Get("Location"), nil)
	require.Equal(t, 200, r.StatusCode, page)
	require.Contains(t, page, userCode)
	require.Contains(t, page, "dee@example.com")
	require.Contains(t, page, "Dee&#39;s Team")
	csrf := csrfField.FindStringSubmatch(page)[1]
	orgs := orgRadio.FindAllStringSubmatch(page, -1)
	require.Len(t, orgs, 2, "the personal organization and the team")
	require.NotContains(t, page, " checked", "with several organizations the person chooses")

	form := url.Values{"csrf": {csrf}, "user_code": {userCode}, "org_id": {teamID}, "decision": {"approve"}}
	t.Run("CSRF", func(t *testing.T) {
		bad := url.Values{"user_code": {userCode}, "org_id": {teamID}, "decision": {"approve"}}
		r, _ := b.do("POST", "/device/decide", bad)
		require.Equal(t, 403, r.StatusCode, "no token")
		bad.Set("csrf", csrf[:40]+"xyz")
		r, _ = b.do("POST", "/device/decide", bad)
		require.Equal(t, 403, r.StatusCode, "a wrong token")
		r, _ = b.do("POST", "/device/decide", form, "Origin", "https://evil.example")
		require.Equal(t, 403, r.StatusCode, "another origin")
		r, _ = newBrowser(t, sa.base).do("POST", "/device/decide", form)
		require.Equal(t, 401, r.StatusCode, "no session")
	})
	t.Run("someone else's organization", func(t *testing.T) {
		other := admin(t, sa.dbURL, "org", "create", "--name", "Not Dee's")["id"].(string)
		f := url.Values{"csrf": {csrf}, "user_code": {userCode}, "org_id": {other}, "decision": {"approve"}}
		r, page := b.do("POST", "/device/decide", f)
		require.Equal(t, 403, r.StatusCode)
		require.Contains(t, page, "not a member")
	})
	requireOAuthError(t, sa.pollDevice(t, dc["device_code"].(string)), 400, "authorization_pending", "authorization_pending")

	r, page = b.do("POST", "/device/decide", form)
	require.Equal(t, 200, r.StatusCode, page)
	require.Contains(t, page, "Approved")
	require.Contains(t, page, "Dee&#39;s Team")
	tok := sa.pollDevice(t, dc["device_code"].(string))
	require.Equal(t, 200, tok.status, "%s", tok.raw)
	require.Equal(t, teamID, tok.body["org"].(map[string]any)["id"])
	require.Equal(t, "member", tok.body["org"].(map[string]any)["role"])

	r, page = b.do("POST", "/device/decide", form)
	require.Equal(t, 404, r.StatusCode, "a decided code cannot be decided again")
	require.Contains(t, page, "unknown, has expired or was already used")

	t.Run("decline", func(t *testing.T) {
		dc := sa.deviceCode(t)
		r, page := b.do("GET", "/device", nil)
		require.Equal(t, 200, r.StatusCode)
		require.Contains(t, page, `name="user_code"`, "a signed-in person enters a code")
		r, page = b.do("GET", "/device?user_code="+url.QueryEscape(strings.ToLower(dc["user_code"].(string))), nil)
		require.Equal(t, 200, r.StatusCode, page)
		r, page = b.do("POST", "/device/decide", url.Values{"csrf": {csrf}, "user_code": {dc["user_code"].(string)},
			"decision": {"deny"}})
		require.Equal(t, 200, r.StatusCode, page)
		require.Contains(t, page, "Declined")
		requireOAuthError(t, sa.pollDevice(t, dc["device_code"].(string)), 400, "access_denied", "access_denied")
	})

	t.Run("unknown and malformed codes", func(t *testing.T) {
		r, page := b.do("GET", "/device?user_code=BBBB-BBBB", nil)
		require.Equal(t, 404, r.StatusCode)
		require.Contains(t, page, "unknown")
		r, _ = b.do("GET", "/device?user_code=hello", nil)
		require.Equal(t, 400, r.StatusCode)
	})

	t.Run("sign-in callback defences", func(t *testing.T) {
		// A callback finished in a browser that did not start the sign-in.
		victim := newBrowser(t, sa.base)
		r, _ := b.do("GET", "/device/login", nil)
		back, err := sa.idp.Login(r.Header.Get("Location"), "dee@example.com")
		require.NoError(t, err)
		r, page := victim.do("GET", back.String(), nil)
		require.Equal(t, 400, r.StatusCode, page)
		require.Contains(t, page, "not valid")
		// Nor in one that has a sign-in of its own under way; that spends
		// the state, so the browser that started it cannot finish it either.
		r, _ = victim.do("GET", "/device/login", nil)
		require.Equal(t, 303, r.StatusCode)
		r, _ = victim.do("GET", back.String(), nil)
		require.Equal(t, 400, r.StatusCode)
		r, _ = b.do("GET", back.String(), nil)
		require.Equal(t, 400, r.StatusCode)
		r, _ = victim.do("GET", "/device", nil)
		require.NotContains(t, r.Header.Get("Set-Cookie"), "gw_approval=", "the victim got no session")

		r, _ = b.do("GET", "/device/callback?state=forged-state-forged-state-forged&code=x", nil)
		require.Equal(t, 400, r.StatusCode)
		r, _ = b.do("GET", "/device/callback?error=access_denied&state=x", nil)
		require.Equal(t, 400, r.StatusCode)

		stranger := newBrowser(t, sa.base)
		r, page = stranger.signIn(sa, "", "stranger@example.com")
		require.Equal(t, 403, r.StatusCode)
		require.Contains(t, page, "No account")
	})

	t.Run("sign out", func(t *testing.T) {
		r, _ := b.do("POST", "/device/logout", url.Values{"csrf": {csrf}})
		require.Equal(t, 303, r.StatusCode)
		r, page := b.do("GET", "/device", nil)
		require.Equal(t, 200, r.StatusCode)
		require.Contains(t, page, `id="sign-in"`)
		r, _ = b.do("POST", "/device/decide", form)
		require.Equal(t, 401, r.StatusCode, "the old session is gone")
	})
	requireNoSecretsLogged(t, sa, dc["device_code"].(string), userCode, tok.body["access_token"].(string), csrf)
}

// TestApprovalPageRateLimitsCarryRetryAfter: the page's code lookups and
// decisions, limited per person, answer 429 with Retry-After like every
// 429 of the gateway.
func TestApprovalPageRateLimitsCarryRetryAfter(t *testing.T) {
	sa := startSignInApp(t, signInOptions{ratePerMinute: 2})
	newUser(t, sa.dbURL, "fay@example.com", "")
	b := newBrowser(t, sa.base)
	r, page := b.signIn(sa, "", "fay@example.com")
	require.Equal(t, 303, r.StatusCode, page)
	r, page = b.do("GET", "/device", nil)
	require.Equal(t, 200, r.StatusCode, page)
	csrf := csrfField.FindStringSubmatch(page)[1]
	requireRetryAfter := func(r *http.Response, page string) {
		t.Helper()
		require.Equal(t, 429, r.StatusCode, page)
		require.Regexp(t, `^[1-9][0-9]*$`, r.Header.Get("Retry-After"), "whole seconds, at least 1")
	}
	for range 2 {
		r, _ = b.do("GET", "/device?user_code=BBBB-BBBB", nil)
		require.Equal(t, 404, r.StatusCode)
		require.Empty(t, r.Header.Get("Retry-After"))
	}
	requireRetryAfter(b.do("GET", "/device?user_code=BBBB-BBBB", nil))
	requireRetryAfter(b.do("POST", "/device/decide", url.Values{"csrf": {csrf}, "user_code": {"BBBB-BBBB"},
		"decision": {"deny"}}))
}

// TestApprovalPostsFromAnotherOriginAreRefusedFirst: a form posted from
// another origin is refused before the session is looked up, with or
// without one.
func TestApprovalPostsFromAnotherOriginAreRefusedFirst(t *testing.T) {
	sa := startSignInApp(t)
	newUser(t, sa.dbURL, "gus@example.com", "")
	evil := []string{"Origin", "https://evil.example"}
	stranger := newBrowser(t, sa.base)
	r, page := stranger.do("POST", "/device/decide", url.Values{"user_code": {"BBBB-BBBB"}, "decision": {"deny"}}, evil...)
	require.Equal(t, 403, r.StatusCode, "not 401: the missing session is never looked at")
	require.Contains(t, page, "Form expired")
	r, _ = stranger.do("POST", "/device/logout", url.Values{}, evil...)
	require.Equal(t, 403, r.StatusCode)
	require.Empty(t, r.Header.Values("Set-Cookie"))

	b := newBrowser(t, sa.base)
	r, page = b.signIn(sa, "", "gus@example.com")
	require.Equal(t, 303, r.StatusCode, page)
	r, page = b.do("GET", "/device", nil)
	require.Equal(t, 200, r.StatusCode, page)
	csrf := csrfField.FindStringSubmatch(page)[1]
	r, _ = b.do("POST", "/device/logout", url.Values{"csrf": {csrf}}, evil...)
	require.Equal(t, 403, r.StatusCode)
	r, page = b.do("GET", "/device", nil)
	require.Equal(t, 200, r.StatusCode)
	require.Contains(t, page, `name="user_code"`, "still signed in")
	r, page = b.do("POST", "/device/decide", url.Values{"csrf": {csrf}, "user_code": {"BBBB-BBBB"},
		"decision": {"deny"}}, "Origin", "null")
	require.Equal(t, 403, r.StatusCode, page)
}

// TestSignedInKeyLifecycle: the holder cannot revoke it; a revoke or the end
// of the membership refuses the next request but not a running stream;
// suspension is account_suspended.
func TestSignedInKeyLifecycle(t *testing.T) {
	sa := startSignInApp(t)
	ctx := context.Background()
	userID, teamID := newUser(t, sa.dbURL, "eli@example.com", "Eli's Team")
	issue := func(org string) (key, keyID string) {
		t.Helper()
		dc := sa.deviceCode(t)
		admin(t, sa.dbURL, "device", "approve", "--user-code", dc["user_code"].(string), "--user", userID, "--org", org)
		r := sa.pollDevice(t, dc["device_code"].(string))
		require.Equal(t, 200, r.status, "%s", r.raw)
		return r.body["access_token"].(string), r.body["key_id"].(string)
	}

	t.Run("the holder cannot revoke it", func(t *testing.T) {
		key, keyID := issue(teamID)
		r := sa.call(t, "DELETE", "/api/v1/keys/"+keyID, key, nil)
		require.Equal(t, 400, r.status, "%s", r.raw)
		require.Equal(t, "invalid_request", r.body["code"])
		require.Contains(t, r.body["error"], "cannot be revoked by its holder")
		dev := admin(t, sa.dbURL, "key", "create", "--user", userID, "--org", teamID)
		r = sa.call(t, "DELETE", "/api/v1/keys/"+keyID, dev["access_token"].(string), nil)
		require.Equal(t, 400, r.status, "not with another key of the same person either")
		require.Equal(t, 200, sa.call(t, "GET", "/api/v1/me", key, nil).status, "the key still works")
	})

	t.Run("revoked: a running stream finishes, the next request is refused", func(t *testing.T) {
		key, keyID := issue(teamID)
		body := `{"model":"mira","stream":true,"messages":[{"role":"user","content":"hi [[sim:tokens=40]] [[sim:itl_ms=20]]"}]}`
		req, err := http.NewRequest("POST", sa.base+"/api/v1/chat", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, 200, res.StatusCode)
		rd := bufio.NewReader(res.Body)
		first, err := rd.ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(first, "data: "))
		admin(t, sa.dbURL, "key", "revoke", "--key-id", keyID)
		require.Eventually(t, func() bool { return sa.call(t, "GET", "/api/v1/me", key, nil).status == 401 },
			2*time.Second, 10*time.Millisecond, "the next request is refused")
		rest, err := io.ReadAll(rd)
		require.NoError(t, err)
		require.Contains(t, string(rest), "data: [DONE]", "the stream already running is not cut")
	})

	t.Run("membership ended", func(t *testing.T) {
		key, _ := issue(teamID)
		require.Equal(t, 200, sa.call(t, "GET", "/api/v1/me", key, nil).status)
		_, err := sa.db.Pool.Exec(ctx, `delete from memberships where user_id = $1 and org_id = $2`, userID, teamID)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return sa.call(t, "GET", "/api/v1/me", key, nil).status == 401 },
			2*time.Second, 10*time.Millisecond)
	})

	t.Run("suspended", func(t *testing.T) {
		key, _ := issue(mustPersonalOrg(t, sa, userID))
		admin(t, sa.dbURL, "user", "suspend", "--user", userID)
		require.Eventually(t, func() bool {
			r := sa.call(t, "GET", "/api/v1/me", key, nil)
			return r.status == 403 && r.body["code"] == "account_suspended"
		}, 2*time.Second, 10*time.Millisecond)
		dc := sa.deviceCode(t)
		code, _, stderr := runCLI("admin", "device", "approve", "--user-code", dc["user_code"].(string),
			"--user", userID, "--database-url", sa.dbURL)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "suspended")
	})
}

func mustPersonalOrg(t *testing.T, sa *signInApp, userID string) string {
	t.Helper()
	var org string
	require.NoError(t, sa.db.Pool.QueryRow(context.Background(), `select personal_org_id from users where id = $1`,
		userID).Scan(&org))
	return org
}

// requireNoSecretsLogged checks that no log line carries any of the
// secrets (keys, device and user codes, states, verifiers, codes, e-mail
// addresses).
func requireNoSecretsLogged(t *testing.T, sa *signInApp, secrets ...string) {
	t.Helper()
	logs := sa.logs.String()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		require.NotContains(t, logs, s, "a secret reached the logs")
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["msg"] == "signed-in key issued" {
			for k := range rec {
				switch k {
				case "time", "level", "msg", "flow", "key_id", "expires_at":
				default:
					t.Fatalf("the issue line carries %q", k)
				}
			}
		}
	}
}

func TestSignInRoutesNeedNoKey(t *testing.T) {
	sa := startSignInApp(t)
	for _, path := range []string{"/api/v1/device/code", "/api/v2/device/code"} {
		r := sa.post(t, path, "", "", "Authorization", "Bearer gw_live_bogus")
		require.Equal(t, 200, r.status, "%s: public, whatever Authorization says", path)
	}
	r := sa.call(t, "GET", "/api/v1/device/code", "", nil)
	require.Equal(t, 405, r.status)
}
