// Package outbox delivers the messages the control plane writes to the
// outbox table: invitations today. Delivery runs off the request path: a
// worker leases due rows, sends each through SMTP, and records the outcome.
// A crash between commit and send loses nothing (the row is still pending),
// a crash mid-send sends again once the lease passes, a temporary failure
// is retried with exponential backoff, and a permanent one is recorded.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/edgegw/gateway/storage"
)

// Config configures SMTP delivery (the config file's smtp: section).
type Config struct {
	// Host is the SMTP server; empty disables delivery, and messages wait
	// in the outbox (gateway admin outbox list).
	Host string
	// Port defaults to 587.
	Port int
	// StartTLS is "required" (the default: refuse a server without
	// STARTTLS), "opportunistic" or "none".
	StartTLS string
	// Username and Password authenticate with SMTP AUTH PLAIN when
	// Username is set. The password is read from the environment.
	Username, Password string
	// From is the sender address (required when Host is set).
	From string
	// Poll is how often due messages are looked for; default 5s. An
	// invitation wakes the worker at once.
	Poll time.Duration
	// Timeout bounds one delivery; default 30s.
	Timeout time.Duration
	// MaxAttempts is how many attempts a message gets before it is
	// recorded as failed; default 8.
	MaxAttempts int
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one up to MaxBackoff; defaults 30s and 1h.
	Backoff, MaxBackoff time.Duration
}

// Enabled reports whether an SMTP server is configured.
func (c *Config) Enabled() bool { return c.Host != "" }

// Validate fills defaults and checks the settings.
func (c *Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.Port == 0 {
		c.Port = 587
	}
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("smtp.port: %d is not a port", c.Port)
	}
	switch c.StartTLS {
	case "":
		c.StartTLS = "required"
	case "required", "opportunistic", "none":
	default:
		return fmt.Errorf("smtp.starttls: %q is not required, opportunistic or none", c.StartTLS)
	}
	if c.From == "" {
		return errors.New("smtp.from: required when smtp.host is set")
	}
	if c.Username != "" && c.Password == "" {
		return errors.New("smtp: a username needs a password (smtp.password_env names its variable)")
	}
	if c.Poll <= 0 {
		c.Poll = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 8
	}
	if c.Backoff <= 0 {
		c.Backoff = 30 * time.Second
	}
	if c.MaxBackoff < c.Backoff {
		c.MaxBackoff = max(time.Hour, c.Backoff)
	}
	return nil
}

// Message is one message to send.
type Message struct {
	To, Subject, Text, HTML string
}

// Sender sends one message. A *PermanentError is not retried.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// PermanentError is a refusal that retrying cannot change.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// SMTP sends through the configured server.
type SMTP struct {
	cfg Config
}

// NewSMTP returns a sender for a validated config.
func NewSMTP(cfg Config) *SMTP { return &SMTP{cfg: cfg} }

// Send delivers m with a text body and an HTML alternative.
func (s *SMTP) Send(ctx context.Context, m Message) error {
	msg := mail.NewMsg()
	if err := msg.From(s.cfg.From); err != nil {
		return &PermanentError{fmt.Errorf("cannot set sender: %w", err)}
	}
	if err := msg.To(m.To); err != nil {
		return &PermanentError{fmt.Errorf("cannot set recipient: %w", err)}
	}
	msg.Subject(m.Subject)
	msg.SetDate()
	msg.SetMessageID()
	msg.SetBodyString(mail.TypeTextPlain, m.Text)
	msg.AddAlternativeString(mail.TypeTextHTML, m.HTML)
	policy := mail.TLSMandatory
	switch s.cfg.StartTLS {
	case "opportunistic":
		policy = mail.TLSOpportunistic
	case "none":
		policy = mail.NoTLS
	}
	opts := []mail.Option{mail.WithPort(s.cfg.Port), mail.WithTLSPolicy(policy), mail.WithTimeout(s.cfg.Timeout)}
	if s.cfg.Username != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthPlain),
			mail.WithUsername(s.cfg.Username), mail.WithPassword(s.cfg.Password))
	}
	c, err := mail.NewClient(s.cfg.Host, opts...)
	if err != nil {
		return &PermanentError{fmt.Errorf("cannot configure SMTP client: %w", err)}
	}
	err = c.DialAndSendWithContext(ctx, msg)
	var se *mail.SendError
	if errors.As(err, &se) && !se.IsTemp() && se.ErrorCode() >= 500 {
		return &PermanentError{err}
	}
	return err
}

