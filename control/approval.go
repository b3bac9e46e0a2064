package control

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"mime"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// The approval page: where a person signs in with the identity provider
// and approves or declines a device login. It is a server-rendered page
// with no script. A person's session lives in a cookie for these paths only
// (HttpOnly, SameSite=Lax, Secure behind TLS) whose hash is stored; forms
// carry a CSRF token derived from the session secret, and a cross-origin
// Origin is refused.
const (
	approvalPath       = "/device"
	approvalLoginPath  = "/device/login"
	approvalReturnPath = "/device/callback"
	approvalDecidePath = "/device/decide"
	approvalLogoutPath = "/device/logout"
	approvalStylePath  = "/device/approval.css"

	sessionCookie = "gw_approval"
	loginCookie   = "gw_approval_login"
)

//go:embed web/approval.html web/approval.css
var webFiles embed.FS

type pageTemplates struct {
	page *template.Template
	css  []byte
}

func mustPageTemplates() *pageTemplates {
	page := template.Must(template.ParseFS(webFiles, "web/approval.html"))
	css, err := webFiles.ReadFile("web/approval.css")
	if err != nil {
		panic(err)
	}
	return &pageTemplates{page: page, css: css}
}

// pageOrg is an organization the person may bind the key to.
type pageOrg struct {
	ID       string
	Name     string
	Role     string
	Personal bool
	Checked  bool
}

// pageData is everything the page template shows. View selects the part:
// signin, enter, confirm, done or error.
type pageData struct {
	View      string
	Title     string
	Message   string
	Error     string
	UserCode  string
	Email     string
	Orgs      []pageOrg
	CSRF      string
	LoginURL  string
	CanSignIn bool
	Approved  bool
	Org       storage.OrgRole
}

func (s *signIn) registerApproval(r Registrar) {
	page := func(name string) hotpath.Access { return hotpath.Access{Name: name, Auth: hotpath.AuthNone} }
	r.Handle(fasthttp.MethodGet, approvalPath, page("approval_page"), s.pageRoute(s.approvalPage))
	r.Handle(fasthttp.MethodGet, approvalLoginPath, page("approval_login"), s.pageRoute(s.approvalLogin))
	r.Handle(fasthttp.MethodGet, approvalReturnPath, page("approval_callback"), s.pageRoute(s.approvalCallback))
	r.Handle(fasthttp.MethodPost, approvalDecidePath, page("approval_decide"), s.pageRoute(s.approvalDecide))
	r.Handle(fasthttp.MethodPost, approvalLogoutPath, page("approval_logout"), s.pageRoute(s.approvalLogout))
	r.Handle(fasthttp.MethodGet, approvalStylePath, page("approval_style"), s.approvalStyle)
}

// pageRoute answers a page handler's unexpected error with an error page
// (people get HTML, not JSON) and logs it with the request id.
func (s *signIn) pageRoute(h func(*fasthttp.RequestCtx, *hotpath.Call) error) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		err := h(ctx, c)
		if err == nil {
			return nil
		}
		status, title, msg := fasthttp.StatusInternalServerError, "Something went wrong",
			"The page could not be served. Try again in a moment."
		if errors.Is(err, context.DeadlineExceeded) {
			status, title = fasthttp.StatusServiceUnavailable, "Temporarily unavailable"
		} else {
			s.log.Error("approval page failed", "request_id", c.IDString(), "route", string(ctx.Path()), "err", err)
		}
		ctx.Response.ResetBody()
		ctx.Response.Header.Del("Location")
		return s.renderError(ctx, status, title, msg)
	}
}

// render writes the page with the headers every approval response carries.
func (s *signIn) render(ctx *fasthttp.RequestCtx, status int, d pageData) error {
	var buf bytes.Buffer
	if err := s.tmpl.page.Execute(&buf, d); err != nil {
		return err
	}
	securityHeaders(ctx)
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(buf.Bytes())
	return nil
}

func securityHeaders(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "+
		"frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make browsers send Origin: null on our own forms
	h.Set("Cache-Control", "no-store")
}

