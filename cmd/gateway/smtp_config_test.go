package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMailSettings(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	cfg, base, err := mailSettings(smtpFile{}, "", "", env(nil))
	require.NoError(t, err)
	require.False(t, cfg.Enabled(), "no host: messages wait in the outbox")
	require.Equal(t, "http://localhost:8080", base)

	_, base, err = mailSettings(smtpFile{}, "", "https://signin.example.test", env(nil))
	require.NoError(t, err)
	require.Equal(t, "https://signin.example.test", base, "the sign-in public URL is the fallback")

	f := smtpFile{Host: "smtp.example.test", Username: "gw", PasswordEnv: "SMTP_PW", From: "inv@example.test"}
	cfg, _, err = mailSettings(f, "https://console.example.test", "", env(map[string]string{"SMTP_PW": "s3cret"}))
	require.NoError(t, err)
	require.Equal(t, "s3cret", cfg.Password)
	require.Equal(t, 587, cfg.Port)

	_, _, err = mailSettings(f, "", "", env(nil))
	require.ErrorContains(t, err, "smtp.password_env")
	_, _, err = mailSettings(smtpFile{Host: "h"}, "", "", env(nil))
	require.ErrorContains(t, err, "smtp.from")
	_, _, err = mailSettings(smtpFile{}, "ftp://x", "", env(nil))
	require.ErrorContains(t, err, "public_base_url")
}
