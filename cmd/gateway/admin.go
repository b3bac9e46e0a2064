package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"time"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

const adminUsage = `usage: gateway admin <command> [flags]

Talks to the database at DATABASE_URL (or --database-url). Prints JSON on
stdout; errors go to stderr with a non-zero exit.

commands:
  org create --name NAME
  org set-plan --org ORG_ID --plan PLAN
  org members --org ORG_ID
  invitation list --org ORG_ID [--limit N]
  outbox list [--org ORG_ID] [--status pending|sent|failed] [--limit N]
  outbox retry --id MESSAGE_ID
  workspace create --org ORG_ID --name NAME [--slug SLUG] [--spend-cap-usd N]
  workspace set-cap --workspace WORKSPACE_ID (--spend-cap-usd N | --clear)
  user create --email EMAIL [--org ORG_ID --role owner|admin|member]
  user suspend --user USER_ID
  user unsuspend --user USER_ID
  key create --user USER_ID --org ORG_ID [--kind developer|signed_in|headless]
             [--scopes memory,rules,...] [--models kavi,mira] [--read-only]
             [--spend-cap-usd N] [--credits-usd N] [--workspace WORKSPACE_ID]
  key revoke --key-id KEY_ID
  key adjust-credits --key-id KEY_ID --usd [-]N
  service-token create --name NAME [--scopes a,b] [--read-only] [--expires-in DURATION]
  service-token revoke --id TOKEN_ID
  device approve --user-code CODE --user USER_ID [--org ORG_ID]
  device deny --user-code CODE
`

// adminCommand is one `gateway admin <noun> <verb>`.
type adminCommand struct {
	flags func(fs *flag.FlagSet) func(ctx context.Context, db *storage.DB) (any, error)
	// syncs: the command changes what the gateways cache about keys
	// (validity, suspension, plan, cap), and returns once every running
	// process has applied it (storage.SyncKeys).
	syncs bool
}

