package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

// chromiumPath finds the browser the approval-page tests drive: CHROMIUM_PATH
// (which `make test` exports), else chromium on PATH. Without one the test
// skips, except under CI=true, where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed under CI: run the tests with `make test`, which installs the Debian package chromium")
	}
	t.Skip("chromium is not installed; `make test` installs the Debian package chromium when run as root")
	return ""
}

// headlessChromium starts a headless Chromium for the test and returns a
// context that drives one tab of it.
func headlessChromium(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(ctx), "cannot start chromium")
	return ctx
}

// browserDo runs steps in the browser, each group bounded by 30 seconds;
// on failure it reports where the browser is and what it shows.
func browserDo(t *testing.T, browser context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(browser, chromedp.Location())
		page, _ := chromedp.Run(browser, chromedp.OuterHTML(chromedp.CSS(`main`)))
		t.Fatalf("browser: %v\nat %s showing:\n%s", err, loc, page)
	}
}

// TestApprovalPageInChromium signs a person in at the test identity
// provider in a real browser, approves a device login for the organization
// they choose, and sees the CLI side (x/oauth2) receive its key; then
// declines a second login from the same browser.
func TestApprovalPageInChromium(t *testing.T) {
	sa := startSignInApp(t)
	_, teamID := newUser(t, sa.dbURL, "fay@example.com", "Fay's Team")
	browser := headlessChromium(t)
	cfg := deviceClient(sa.base)
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInParams // a public client: no secret to send

	// Approve.
	da, err := cfg.DeviceAuth(context.Background())
	require.NoError(t, err)
	ch := sa.startPolling(t, cfg, da)
	browserDo(t, browser,
		chromedp.Navigate(da.VerificationURIComplete),
		chromedp.WaitVisible(chromedp.CSS(`#sign-in`)),
		chromedp.Click(chromedp.CSS(`#sign-in`)),
		// The identity provider's own sign-in form.
		chromedp.WaitVisible(chromedp.CSS(`#email`)),
		chromedp.SendKeys(chromedp.CSS(`#email`), "fay@example.com"),
		chromedp.Click(chromedp.CSS(`#idp-sign-in`)),
		// Back on the approval page, signed in.
		chromedp.WaitVisible(chromedp.CSS(`#user-code`)),
	)
	shown, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#user-code`)))
	require.NoError(t, err)
	browserDo(t, browser,
		chromedp.Click(chromedp.CSS(`input[name="org_id"][value="`+teamID+`"]`)),
		chromedp.Click(chromedp.CSS(`#approve`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)),
	)
	result, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#result`)))
	require.NoError(t, err)
	require.Equal(t, da.UserCode, strings.TrimSpace(shown), "the page shows the code the device shows")
	require.Contains(t, result, "Approved")
	require.Contains(t, result, "Fay's Team")

	res := waitToken(t, ch)
	require.NoError(t, res.err)
	org := res.tok.Extra("org").(map[string]any)
	require.Equal(t, teamID, org["id"], "bound to the organization chosen on the page")
	require.Equal(t, "Fay's Team", org["name"])
	key := res.tok.AccessToken
	require.Equal(t, 200, sa.call(t, "GET", "/api/v1/me", key, nil).status)

	// Decline, typing the code into the page this time.
	da2, err := cfg.DeviceAuth(context.Background())
	require.NoError(t, err)
	ch2 := sa.startPolling(t, cfg, da2)
	browserDo(t, browser,
		chromedp.Navigate(da2.VerificationURI),
		chromedp.WaitVisible(chromedp.CSS(`#user_code`)),
		chromedp.SendKeys(chromedp.CSS(`#user_code`), strings.ToLower(da2.UserCode)),
		chromedp.Click(chromedp.CSS(`#continue`)),
		chromedp.WaitVisible(chromedp.CSS(`#user-code`)),
	)
	shown, err = chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#user-code`)))
	require.NoError(t, err)
	browserDo(t, browser,
		chromedp.Click(chromedp.CSS(`#deny`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)),
	)
	declined, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#result`)))
	require.NoError(t, err)
	require.Equal(t, da2.UserCode, strings.TrimSpace(shown))
	require.Contains(t, declined, "Declined")
	res = waitToken(t, ch2)
	var re *oauth2.RetrieveError
	require.ErrorAs(t, res.err, &re)
	require.Equal(t, "access_denied", re.ErrorCode)
	require.Equal(t, 1, sa.signedInKeys(t))
	requireNoSecretsLogged(t, sa, key, da.DeviceCode, da2.DeviceCode, da.UserCode, da2.UserCode, "fay@example.com")
}
