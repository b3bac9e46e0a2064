package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"
)

// smtpSink is an SMTP server in the test process that keeps what it is
// sent. fail, when set, answers a message's DATA instead of accepting it.
type smtpSink struct {
	mu       sync.Mutex
	messages []sunkMessage
	fail     func(n int) *smtp.SMTPError
	attempts int
	addr     string
}

type sunkMessage struct {
	from string
	to   []string
	raw  []byte
}

func startSMTPSink(t *testing.T) *smtpSink {
	t.Helper()
	sink := &smtpSink{}
	srv := smtp.NewServer(sink)
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sink.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sink
}

func (s *smtpSink) NewSession(*smtp.Conn) (smtp.Session, error) { return &sinkSession{sink: s}, nil }

type sinkSession struct {
	sink *smtpSink
	from string
	to   []string
}

func (s *sinkSession) Reset()        { s.from, s.to = "", nil }
func (s *sinkSession) Logout() error { return nil }
func (s *sinkSession) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}
func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}
func (s *sinkSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	s.sink.attempts++
	if s.sink.fail != nil {
		if e := s.sink.fail(s.sink.attempts); e != nil {
			return e
		}
	}
	s.sink.messages = append(s.sink.messages, sunkMessage{from: s.from, to: s.to, raw: raw})
	return nil
}

func (s *smtpSink) received() []sunkMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sunkMessage(nil), s.messages...)
}

// startMailApp starts the gateway with its smtp section pointing at sink.
func startMailApp(t *testing.T, sink *smtpSink, extra string) *testApp {
	t.Helper()
	host, port, err := net.SplitHostPort(sink.addr)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`public_base_url: https://console.example.test/
smtp:
  host: %s
  port: %s
  starttls: none
  from: invites@example.test
  poll_interval: 50ms
  backoff: 100ms
  max_backoff: 200ms
%s`, host, port, extra)), 0o600))
	return startTestApp(t, func(c *serveConfig) { c.ConfigPath = path })
}

// parts returns the decoded text and HTML bodies of a delivered message.
func parts(t *testing.T, raw []byte) (msg *mail.Message, text, html string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	require.NoError(t, err)
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/alternative", mt)
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(p)
		require.NoError(t, err)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch ct {
		case "text/plain":
			text = string(b)
		case "text/html":
			html = string(b)
		}
	}
	return msg, text, html
}

// The invitation's message is delivered through the configured SMTP server
// with a text and an HTML body naming the organization and the inviter and
// an accept link on the public base URL; the outbox records the delivery.
func TestInvitationEmailDelivered(t *testing.T) {
	sink := startSMTPSink(t)
	ta := startMailApp(t, sink, "")
	org := admin(t, ta.dbURL, "org", "create", "--name", "Acme <Rockets> & Co")
	user := admin(t, ta.dbURL, "user", "create", "--email", "boss@acme.test", "--org", org["id"].(string), "--role", "admin")
	key := admin(t, ta.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string))
	boss := convClient{ta: ta, key: key["access_token"].(string), userID: user["id"].(string), orgID: org["id"].(string)}

	r := boss.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "newbie@elsewhere.test", "role": "admin"})
	require.Equal(t, 202, r.status, "%s", r.raw)
	id := r.body["id"].(string)
	require.Eventually(t, func() bool { return len(sink.received()) == 1 }, 10*time.Second, 10*time.Millisecond)
	m := sink.received()[0]
	require.Equal(t, "invites@example.test", m.from)
	require.Equal(t, []string{"newbie@elsewhere.test"}, m.to)
	msg, text, html := parts(t, m.raw)
	dec := new(mime.WordDecoder)
	subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	require.NoError(t, err)
	require.Equal(t, "boss@acme.test invited you to join Acme <Rockets> & Co", subject)
	link := "https://console.example.test/invitations/" + id
	require.Contains(t, text, "boss@acme.test invited you to join Acme <Rockets> & Co as admin.")
	require.Contains(t, text, link)
	require.Contains(t, html, "<strong>Acme &lt;Rockets&gt; &amp; Co</strong>", "the organization's name is escaped in HTML")
	require.Contains(t, html, `href="`+link+`"`)

	require.Eventually(t, func() bool {
		out := admin(t, ta.dbURL, "outbox", "list", "--org", org["id"].(string))
		d := out["data"].([]any)
		return len(d) == 1 && d[0].(map[string]any)["status"] == "sent"
	}, 5*time.Second, 20*time.Millisecond)
	// Logs never name the recipient or the organization.
	require.NotContains(t, ta.logs.String(), "newbie@elsewhere.test")
	require.NotContains(t, ta.logs.String(), "Rockets")
}