// Worker delivers due outbox messages until its context ends.
type Worker struct {
	DB     *storage.DB
	Sender Sender
	Log    *slog.Logger
	Config Config
	wake   chan struct{}
}

// batch is how many messages one pass leases.
const batch = 16

// NewWorker returns a worker over a validated config.
func NewWorker(db *storage.DB, s Sender, log *slog.Logger, cfg Config) *Worker {
	return &Worker{DB: db, Sender: s, Log: log, Config: cfg, wake: make(chan struct{}, 1)}
}

// Wake makes the worker look for due messages now. It never blocks.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	t := time.NewTicker(w.Config.Poll)
	defer t.Stop()
	for {
		for w.pass(ctx) == batch {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.wake:
		}
	}
}

// lease is how long a claimed message is withheld from other workers: a
// delivery's timeout with room to record its outcome.
func (w *Worker) lease() time.Duration { return w.Config.Timeout + 30*time.Second }

// pass delivers one batch and returns how many messages it leased.
func (w *Worker) pass(ctx context.Context) int {
	msgs, err := w.DB.ClaimOutbox(ctx, batch, w.lease())
	if err != nil {
		if ctx.Err() == nil {
			w.Log.Warn("outbox: cannot claim messages", "error", err)
		}
		return 0
	}
	for _, m := range msgs {
		w.deliver(ctx, m)
	}
	return len(msgs)
}

// deliver sends one message and records the outcome. Logs name the message
// id and the server's answer, never the recipient or the body.
func (w *Worker) deliver(ctx context.Context, m storage.OutboxMessage) {
	if m.To == "" {
		w.record(ctx, w.DB.OutboxFailed(ctx, m.ID, "no account has this user id; nothing to deliver to"))
		return
	}
	sctx, cancel := context.WithTimeout(ctx, w.Config.Timeout)
	err := w.Sender.Send(sctx, Message{To: m.To, Subject: m.Subject, Text: m.Text, HTML: m.HTML})
	cancel()
	var perm *PermanentError
	switch {
	case err == nil:
		w.record(ctx, w.DB.OutboxSent(ctx, m.ID))
		w.Log.Info("outbox: delivered", "message_id", m.ID, "kind", m.Kind, "attempt", m.Attempts)
	case errors.As(err, &perm) || m.Attempts >= w.Config.MaxAttempts:
		reason := truncate(err.Error())
		w.record(ctx, w.DB.OutboxFailed(ctx, m.ID, reason))
		w.Log.Warn("outbox: delivery failed for good", "message_id", m.ID, "attempt", m.Attempts, "error", class(err))
	default:
		next := time.Now().Add(w.backoff(m.Attempts))
		w.record(ctx, w.DB.OutboxRetry(ctx, m.ID, truncate(err.Error()), next))
		w.Log.Info("outbox: delivery will be retried", "message_id", m.ID, "attempt", m.Attempts,
			"error", class(err), "next_attempt_at", next)
	}
}

// backoff is the wait after the n-th failed attempt.
func (w *Worker) backoff(n int) time.Duration {
	d := w.Config.Backoff
	for i := 1; i < n && d < w.Config.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, w.Config.MaxBackoff)
}

func (w *Worker) record(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil {
		w.Log.Warn("outbox: cannot record delivery outcome", "error", err)
	}
}

// class names a delivery error for the log without its text, which may
// quote the recipient's address: the SMTP reply code, or the kind of
// failure. The full text is recorded on the message (last_error).
func class(err error) string {
	var se *mail.SendError
	switch {
	case errors.As(err, &se) && se.ErrorCode() > 0:
		return fmt.Sprintf("smtp %d %s", se.ErrorCode(), se.EnhancedStatusCode())
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &se):
		return "smtp: " + se.Reason.String()
	}
	return "connection"
}

// truncate keeps a recorded error short and on one line.
func truncate(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 500 {
		s = s[:500]
	}
	return s
}