var adminCommands = map[string]adminCommand{
	"org create":           {flags: orgCreate},
	"org set-plan":         {flags: orgSetPlan, syncs: true},
	"org members":          {flags: orgMembers},
	"invitation list":      {flags: invitationList},
	"outbox list":          {flags: outboxList},
	"outbox retry":         {flags: outboxRetry},
	"workspace create":     {flags: workspaceCreate},
	"workspace set-cap":    {flags: workspaceSetCap, syncs: true},
	"key adjust-credits":   {flags: keyAdjustCredits},
	"user create":          {flags: userCreate},
	"user suspend":         {flags: func(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) { return userSuspend(fs, true) }, syncs: true},
	"user unsuspend":       {flags: func(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) { return userSuspend(fs, false) }, syncs: true},
	"key create":           {flags: keyCreate},
	"key revoke":           {flags: keyRevoke, syncs: true},
	"service-token create": {flags: serviceTokenCreate},
	"service-token revoke": {flags: serviceTokenRevoke, syncs: true},
	"device approve":       {flags: deviceApprove},
	"device deny":          {flags: deviceDeny},
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func runAdmin(args []string, stdout, stderr io.Writer) int {
	// Help asked for, before or in place of a command, is no mistake.
	if (len(args) > 0 && isHelp(args[0])) || (len(args) > 1 && isHelp(args[1])) {
		fmt.Fprint(stdout, adminUsage)
		return 0
	}
	if len(args) < 2 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	name := args[0] + " " + args[1]
	cmd, ok := adminCommands[name]
	if !ok {
		fmt.Fprintf(stderr, "gateway admin: unknown command %q\n\n%s", name, adminUsage)
		return 2
	}
	fs := flag.NewFlagSet("gateway admin "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dbURL string
	fs.StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	do := cmd.flags(fs)
	if exit, run := parseCommand(fs, args[2:], stderr); !run {
		return exit
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := adminRun(ctx, dbURL, do, cmd.syncs, stderr)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gateway admin %s: %v\n", name, err)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "gateway admin %s: %v\n", name, err)
		return 1
	}
	return printJSON(stdout, out)
}

func adminRun(ctx context.Context, dbURL string, do func(context.Context, *storage.DB) (any, error), syncs bool, stderr io.Writer) (any, error) {
	db, err := storage.Open(ctx, storage.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	v, err := db.SchemaVersion(ctx)
	if err != nil {
		return nil, err
	}
	if want := storage.BinaryVersion(); v < want {
		return nil, fmt.Errorf("database schema is at version %d, this binary needs %d: run 'gateway migrate'", v, want)
	}
	out, err := do(ctx, db)
	if err == nil && syncs {
		// Done is done everywhere: the running gateways have applied the
		// change when the command returns. One that does not answer in time
		// applies it on its own notification; the change stands either way.
		sctx, cancel := context.WithTimeout(ctx, adminSyncTimeout)
		if acked, n, serr := db.SyncKeys(sctx); serr != nil {
			fmt.Fprintf(stderr, "gateway admin: warning: %d of %d running gateways confirmed the change: %v\n", acked, n, serr)
		}
		cancel()
	}
	return out, err
}

// adminSyncTimeout bounds the wait for the running gateways to apply a
// change (adminCommand.syncs).
const adminSyncTimeout = 2 * time.Second

func required(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return usagef("--%s is required", name)
	}
	return nil
}

func orgCreate(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	name := fs.String("name", "", "organization name (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("name", *name); err != nil {
			return nil, err
		}
		return db.CreateOrg(ctx, strings.TrimSpace(*name))
	}
}

func userCreate(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	email := fs.String("email", "", "e-mail address (required)")
	org := fs.String("org", "", "also make the user a member of this organization")
	role := fs.String("role", "member", "role in --org: owner, admin or member")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("email", *email); err != nil {
			return nil, err
		}
		if a, err := mail.ParseAddress(*email); err != nil || a.Address != *email {
			return nil, usagef("--email %q is not an e-mail address", *email)
		}
		r, err := hotpath.ParseRole(*role)
		if err != nil {
			return nil, usagef("--role: %v", err)
		}
		u, err := db.CreateUser(ctx, *email, *org, r)
		if errors.Is(err, storage.ErrNotFound) {
			return nil, fmt.Errorf("organization %q does not exist", *org)
		}
		return u, err
	}
}

func userSuspend(fs *flag.FlagSet, suspend bool) func(context.Context, *storage.DB) (any, error) {
	user := fs.String("user", "", "user id (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("user", *user); err != nil {
			return nil, err
		}
		if err := db.SetUserSuspended(ctx, *user, suspend); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return nil, fmt.Errorf("user %q does not exist", *user)
			}
			return nil, err
		}
		return map[string]any{"id": *user, "suspended": suspend}, nil
	}
}

func keyCreate(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	user := fs.String("user", "", "user id (required)")
	org := fs.String("org", "", "organization the key is bound to (required; the user must be a member)")
	kind := fs.String("kind", "developer", "developer, signed_in (expires in 90 days) or headless")
	scopes := fs.String("scopes", "", "comma-separated endpoint families; empty holds every family")
	models := fs.String("models", "", "comma-separated tier allowlist; empty allows every tier")
	readOnly := fs.Bool("read-only", false, "refuse billable operations")
	spendCap := fs.String("spend-cap-usd", "", "monthly spend cap in USD")
	credits := fs.String("credits-usd", "", "prepaid credit in USD (headless keys)")
	workspace := fs.String("workspace", "", "workspace id the key belongs to")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("user", *user); err != nil {
			return nil, err
		}
		if err := required("org", *org); err != nil {
			return nil, err
		}
		nk := storage.NewKey{UserID: *user, OrgID: *org, ReadOnly: *readOnly, WorkspaceID: *workspace}
		var err error
		if nk.Kind, err = hotpath.ParseKeyKind(*kind); err != nil {
			return nil, usagef("--kind: %v", err)
		}
		if nk.Scopes, err = hotpath.ParseScopes(splitList(*scopes)); err != nil {
			return nil, usagef("--scopes: %v", err)
		}
		for _, m := range splitList(*models) {
			if !hotpath.IsTierName(m) {
				return nil, usagef("--models: %q is not a tier (kavi, vaani, mira)", m)
			}
			nk.Models = append(nk.Models, m)
		}
		if nk.SpendCapMicros, err = optUSD("spend-cap-usd", *spendCap); err != nil {
			return nil, err
		}
		if nk.CreditsMicros, err = optUSD("credits-usd", *credits); err != nil {
			return nil, err
		}
		if nk.CreditsMicros != nil && nk.Kind != hotpath.KindHeadless {
			return nil, usagef("--credits-usd applies to headless keys only")
		}
		out, err := db.CreateKey(ctx, nk)
		if errors.Is(err, storage.ErrNotMember) {
			return nil, fmt.Errorf("user %q is not a member of organization %q", *user, *org)
		}
		return out, err
	}
}