// A temporary refusal is retried with backoff until it is delivered; a
// permanent one is recorded as failed, and the operator can retry it.
func TestInvitationEmailRetries(t *testing.T) {
	sink := startSMTPSink(t)
	sink.fail = func(n int) *smtp.SMTPError {
		if n <= 2 {
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"}
		}
		return nil
	}
	ta := startMailApp(t, sink, "")
	owner := convTenant(t, ta, "owner@retry.test")
	r := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "a@retry.test"})
	require.Equal(t, 202, r.status, "%s", r.raw)
	require.Eventually(t, func() bool { return len(sink.received()) == 1 }, 10*time.Second, 10*time.Millisecond)
	out := admin(t, ta.dbURL, "outbox", "list", "--org", owner.orgID)
	msg := out["data"].([]any)[0].(map[string]any)
	require.Eventually(t, func() bool {
		msg = admin(t, ta.dbURL, "outbox", "list", "--org", owner.orgID)["data"].([]any)[0].(map[string]any)
		return msg["status"] == "sent"
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, float64(3), msg["attempts"])

	// Now a permanent refusal.
	sink.mu.Lock()
	sink.fail = func(int) *smtp.SMTPError {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}
	}
	sink.mu.Unlock()
	r = owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "b@retry.test"})
	require.Equal(t, 202, r.status)
	var failed map[string]any
	require.Eventually(t, func() bool {
		failed = admin(t, ta.dbURL, "outbox", "list", "--org", owner.orgID, "--status", "failed")
		return len(failed["data"].([]any)) == 1
	}, 5*time.Second, 20*time.Millisecond)
	f := failed["data"].([]any)[0].(map[string]any)
	require.Equal(t, float64(1), f["attempts"], "a permanent refusal is not retried")
	require.Contains(t, f["last_error"], "550")

	sink.mu.Lock()
	sink.fail = nil
	sink.mu.Unlock()
	retried := admin(t, ta.dbURL, "outbox", "retry", "--id", f["id"].(string))
	require.Equal(t, "pending", retried["status"])
	require.Eventually(t, func() bool { return len(sink.received()) == 2 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"b@retry.test"}, sink.received()[1].to)
}

// With no SMTP server configured (the embedded default), messages wait in
// the outbox where the operator sees them.
func TestInvitationOutboxWithoutSMTP(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@nosmtp.test")
	r := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "waiting@nosmtp.test"})
	require.Equal(t, 202, r.status)
	out := admin(t, ta.dbURL, "outbox", "list")
	require.Len(t, out["data"], 1)
	m := out["data"].([]any)[0].(map[string]any)
	require.Equal(t, "pending", m["status"])
	require.Equal(t, "waiting@nosmtp.test", m["to"])
	require.Equal(t, r.body["id"], m["invitation_id"])
	require.Equal(t, float64(0), m["attempts"])

	inv := admin(t, ta.dbURL, "invitation", "list", "--org", owner.orgID)
	require.Len(t, inv["data"], 1)
	members := admin(t, ta.dbURL, "org", "members", "--org", owner.orgID)
	require.Len(t, members["data"], 1)
	require.Equal(t, "owner", members["data"].([]any)[0].(map[string]any)["role"])
}