func (s *signIn) renderError(ctx *fasthttp.RequestCtx, status int, title, msg string) error {
	return s.render(ctx, status, pageData{View: "error", Title: title, Message: msg,
		CanSignIn: s.cfg.ApprovalProvider != "", LoginURL: approvalLoginPath})
}

// formExpired refuses a form post from another origin or without the
// session's CSRF token.
func (s *signIn) formExpired(ctx *fasthttp.RequestCtx) error {
	return s.renderError(ctx, fasthttp.StatusForbidden, "Form expired",
		"This form is no longer valid. Open the approval page again.")
}

func (s *signIn) approvalStyle(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
	ctx.SetContentType("text/css; charset=utf-8")
	ctx.SetBody(s.tmpl.css)
	return nil
}

// secure reports whether cookies get the Secure attribute: when people
// reach the gateway over TLS.
func (s *signIn) secure(ctx *fasthttp.RequestCtx) bool {
	u, err := url.Parse(s.publicURL(ctx))
	return err == nil && u.Scheme == "https"
}

func (s *signIn) setCookie(ctx *fasthttp.RequestCtx, name, value string, maxAge time.Duration) {
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(name)
	c.SetValue(value)
	c.SetPath(approvalPath)
	c.SetHTTPOnly(true)
	c.SetSecure(s.secure(ctx))
	c.SetSameSite(fasthttp.CookieSameSiteLaxMode)
	if maxAge > 0 {
		c.SetMaxAge(int(maxAge / time.Second))
	} else {
		c.SetMaxAge(-1) // delete
		c.SetValue("")
	}
	ctx.Response.Header.SetCookie(c)
}

// session returns the signed-in person of the request and the session's
// secret, or ok false.
func (s *signIn) session(ctx *fasthttp.RequestCtx) (userID, secret string, ok bool) {
	secret = string(ctx.Request.Header.Cookie(sessionCookie))
	if !validSecretToken(secret) {
		return "", "", false
	}
	qctx, cancel := queryContext()
	defer cancel()
	userID, err := s.db.ApprovalSessionUser(qctx, hashString(secret))
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			s.log.Warn("cannot read approval session", "err", err)
		}
		return "", "", false
	}
	return userID, secret, true
}

// csrfToken is the form token of a session: an HMAC of the session secret,
// which only the session's own pages can know.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("approval-form"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin refuses a form posted from another origin. Browsers send
// Origin on every POST; a request without one is left to the CSRF token.
func (s *signIn) sameOrigin(ctx *fasthttp.RequestCtx) bool {
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 {
		return true
	}
	u, err := url.Parse(s.publicURL(ctx))
	return err == nil && string(origin) == u.Scheme+"://"+u.Host
}

// approvalPage shows the page: sign in, enter a code, or confirm one.
func (s *signIn) approvalPage(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	raw := string(ctx.QueryArgs().Peek("user_code"))
	code, codeOK := normalizeUserCode(raw)
	userID, secret, signedIn := s.session(ctx)
	if !signedIn {
		d := pageData{View: "signin", Title: "Sign in to approve a device", CanSignIn: s.cfg.ApprovalProvider != "",
			LoginURL: approvalLoginPath}
		if codeOK {
			d.UserCode = formatUserCode(code)
			d.LoginURL += "?user_code=" + url.QueryEscape(d.UserCode)
		}
		return s.render(ctx, fasthttp.StatusOK, d)
	}
	acct, err := s.account(userID)
	if err != nil {
		return err
	}
	enter := pageData{View: "enter", Title: "Approve a device", Email: acct.User.Email, CSRF: csrfToken(secret)}
	if raw == "" {
		return s.render(ctx, fasthttp.StatusOK, enter)
	}
	if !codeOK {
		enter.Error = "That is not a device code: codes are eight letters, like BCDF-GHJK."
		return s.render(ctx, fasthttp.StatusBadRequest, enter)
	}
	if ok, wait := s.limiter.Allow("approval|"+userID, s.now()); !ok {
		setRetryAfter(ctx, wait)
		enter.Error = "Too many codes tried; wait " + wait.Round(time.Second).String() + " and try again."
		return s.render(ctx, fasthttp.StatusTooManyRequests, enter)
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := s.db.PendingDeviceCode(qctx, code); err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		enter.Error = "That code is unknown, has expired or was already used. Check the code your device shows."
		return s.render(ctx, fasthttp.StatusNotFound, enter)
	}
	return s.render(ctx, fasthttp.StatusOK, s.confirmPage(acct, code, secret))
}

