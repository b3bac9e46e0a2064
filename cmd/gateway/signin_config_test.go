package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/control"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestSignInConfig(t *testing.T) {
	t.Setenv("CORP_OIDC_SECRET", "s3cret")
	t.Setenv("CORP_IOS_SECRET", "ios-s3cret")
	st, err := loadSettings(writeConfig(t, `
sign_in:
  public_url: https://gateway.example.com
  rate_limit_per_minute: 20
  device:
    code_lifetime: 10m
    poll_interval: 3s
  oauth:
    state_lifetime: 5m
  approval:
    provider: corp
    session_lifetime: 30m
  providers:
    corp:
      issuer: https://login.example.com
      client_id: gateway
      client_secret_env: CORP_OIDC_SECRET
      scopes: [openid, email]
      redirect_uris:
        - com.example.app:/oauth2redirect
        - http://127.0.0.1/callback
        - uri: com.googleusercontent.apps.123:/oauth2redirect
          client_id: 123-ios.apps.googleusercontent.com
          client_secret_env: CORP_IOS_SECRET
    other:
      issuer: https://id.example.org/realms/main
      client_id: gw
`))
	require.NoError(t, err)
	c := st.SignIn
	require.Equal(t, "https://gateway.example.com", c.PublicURL)
	require.Equal(t, 20, c.RateLimit)
	require.Equal(t, 10*time.Minute, c.DeviceCodeLifetime)
	require.Equal(t, 3*time.Second, c.PollInterval)
	require.Equal(t, 5*time.Minute, c.StateLifetime)
	require.Equal(t, 30*time.Minute, c.SessionLifetime)
	require.Equal(t, "corp", c.ApprovalProvider)
	require.Equal(t, control.OIDCProvider{Issuer: "https://login.example.com", ClientID: "gateway", ClientSecret: "s3cret",
		Scopes: []string{"openid", "email"}, RedirectURIs: []control.RedirectURI{
			{URI: "com.example.app:/oauth2redirect"},
			{URI: "http://127.0.0.1/callback"},
			{URI: "com.googleusercontent.apps.123:/oauth2redirect", ClientID: "123-ios.apps.googleusercontent.com",
				ClientSecret: "ios-s3cret"},
		}}, c.Providers["corp"])
	require.Empty(t, c.Providers["other"].ClientSecret, "a public client")
	require.Equal(t, []string{"openid", "email", "profile"}, c.Providers["other"].Scopes)

	st, err = loadSettings(writeConfig(t, "tiers: {}\n"))
	require.NoError(t, err)
	require.Empty(t, st.SignIn.Providers, "sign-in needs no configuration to start")
	require.Equal(t, 5*time.Second, st.SignIn.PollInterval, "defaults are filled in")
}

func TestSignInConfigErrors(t *testing.T) {
	t.Setenv("SET_SECRET", "x")
	provider := func(extra string) string {
		return "sign_in:\n  providers:\n    corp:\n      issuer: https://login.example.com\n      client_id: gw\n" + extra
	}
	cases := map[string]struct{ body, want string }{
		"missing secret": {provider("      client_secret_env: UNSET_SECRET_FOR_TEST\n"),
			"sign_in.providers.corp.client_secret_env: the environment variable UNSET_SECRET_FOR_TEST is not set"},
		"plain http issuer": {"sign_in:\n  providers:\n    corp:\n      issuer: http://login.example.com\n      client_id: gw\n",
			"sign_in.providers.corp.issuer"},
		"no client id": {"sign_in:\n  providers:\n    corp:\n      issuer: https://login.example.com\n",
			"sign_in.providers.corp.client_id"},
		"bad provider name": {"sign_in:\n  providers:\n    Corp Login:\n      issuer: https://login.example.com\n      client_id: gw\n",
			"sign_in.providers.Corp Login"},
		"relative redirect":  {provider("      redirect_uris: [/cb]\n"), "redirect_uris[0]"},
		"duplicate redirect": {provider("      redirect_uris: [app:/cb, app:/cb]\n"), "listed twice"},
		"redirect secret env": {provider("      redirect_uris:\n        - {uri: 'app:/cb', client_id: ios, client_secret_env: UNSET_SECRET_FOR_TEST}\n"),
			"redirect_uris[0].client_secret_env"},
		"redirect unknown key": {provider("      redirect_uris:\n        - {uri: 'app:/cb', secret: x}\n"), "field secret not found"},
		"redirect no uri":      {provider("      redirect_uris:\n        - {client_id: x}\n"), "uri must be set"},
		"unknown field":        {provider("      client_secret: inline\n"), "client_secret"},
		"unknown approval":     {provider("  approval:\n    provider: other\n"), "approval.provider"},
		"fractional interval":  {"sign_in:\n  device:\n    poll_interval: 1500ms\n", "device.poll_interval"},
		"long code lifetime":   {"sign_in:\n  device:\n    code_lifetime: 3h\n", "device.code_lifetime"},
		"bad public url":       {"sign_in:\n  public_url: gateway.example.com\n", "public_url"},
		"approval without providers": {"sign_in:\n  approval:\n    provider: corp\n",
			"sign_in.approval.provider"},
		"scopes without openid": {provider("      scopes: [email]\n"), "scopes"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := loadSettings(writeConfig(t, c.body))
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.True(t, strings.HasPrefix(err.Error(), "config"), err.Error())
			require.NotContains(t, err.Error(), "inline", "a secret in the file is never echoed")
		})
	}
}