func TestInvitations(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@inv.test")
	mem := convMember(t, ta, owner.orgID, "member@inv.test", "member")
	outsider := convTenant(t, ta, "outsider@else.test")

	t.Run("body", func(t *testing.T) {
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{}), 400, "invalid_request")
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations",
			map[string]any{"email": "a@b.test", "user_id": unknownUUID}), 400, "invalid_request")
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "not an address"}), 400, "invalid_request")
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": "nope"}), 400, "invalid_request")
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "a@b.test", "role": "owner"}), 400, "invalid_request")
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "a@b.test", "role": "king"}), 400, "invalid_request")
	})
	t.Run("same answer whether or not an account exists", func(t *testing.T) {
		known := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "outsider@else.test"})
		unknown := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "nobody@else.test"})
		require.Equal(t, 202, known.status)
		require.Equal(t, 202, unknown.status)
		shape := func(r resp) map[string]any {
			out := map[string]any{}
			for k, v := range r.body {
				switch k {
				case "id", "email", "created_at", "expires_at":
					out[k] = "x"
				default:
					out[k] = v
				}
			}
			return out
		}
		require.Equal(t, shape(known), shape(unknown))
		require.Equal(t, "live", known.body["status"])
		require.Equal(t, "member", known.body["role"])
		require.Equal(t, len(known.raw)-len("outsider"), len(unknown.raw)-len("nobody"))
		knownByID := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": outsider.userID})
		unknownByID := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": unknownUUID})
		require.Equal(t, 202, knownByID.status)
		require.Equal(t, 202, unknownByID.status)
		require.Equal(t, shape(knownByID), shape(unknownByID))
		require.Nil(t, knownByID.body["email"])
		require.NotContains(t, string(knownByID.raw), outsider.userID, "an invitee user id is never reported")
		created, err := time.Parse(time.RFC3339, known.body["created_at"].(string))
		require.NoError(t, err)
		expires, err := time.Parse(time.RFC3339, known.body["expires_at"].(string))
		require.NoError(t, err)
		require.InDelta(t, (14 * 24 * time.Hour).Seconds(), expires.Sub(created).Seconds(), 1)
		var stored time.Time
		require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select expires_at from invitations where id = $1`,
			known.body["id"]).Scan(&stored))
		require.True(t, stored.Equal(expires), "it lapses at the second it shows: stored %v, shown %v", stored, expires)
	})
	t.Run("members conflict", func(t *testing.T) {
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "MEMBER@inv.test"}), 409, "org_member_exists")
		requireError(t, owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": mem.userID}), 409, "org_member_exists")
	})
	t.Run("re-invite returns the live one unchanged", func(t *testing.T) {
		a := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "again@inv.test"})
		b := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "Again@inv.test", "role": "admin"})
		require.Equal(t, a.body, b.body)
	})
	t.Run("a lapsed one is replaced by a fresh window", func(t *testing.T) {
		a := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "late@inv.test"})
		_, err := ta.db.Pool.Exec(context.Background(),
			`update invitations set created_at = now() - interval '15 days', expires_at = now() - interval '1 day' where id = $1`, a.body["id"])
		require.NoError(t, err)
		list := owner.do(t, "GET", "/api/v1/org/invitations", nil)
		require.Equal(t, "lapsed", findInvitation(t, list, a.body["id"].(string))["status"], "lapsing is read from the clock")
		b := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "late@inv.test"})
		require.Equal(t, 202, b.status)
		require.NotEqual(t, a.body["id"], b.body["id"])
		require.Equal(t, "live", b.body["status"])
		list = owner.do(t, "GET", "/api/v1/org/invitations", nil)
		require.Equal(t, "lapsed", findInvitation(t, list, a.body["id"].(string))["status"])
		require.Equal(t, "live", findInvitation(t, list, b.body["id"].(string))["status"])
	})
	t.Run("accept and decline by the invitee only", func(t *testing.T) {
		a := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "outsider@else.test"})
		id := a.body["id"].(string)
		// Somebody else cannot accept it, nor can a member of the org.
		requireError(t, mem.do(t, "POST", "/api/v1/invitations/"+id+"/accept", nil), 404, "invitation_not_found")
		pending := outsider.do(t, "GET", "/api/v1/invitations", nil)
		require.Equal(t, 200, pending.status)
		require.Len(t, pending.body["data"], 2, "by e-mail and by user id")
		r := outsider.do(t, "POST", "/api/v1/invitations/"+id+"/accept", nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, map[string]any{"id": owner.orgID, "name": "Org of owner@inv.test", "role": "member"}, r.body["org"])
		requireError(t, outsider.do(t, "POST", "/api/v1/invitations/"+id+"/accept", nil), 404, "invitation_not_found")
		members := owner.do(t, "GET", "/api/v1/org/members", nil)
		require.Len(t, members.body["data"], 3)
		// The invitation by user id is still live: decline it.
		pending = outsider.do(t, "GET", "/api/v1/invitations", nil)
		require.Len(t, pending.body["data"], 1)
		byID := pending.body["data"].([]any)[0].(map[string]any)["id"].(string)
		require.Equal(t, 204, outsider.do(t, "POST", "/api/v1/invitations/"+byID+"/decline", nil).status)
		requireError(t, outsider.do(t, "POST", "/api/v1/invitations/"+byID+"/accept", nil), 404, "invitation_not_found")
		list := owner.do(t, "GET", "/api/v1/org/invitations", nil)
		require.Equal(t, "accepted", findInvitation(t, list, id)["status"])
		require.Equal(t, "declined", findInvitation(t, list, byID)["status"])
		require.NotContains(t, string(list.raw), outsider.userID)
	})
	t.Run("revoke", func(t *testing.T) {
		a := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "gone@inv.test"})
		id := a.body["id"].(string)
		require.Equal(t, 204, owner.do(t, "DELETE", "/api/v1/org/invitations/"+id, nil).status)
		requireError(t, owner.do(t, "DELETE", "/api/v1/org/invitations/"+id, nil), 404, "invitation_not_found")
		list := owner.do(t, "GET", "/api/v1/org/invitations", nil)
		require.Equal(t, "revoked", findInvitation(t, list, id)["status"])
		out := admin(t, ta.dbURL, "outbox", "list", "--org", owner.orgID, "--status", "failed")
		require.Len(t, out["data"], 1, "the revoked invitation's message is not sent")
	})
}

func findInvitation(t *testing.T, list resp, id string) map[string]any {
	t.Helper()
	for _, v := range list.body["data"].([]any) {
		if m := v.(map[string]any); m["id"] == id {
			return m
		}
	}
	t.Fatalf("invitation %s is not listed: %s", id, list.raw)
	return nil
}

// Many invites of one address at once yield one live invitation and one
// message.
func TestConcurrentInvitesOfOneAddress(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@conc.test")
	adm := convMember(t, ta, owner.orgID, "admin@conc.test", "admin")
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := owner
			if i%2 == 1 {
				c = adm
			}
			r := c.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": []string{"Twin@conc.test", "twin@CONC.test"}[i%2]})
			require.Equal(t, 202, r.status, "%s", r.raw)
			ids[i] = r.body["id"].(string)
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	var n, mails int
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select count(*) from invitations where org_id = $1`, owner.orgID).Scan(&n))
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select count(*) from outbox where org_id = $1`, owner.orgID).Scan(&mails))
	require.Equal(t, 1, n)
	require.Equal(t, 1, mails)
	require.True(t, strings.EqualFold("twin@conc.test", *mustEmail(t, ta, ids[0])))
}

func mustEmail(t *testing.T, ta *testApp, id string) *string {
	t.Helper()
	var e *string
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select email from invitations where id = $1`, id).Scan(&e))
	return e
}