func (s *signIn) confirmPage(acct storage.SignInAccount, code, secret string) pageData {
	d := pageData{View: "confirm", Title: "Approve a device", Email: acct.User.Email, UserCode: formatUserCode(code),
		CSRF: csrfToken(secret)}
	for _, o := range acct.Orgs {
		d.Orgs = append(d.Orgs, pageOrg{ID: o.ID, Name: o.Name, Role: string(o.Role),
			Personal: o.ID == acct.User.PersonalOrgID, Checked: len(acct.Orgs) == 1})
	}
	return d
}

func (s *signIn) account(userID string) (storage.SignInAccount, error) {
	qctx, cancel := queryContext()
	defer cancel()
	return s.db.SignInAccountByID(qctx, userID)
}

// approvalLogin starts the page's own sign-in: the authorization code flow
// with PKCE, whose verifier stays on the server, and a state bound to this
// browser by a short-lived cookie, so that a sign-in cannot be finished in
// a browser that did not start it.
func (s *signIn) approvalLogin(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	p := s.providers[s.cfg.ApprovalProvider]
	if p == nil {
		return s.renderError(ctx, fasthttp.StatusServiceUnavailable, "Sign-in is not configured",
			"No identity provider is configured for the approval page. An operator can approve the code with: gateway admin device approve.")
	}
	if ok, wait := s.limiter.Allow("approval_login|"+ctx.RemoteIP().String(), s.now()); !ok {
		setRetryAfter(ctx, wait)
		return s.renderError(ctx, fasthttp.StatusTooManyRequests, "Too many sign-in attempts",
			"Wait a minute, then try again.")
	}
	code, _ := normalizeUserCode(string(ctx.QueryArgs().Peek("user_code")))
	binding, bindingHash := randomToken(32)
	state, stateHash := randomToken(32)
	nonce, _ := randomToken(16)
	verifier, _ := randomToken(48)
	redirect := s.publicURL(ctx) + approvalReturnPath
	qctx, cancel := queryContext()
	defer cancel()
	authURL, err := p.authorizationURL(qctx, p.cfg.ClientID, redirect, state, nonce, s256(verifier))
	if err != nil {
		s.log.Warn("identity provider unavailable", "provider", p.name, "err", err)
		return s.renderError(ctx, fasthttp.StatusServiceUnavailable, "Sign-in is unavailable",
			"The identity provider cannot be reached right now. Try again in a moment.")
	}
	err = s.db.CreateOAuthState(qctx, storage.OAuthState{Hash: stateHash, Purpose: storage.StateApproval,
		Provider: p.name, ClientID: p.cfg.ClientID, RedirectURI: redirect, CodeVerifier: verifier, Nonce: nonce,
		BindingHash: bindingHash[:], UserCode: code, Lifetime: s.cfg.StateLifetime})
	if err != nil {
		return err
	}
	s.maybePurge()
	s.setCookie(ctx, loginCookie, binding, s.cfg.StateLifetime)
	securityHeaders(ctx)
	ctx.Redirect(authURL, fasthttp.StatusSeeOther)
	return nil
}

