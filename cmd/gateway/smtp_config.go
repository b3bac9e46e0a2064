package main

import (
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/edgegw/gateway/control/outbox"
	"github.com/edgegw/gateway/hotpath"
)

// smtpFile is the smtp section of the config file: where invitation
// messages are sent. The password is read from the environment variable it
// names, never from the file. Without a host, messages wait in the outbox.
type smtpFile struct {
	Host        string        `yaml:"host"`
	Port        int           `yaml:"port"`
	StartTLS    string        `yaml:"starttls"`
	Username    string        `yaml:"username"`
	PasswordEnv string        `yaml:"password_env"`
	From        string        `yaml:"from"`
	Poll        time.Duration `yaml:"poll_interval"`
	Timeout     time.Duration `yaml:"timeout"`
	MaxAttempts int           `yaml:"max_attempts"`
	Backoff     time.Duration `yaml:"backoff"`
	MaxBackoff  time.Duration `yaml:"max_backoff"`
}

// mailSettings turns the smtp section and public_base_url into their
// settings; errors name the setting.
func mailSettings(f smtpFile, publicBaseURL, signInURL string, lookupEnv func(string) (string, bool)) (outbox.Config, string, error) {
	cfg := outbox.Config{Host: f.Host, Port: f.Port, StartTLS: f.StartTLS, Username: f.Username, From: f.From,
		Poll: f.Poll, Timeout: f.Timeout, MaxAttempts: f.MaxAttempts, Backoff: f.Backoff, MaxBackoff: f.MaxBackoff}
	if f.PasswordEnv != "" {
		v, ok := lookupEnv(f.PasswordEnv)
		if !ok || v == "" {
			return cfg, "", fmt.Errorf("config smtp.password_env: the environment variable %s is not set", f.PasswordEnv)
		}
		cfg.Password = v
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", fmt.Errorf("config %w", err)
	}
	base := publicBaseURL
	if base == "" {
		base = signInURL
	}
	if base == "" {
		base = "http://localhost:8080"
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, "", fmt.Errorf("config public_base_url: %q is not an http(s) URL", hotpath.RedactURL(base))
	}
	return cfg, base, nil
}

func loadMail(fc fileConfig, signInURL string) (outbox.Config, string, error) {
	return mailSettings(fc.SMTP, fc.PublicBaseURL, signInURL, os.LookupEnv)
}
