package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgegw/gateway/control"
)

// signInFile is the sign_in section of the config file: device login,
// native OAuth and the approval page. Client secrets are read from the
// environment variables it names, never from the file.
type signInFile struct {
	PublicURL          string `yaml:"public_url"`
	RateLimitPerMinute int    `yaml:"rate_limit_per_minute"`
	Device             struct {
		CodeLifetime time.Duration `yaml:"code_lifetime"`
		PollInterval time.Duration `yaml:"poll_interval"`
	} `yaml:"device"`
	OAuth struct {
		StateLifetime time.Duration `yaml:"state_lifetime"`
	} `yaml:"oauth"`
	Approval struct {
		Provider        string        `yaml:"provider"`
		SessionLifetime time.Duration `yaml:"session_lifetime"`
	} `yaml:"approval"`
	Providers map[string]oidcProviderFile `yaml:"providers"`
}

// oidcProviderFile is one OpenID Connect identity provider.
type oidcProviderFile struct {
	Issuer          string             `yaml:"issuer"`
	ClientID        string             `yaml:"client_id"`
	ClientSecretEnv string             `yaml:"client_secret_env"`
	Scopes          []string           `yaml:"scopes"`
	RedirectURIs    []redirectURIEntry `yaml:"redirect_uris"`
}

// redirectURIEntry is an allowed native redirect URI: a plain string, or a
// mapping {uri, client_id, client_secret_env} when the URI selects a client
// of its own (the iOS or Android client some providers issue).
type redirectURIEntry struct {
	URI             string
	ClientID        string
	ClientSecretEnv string
}

func (r *redirectURIEntry) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		r.URI = n.Value
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: %s must be a string", v.Line, k.Value)
			}
			switch k.Value {
			case "uri":
				r.URI = v.Value
			case "client_id":
				r.ClientID = v.Value
			case "client_secret_env":
				r.ClientSecretEnv = v.Value
			default:
				return fmt.Errorf("line %d: field %s not found in a redirect URI (known: uri, client_id, client_secret_env)",
					k.Line, k.Value)
			}
		}
		if r.URI == "" {
			return fmt.Errorf("line %d: uri must be set", n.Line)
		}
		return nil
	}
	return fmt.Errorf("line %d: want a redirect URI or {uri, client_id, client_secret_env}", n.Line)
}

// providerName is what a provider may be called: it is the value clients
// send as provider.
var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// signInSettings turns the section into the control plane's configuration,
// reading client secrets from the environment, and validates it. lookupEnv
// is os.LookupEnv outside tests. Errors name the setting.
func (f signInFile) signInSettings(lookupEnv func(string) (string, bool)) (control.SignInConfig, error) {
	cfg := control.SignInConfig{
		PublicURL:          f.PublicURL,
		RateLimit:          f.RateLimitPerMinute,
		DeviceCodeLifetime: f.Device.CodeLifetime,
		PollInterval:       f.Device.PollInterval,
		StateLifetime:      f.OAuth.StateLifetime,
		SessionLifetime:    f.Approval.SessionLifetime,
		ApprovalProvider:   f.Approval.Provider,
		Providers:          map[string]control.OIDCProvider{},
	}
	secret := func(setting, env string) (string, error) {
		if env == "" {
			return "", nil
		}
		v, ok := lookupEnv(env)
		if !ok || v == "" {
			return "", fmt.Errorf("%s: the environment variable %s is not set", setting, env)
		}
		return v, nil
	}
	for name, pf := range f.Providers {
		at := "config sign_in.providers." + name
		if !providerName.MatchString(name) {
			return cfg, fmt.Errorf("%s: a provider name is 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit", at)
		}
		p := control.OIDCProvider{Issuer: pf.Issuer, ClientID: pf.ClientID, Scopes: pf.Scopes}
		var err error
		if p.ClientSecret, err = secret(at+".client_secret_env", pf.ClientSecretEnv); err != nil {
			return cfg, err
		}
		for i, r := range pf.RedirectURIs {
			ru := control.RedirectURI{URI: r.URI, ClientID: r.ClientID}
			if ru.ClientSecret, err = secret(fmt.Sprintf("%s.redirect_uris[%d].client_secret_env", at, i),
				r.ClientSecretEnv); err != nil {
				return cfg, err
			}
			p.RedirectURIs = append(p.RedirectURIs, ru)
		}
		cfg.Providers[name] = p
	}
	if f.Approval.Provider != "" && len(f.Providers) == 0 {
		return cfg, errors.New("config sign_in.approval.provider: no providers are configured")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config sign_in.%w", err)
	}
	return cfg, nil
}

// loadSignIn is the validation call loadSettings makes for the section.
func loadSignIn(f signInFile) (control.SignInConfig, error) {
	return f.signInSettings(os.LookupEnv)
}

// signInSettings is the sign-in part of the settings.
type signInSettings = control.SignInConfig