// approvalCallback finishes the page's sign-in and opens a session.
func (s *signIn) approvalCallback(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	args := ctx.QueryArgs()
	if e := string(args.Peek("error")); e != "" {
		return s.renderError(ctx, fasthttp.StatusBadRequest, "Sign-in was not completed",
			"The identity provider did not sign you in. Go back to the approval page to try again.")
	}
	state, code := string(args.Peek("state")), string(args.Peek("code"))
	binding := string(ctx.Request.Header.Cookie(loginCookie))
	s.setCookie(ctx, loginCookie, "", 0)
	stale := func() error {
		return s.renderError(ctx, fasthttp.StatusBadRequest, "This sign-in link is not valid",
			"It has expired, was used already, or was started in another browser. Start again from the approval page.")
	}
	if !validSecretToken(state) || code == "" || len(code) > 4096 || !validSecretToken(binding) {
		return stale()
	}
	qctx, cancel := queryContext()
	defer cancel()
	st, err := s.db.ConsumeOAuthState(qctx, hashString(state), storage.StateApproval)
	if errors.Is(err, storage.ErrNotFound) {
		return stale()
	}
	if err != nil {
		return err
	}
	bh := hashString(binding)
	if subtle.ConstantTimeCompare(bh[:], st.BindingHash) != 1 {
		return stale()
	}
	p := s.providers[st.Provider]
	if p == nil {
		return stale()
	}
	id, err := p.exchange(qctx, st.ClientID, st.RedirectURI, code, st.CodeVerifier, st.Nonce)
	if err != nil {
		if cerr := s.exchangeError(p, err); cerr == errProviderUnavailable {
			return s.renderError(ctx, fasthttp.StatusServiceUnavailable, "Sign-in is unavailable",
				"The identity provider cannot be reached right now. Try again in a moment.")
		}
		return stale()
	}
	if !id.EmailVerified || id.Email == "" {
		return s.renderError(ctx, fasthttp.StatusForbidden, "E-mail address not verified",
			"The identity provider did not vouch for your e-mail address. Verify it there, then sign in again.")
	}
	acct, err := s.db.SignInAccountByEmail(qctx, id.Email)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return s.renderError(ctx, fasthttp.StatusForbidden, "No account",
			"No account uses the e-mail address "+id.Email+". Sign up first, then approve the device.")
	case err != nil:
		return err
	case acct.Suspended:
		return s.renderError(ctx, fasthttp.StatusForbidden, "Account suspended",
			"This account is suspended and cannot approve devices.")
	}
	secret, sessionHash := randomToken(32)
	if err := s.db.CreateApprovalSession(qctx, sessionHash, acct.User.ID, s.cfg.SessionLifetime); err != nil {
		return err
	}
	s.setCookie(ctx, sessionCookie, secret, s.cfg.SessionLifetime)
	next := approvalPath
	if st.UserCode != "" {
		next += "?user_code=" + url.QueryEscape(formatUserCode(st.UserCode))
	}
	securityHeaders(ctx)
	ctx.Redirect(next, fasthttp.StatusSeeOther)
	return nil
}

// approvalForm is a parsed approve-or-decline form.
type approvalForm struct {
	CSRF     string
	UserCode string // normalized
	OrgID    string
	Approve  bool
}

// parseApprovalForm reads the confirm form. It reports a message for the
// person when the form is unusable.
func parseApprovalForm(contentType string, body []byte) (approvalForm, string) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != "application/x-www-form-urlencoded" {
		return approvalForm{}, "The form could not be read."
	}
	f, err := signInFields(contentType, body, "csrf", "user_code", "org_id", "decision")
	if err != nil {
		return approvalForm{}, "The form could not be read."
	}
	out := approvalForm{CSRF: f["csrf"], OrgID: f["org_id"]}
	var ok bool
	if out.UserCode, ok = normalizeUserCode(f["user_code"]); !ok {
		return approvalForm{CSRF: out.CSRF}, "That is not a device code: codes are eight letters, like BCDF-GHJK."
	}
	switch f["decision"] {
	case "approve":
		out.Approve = true
		if out.OrgID == "" {
			return approvalForm{CSRF: out.CSRF}, "Choose the organization the device's key is bound to."
		}
	case "deny":
	default:
		return approvalForm{CSRF: out.CSRF}, "Choose Approve or Decline."
	}
	return out, ""
}