func optUSD(name, v string) (*int64, error) {
	if v == "" {
		return nil, nil
	}
	m, err := hotpath.ParseMicroUSD(v)
	if err != nil {
		return nil, usagef("--%s: %v", name, err)
	}
	return &m, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func keyRevoke(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	id := fs.String("key-id", "", "key id (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("key-id", *id); err != nil {
			return nil, err
		}
		if err := db.RevokeKey(ctx, *id); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return nil, fmt.Errorf("key %q does not exist", *id)
			}
			return nil, err
		}
		return map[string]any{"key_id": *id, "revoked": true}, nil
	}
}

func serviceTokenCreate(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	name := fs.String("name", "", "service name (required)")
	scopes := fs.String("scopes", "", "comma-separated endpoint families; empty holds every family")
	readOnly := fs.Bool("read-only", false, "refuse billable operations")
	expiresIn := fs.Duration("expires-in", 0, "lifetime such as 720h; 0 never expires")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("name", *name); err != nil {
			return nil, err
		}
		if *expiresIn < 0 {
			return nil, usagef("--expires-in must not be negative")
		}
		s, err := hotpath.ParseScopes(splitList(*scopes))
		if err != nil {
			return nil, usagef("--scopes: %v", err)
		}
		return db.CreateServiceToken(ctx, storage.NewServiceToken{Name: strings.TrimSpace(*name), Scopes: s,
			ReadOnly: *readOnly, ExpiresIn: *expiresIn})
	}
}

func serviceTokenRevoke(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	id := fs.String("id", "", "service token id (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("id", *id); err != nil {
			return nil, err
		}
		if err := db.RevokeServiceToken(ctx, *id); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return nil, fmt.Errorf("service token %q does not exist", *id)
			}
			return nil, err
		}
		return map[string]any{"id": *id, "revoked": true}, nil
	}
}

func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dbURL, directURL string
	fs.StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	fs.StringVar(&directURL, "database-direct-url", "", "PostgreSQL URL that bypasses a transaction-mode pooler: migrations hold a session lock; empty: --database-url is direct")
	if exit, run := parseCommand(fs, args, stderr); !run {
		return exit
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := storage.Open(ctx, storage.Config{URL: dbURL, DirectURL: directURL, MaxConns: 2})
	if err != nil {
		fmt.Fprintf(stderr, "gateway migrate: %v\n", err)
		return 2
	}
	defer db.Close()
	from, to, err := db.Migrate(ctx)
	switch {
	case errors.Is(err, storage.ErrSchemaNewer):
		// Nothing to apply: a rollback's migrate step goes through.
		fmt.Fprintf(stderr, "gateway migrate: warning: %v; nothing applied\n", err)
	case err != nil:
		fmt.Fprintf(stderr, "gateway migrate: %v\n", err)
		return 1
	}
	return printJSON(stdout, map[string]int32{"from": from, "to": to})
}