// approvalDecide approves or declines a device login.
func (s *signIn) approvalDecide(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	// A post from another origin is refused before anything else: its
	// cookie is not even looked up.
	if !s.sameOrigin(ctx) {
		return s.formExpired(ctx)
	}
	if len(ctx.PostBody()) > maxSignInBody {
		return s.renderError(ctx, fasthttp.StatusRequestEntityTooLarge, "Form too large", "The form could not be read.")
	}
	userID, secret, ok := s.session(ctx)
	if !ok {
		return s.renderError(ctx, fasthttp.StatusUnauthorized, "Signed out",
			"Your sign-in on this page has expired. Sign in again to approve the device.")
	}
	form, problem := parseApprovalForm(string(ctx.Request.Header.ContentType()), ctx.PostBody())
	token := csrfToken(secret)
	if subtle.ConstantTimeCompare([]byte(form.CSRF), []byte(token)) != 1 {
		return s.formExpired(ctx)
	}
	acct, err := s.account(userID)
	if err != nil {
		return err
	}
	if problem != "" {
		return s.render(ctx, fasthttp.StatusBadRequest, pageData{View: "enter", Title: "Approve a device",
			Email: acct.User.Email, CSRF: token, Error: problem})
	}
	if ok, wait := s.limiter.Allow("approval|"+userID, s.now()); !ok {
		setRetryAfter(ctx, wait)
		return s.render(ctx, fasthttp.StatusTooManyRequests, pageData{View: "enter", Title: "Approve a device",
			Email: acct.User.Email, CSRF: token,
			Error: "Too many codes tried; wait " + wait.Round(time.Second).String() + " and try again."})
	}
	qctx, cancel := queryContext()
	defer cancel()
	if !form.Approve {
		err := s.db.DenyDeviceCode(qctx, form.UserCode, userID)
		if errors.Is(err, storage.ErrNotFound) {
			return s.render(ctx, fasthttp.StatusNotFound, pageData{View: "enter", Title: "Approve a device",
				Email: acct.User.Email, CSRF: token,
				Error: "That code is unknown, has expired or was already used."})
		}
		if err != nil {
			return err
		}
		return s.render(ctx, fasthttp.StatusOK, pageData{View: "done", Title: "Device declined",
			UserCode: formatUserCode(form.UserCode), Email: acct.User.Email, CSRF: token})
	}
	org, err := s.db.ApproveDeviceCode(qctx, form.UserCode, userID, form.OrgID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return s.render(ctx, fasthttp.StatusNotFound, pageData{View: "enter", Title: "Approve a device",
			Email: acct.User.Email, CSRF: token, Error: "That code is unknown, has expired or was already used."})
	case errors.Is(err, storage.ErrNotMember):
		d := s.confirmPage(acct, form.UserCode, secret)
		d.Error = "You are not a member of that organization; choose one of yours."
		return s.render(ctx, fasthttp.StatusForbidden, d)
	case errors.Is(err, storage.ErrAccountSuspended):
		return s.renderError(ctx, fasthttp.StatusForbidden, "Account suspended",
			"This account is suspended and cannot approve devices.")
	case err != nil:
		return err
	}
	return s.render(ctx, fasthttp.StatusOK, pageData{View: "done", Title: "Device approved", Approved: true,
		UserCode: formatUserCode(form.UserCode), Email: acct.User.Email, Org: org, CSRF: token})
}

// approvalLogout ends the page's session.
func (s *signIn) approvalLogout(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	if !s.sameOrigin(ctx) {
		return s.formExpired(ctx)
	}
	_, secret, ok := s.session(ctx)
	if ok {
		f, _ := signInFields(string(ctx.Request.Header.ContentType()), ctx.PostBody(), "csrf")
		if subtle.ConstantTimeCompare([]byte(f["csrf"]), []byte(csrfToken(secret))) != 1 {
			return s.formExpired(ctx)
		}
		qctx, cancel := queryContext()
		defer cancel()
		if err := s.db.DeleteApprovalSession(qctx, hashString(secret)); err != nil {
			return err
		}
	}
	s.setCookie(ctx, sessionCookie, "", 0)
	securityHeaders(ctx)
	ctx.Redirect(approvalPath, fasthttp.StatusSeeOther)
	return nil
}

// setRetryAfter says, on a 429 of the page, when to try again: whole
// seconds, at least 1, as every 429 of the gateway does.
func setRetryAfter(ctx *fasthttp.RequestCtx, wait time.Duration) {
	n := int((wait + time.Second - 1) / time.Second)
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(n, 1)))
}
