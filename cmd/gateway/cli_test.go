package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage/storetest"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestAdminCommands(t *testing.T) {
	db := storetest.DB(t)
	url := db.Pool.Config().ConnString()

	org := admin(t, url, "org", "create", "--name", "Acme")
	require.Equal(t, "Acme", org["name"])
	require.NotEmpty(t, org["id"])

	user := admin(t, url, "user", "create", "--email", "ann@example.com", "--org", org["id"].(string), "--role", "admin")
	require.Equal(t, "ann@example.com", user["email"])
	require.NotEmpty(t, user["personal_org_id"])
	require.NotEqual(t, org["id"], user["personal_org_id"])

	ws := admin(t, url, "workspace", "create", "--org", org["id"].(string), "--name", "Data Team!", "--spend-cap-usd", "0.000001")
	require.Equal(t, "data-team", ws["slug"])
	require.ElementsMatch(t, []string{"id", "object", "org_id", "name", "slug", "spend_cap_micros", "is_default", "created_at", "updated_at"},
		keys(ws), "as the README lists it")
	require.Equal(t, float64(1), ws["spend_cap_micros"])
	key := admin(t, url, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string),
		"--kind", "signed_in", "--scopes", "memory,rules,files", "--models", "kavi,mira", "--read-only",
		"--spend-cap-usd", "12.5", "--workspace", ws["id"].(string))
	require.ElementsMatch(t, []string{"access_token", "token_type", "key_id", "user_id", "expires_at", "org"}, keys(key))
	require.Equal(t, "bearer", key["token_type"])
	require.NotNil(t, key["expires_at"])
	require.Equal(t, map[string]any{"id": org["id"], "name": "Acme", "role": "admin"}, key["org"])

	personal := admin(t, url, "key", "create", "--user", user["id"].(string), "--org", user["personal_org_id"].(string))
	require.Nil(t, personal["expires_at"], "developer keys never expire")
	require.Equal(t, "owner", personal["org"].(map[string]any)["role"], "every user owns a personal organization")

	headless := admin(t, url, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string),
		"--kind", "headless", "--credits-usd", "5")
	require.NotEmpty(t, headless["key_id"])

	require.Equal(t, map[string]any{"key_id": key["key_id"], "revoked": true},
		admin(t, url, "key", "revoke", "--key-id", key["key_id"].(string)))
	require.Equal(t, map[string]any{"id": user["id"], "suspended": true},
		admin(t, url, "user", "suspend", "--user", user["id"].(string)))
	admin(t, url, "user", "unsuspend", "--user", user["id"].(string))

	svc := admin(t, url, "service-token", "create", "--name", "etl", "--scopes", "logs", "--expires-in", "1h")
	require.ElementsMatch(t, []string{"token", "id", "name", "allowed_scopes", "read_only", "expires_at"}, keys(svc))
	require.Equal(t, []any{"logs"}, svc["allowed_scopes"])

	var n int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `select count(*) from api_keys`).Scan(&n))
	require.Equal(t, 3, n)
}

func TestAdminErrors(t *testing.T) {
	db := storetest.DB(t)
	url := db.Pool.Config().ConnString()
	org := admin(t, url, "org", "create", "--name", "Acme")
	user := admin(t, url, "user", "create", "--email", "bo@example.com")
	otherWS := admin(t, url, "workspace", "create", "--org", org["id"].(string), "--name", "Ops")
	devKey := admin(t, url, "key", "create", "--user", user["id"].(string), "--org", user["personal_org_id"].(string))
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no command", []string{}, 2, "usage"},
		{"unknown command", []string{"org", "delete"}, 2, "unknown command"},
		{"missing name", []string{"org", "create"}, 2, "--name is required"},
		{"bad flag", []string{"org", "create", "--nope"}, 2, "not defined"},
		{"bad email", []string{"user", "create", "--email", "nope"}, 2, "not an e-mail"},
		{"duplicate email", []string{"user", "create", "--email", "BO@example.com"}, 1, "already exists"},
		{"bad role", []string{"user", "create", "--email", "x@example.com", "--org", org["id"].(string), "--role", "boss"}, 2, "role"},
		{"missing org", []string{"user", "create", "--email", "y@example.com", "--org", "00000000-0000-0000-0000-000000000000"}, 1, "does not exist"},
		{"bad kind", []string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--kind", "root"}, 2, "kind"},
		{"bad scope", []string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--scopes", "chat,admin"}, 2, `"admin"`},
		{"bad model", []string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--models", "gpt-4o"}, 2, "not a tier"},
		{"bad cap", []string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--spend-cap-usd", "-3"}, 2, "spend-cap-usd"},
		{"credits on developer", []string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--credits-usd", "3"}, 2, "headless"},
		{"not a member", []string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string)}, 1, "not a member"},
		{"bad workspace", []string{"key", "create", "--user", user["id"].(string), "--org", user["personal_org_id"].(string), "--workspace", "ws1"}, 1, "workspace"},
		{"unknown key", []string{"key", "revoke", "--key-id", "00000000-0000-0000-0000-000000000000"}, 1, "does not exist"},
		{"malformed key id", []string{"key", "revoke", "--key-id", "abc"}, 1, "does not exist"},
		{"unknown user", []string{"user", "suspend", "--user", "abc"}, 1, "does not exist"},
		{"negative expiry", []string{"service-token", "create", "--name", "x", "--expires-in", "-1h"}, 2, "negative"},
		{"extra argument", []string{"org", "create", "--name", "x", "extra"}, 2, "unexpected argument"},
		{"workspace of another org", []string{"key", "create", "--user", user["id"].(string), "--org", user["personal_org_id"].(string), "--workspace", otherWS["id"].(string)}, 1, "workspace"},
		{"reserved slug", []string{"workspace", "create", "--org", org["id"].(string), "--name", "Default"}, 2, "not default"},
		{"no usable slug", []string{"workspace", "create", "--org", org["id"].(string), "--name", "!!!"}, 2, "slug"},
		{"used slug", []string{"workspace", "create", "--org", org["id"].(string), "--name", "Ops"}, 2, "already exists"},
		{"zero workspace cap", []string{"workspace", "create", "--org", org["id"].(string), "--name", "Z", "--spend-cap-usd", "0"}, 2, "positive"},
		{"workspace in no org", []string{"workspace", "create", "--org", "00000000-0000-0000-0000-000000000000", "--name", "Q"}, 1, "does not exist"},
		{"cap and clear", []string{"workspace", "set-cap", "--workspace", otherWS["id"].(string), "--clear", "--spend-cap-usd", "1"}, 2, "exactly one"},
		{"unknown workspace", []string{"workspace", "set-cap", "--workspace", "abc", "--clear"}, 1, "does not exist"},
		{"unknown org plan", []string{"org", "set-plan", "--org", "00000000-0000-0000-0000-000000000000", "--plan", "team"}, 1, "does not exist"},
		{"credits of a developer key", []string{"key", "adjust-credits", "--key-id", devKey["key_id"].(string), "--usd", "5"}, 1, "does not exist"},
		{"bad credit amount", []string{"key", "adjust-credits", "--key-id", devKey["key_id"].(string), "--usd", "five"}, 2, "--usd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"admin"}, c.args...)
			if len(c.args) >= 2 {
				args = append(args, "--database-url", url)
			}
			code, out, errOut := runCLI(args...)
			require.Equal(t, c.code, code, "stderr: %s", errOut)
			require.Empty(t, out, "errors print nothing on stdout")
			require.Contains(t, errOut, c.msg)
		})
	}
}

func TestAdminNeedsMigratedDatabase(t *testing.T) {
	url := storetest.DatabaseURL(t)
	code, _, errOut := runCLI("admin", "org", "create", "--name", "x", "--database-url", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "gateway migrate")
}

func TestVersionCommand(t *testing.T) {
	code, out, _ := runCLI("version")
	require.Zero(t, code)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "2026-10-07", v["api_version"])
	require.NotEmpty(t, v["commit"])
}

// Every command refuses a stray argument and reports a bad environment
// value, rather than running without it.
func TestCommandsRefuseStrayArgumentsAndBadEnvironment(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--database-url", "postgres://x@127.0.0.1/db", "extra"},
		{"migrate", "--database-url", "postgres://x@127.0.0.1/db", "extra"},
		{"sim", "extra"},
		{"version", "extra"},
		{"admin", "org", "create", "--name", "x", "extra"},
	} {
		code, out, errOut := runCLI(args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, `unexpected argument "extra"`, "%v", args)
	}
	t.Setenv("GATEWAY_READ_ONLY", "maybe")
	code, _, errOut := runCLI("admin", "key", "create", "--user", "u", "--org", "o")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "GATEWAY_READ_ONLY")
}

// Help asked for is no mistake: it goes to stdout and exits 0. Before a
// command it is the command list, not serve's flags.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}} {
		code, out, errOut := runCLI(args...)
		require.Zero(t, code, "%v: %s", args, errOut)
		require.Contains(t, out, "commands:", "%v", args)
		require.NotContains(t, out+errOut, "--database-url", "%v: the command list, not serve's flags", args)
	}
	for _, args := range [][]string{{"admin", "help"}, {"admin", "--help"}, {"admin", "-h"}, {"admin", "org", "--help"}} {
		code, out, errOut := runCLI(args...)
		require.Zero(t, code, "%v: %s", args, errOut)
		require.Contains(t, out, "usage: gateway admin", "%v", args)
	}
	code, _, errOut := runCLI("version", "--help")
	require.Zero(t, code)
	require.Contains(t, errOut, "usage: gateway version")
	code, out, _ := runCLI("admin")
	require.Equal(t, 2, code, "no command is a mistake")
	require.Empty(t, out)
}

func TestServeHelpListsEverySetting(t *testing.T) {
	code, _, errOut := runCLI("serve", "--help")
	require.Zero(t, code)
	for _, s := range []string{"GATEWAY_ADDR", "GATEWAY_DATABASE_URL or DATABASE_URL", "GATEWAY_REDIS_URL or REDIS_URL",
		"GATEWAY_CONFIG", "GATEWAY_ADMIN_ADDR", "GATEWAY_LOG_LEVEL", "GATEWAY_KEY_CACHE_TTL", "GATEWAY_DEMO"} {
		require.Contains(t, errOut, s)
	}
	require.NotContains(t, errOut, "(default -1)", "no sentinel shows as a default")
	require.Contains(t, errOut, "(default 1, or OTEL_TRACES_SAMPLER_ARG)")
	require.Contains(t, errOut, "export batch, a positive duration [$GATEWAY_OTEL_EXPORT_INTERVAL] (default 5s)")
}

func TestServeRefusesInvalidConfiguration(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad addr", []string{"--addr", "nope", "--database-url", "postgres://x@127.0.0.1/db"}, nil, "addr"},
		{"no database", []string{}, nil, "database-url"},
		{"bad log level", []string{"--database-url", "postgres://x@127.0.0.1/db", "--log-level", "loud"}, nil, "log-level"},
		{"bad env value", []string{"--database-url", "postgres://x@127.0.0.1/db"}, map[string]string{"GATEWAY_ACCESS_LOG": "maybe"}, "GATEWAY_ACCESS_LOG"},
		{"bad redis", []string{"--database-url", "postgres://x@127.0.0.1/db", "--redis-url", "http://x"}, nil, "redis-url"},
		{"bad timeout", []string{"--database-url", "postgres://x@127.0.0.1/db", "--read-timeout", "0s"}, nil, "read-timeout"},
		{"negative memory return", []string{"--database-url", "postgres://x@127.0.0.1/db", "--memory-return-interval", "-1s"}, nil, "memory-return-interval"},
		{"redis password", []string{"--database-url", "postgres://x@127.0.0.1/db", "--redis-url", "redis://:SECRETPW@bad host/0"}, nil, "redis-url: cannot parse `redis://:xxxxx@bad host/0`"},
		{"pool wraps to 2", []string{"--database-url", "postgres://x@127.0.0.1/db", "--database-max-conns", "4294967298"}, nil, "database-max-conns: 4294967298 is out of range: from 1 to 262143"},
		{"pool past int32", []string{"--database-url", "postgres://x@127.0.0.1/db", "--database-max-conns", "3000000000"}, nil, "database-max-conns: 3000000000 is out of range"},
		{"pool above postgres", []string{"--database-url", "postgres://x@127.0.0.1/db", "--database-max-conns", "262144"}, nil, "out of range"},
		{"empty pool", []string{"--database-url", "postgres://x@127.0.0.1/db", "--database-max-conns", "0"}, nil, "out of range"},
		{"negative sample ratio", []string{"--database-url", "postgres://x@127.0.0.1/db", "--otel-sample-ratio", "-0.5"}, nil, "otel-sample-ratio: must be a number from 0 to 1"},
		{"NaN sample ratio", []string{"--database-url", "postgres://x@127.0.0.1/db", "--otel-sample-ratio", "NaN"}, nil, "otel-sample-ratio: must be a number from 0 to 1"},
		{"sample ratio above 1", []string{"--database-url", "postgres://x@127.0.0.1/db", "--otel-sample-ratio", "1.5"}, nil, "otel-sample-ratio"},
		{"NaN sample ratio env", []string{"--database-url", "postgres://x@127.0.0.1/db"}, map[string]string{"GATEWAY_OTEL_SAMPLE_RATIO": "NaN"}, "GATEWAY_OTEL_SAMPLE_RATIO: must be a number from 0 to 1"},
		{"negative export interval", []string{"--database-url", "postgres://x@127.0.0.1/db", "--otel-export-interval", "-5s"}, nil, "otel-export-interval: must be positive"},
		{"zero export interval", []string{"--database-url", "postgres://x@127.0.0.1/db", "--otel-export-interval", "0s"}, nil, "otel-export-interval: must be positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "")
			t.Setenv("GATEWAY_DATABASE_URL", "")
			os.Unsetenv("DATABASE_URL")
			os.Unsetenv("GATEWAY_DATABASE_URL")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, _, errOut := runCLI(append([]string{"serve"}, c.args...)...)
			require.Equal(t, 2, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "SECRETPW")
		})
	}

	// The file's settings are refused the same way, before anything is
	// bound or connected: exit 2 and one plain line naming the setting.
	files := []struct{ name, body, want string }{
		{"unknown key", "tiers:\n  kavi:\n    upstream_secret: x\n", "tiers.kavi.upstream_secret: unknown setting (line 3)"},
		{"unknown provider", "tiers:\n  kavi:\n    provider: nope\n    upstream_model: m\n", `config tiers.kavi.provider: "nope" is not defined`},
		{"deadline in words", "tiers:\n  kavi:\n    deadline: 45 seconds\n", "tiers.kavi.deadline: not a duration"},
		{"deadline without unit", "tiers:\n  mira:\n    deadline: 45\n", "tiers.mira.deadline: not a duration"},
		{"negative size", "tiers:\n  kavi:\n    max_output: -5\n", "config tiers.kavi.max_output"},
		{"negative conns", "providers:\n  p:\n    base_url: http://p\n    max_conns: -1\n", "config providers.p.max_conns"},
		{"unknown tier", "tiers:\n  gpt4:\n    max_output: 1\n", "config tiers.gpt4: unknown tier"},
		{"not yaml", "tiers: [", "yaml: line 1"},
		{"two documents", "tiers:\n  kavi:\n    max_output: 100\n---\ntiers:\n  gpt4:\n    max_output: 1\n", "a second YAML document"},
	}
	for _, f := range files {
		t.Run("file "+f.name, func(t *testing.T) {
			p := write(strings.ReplaceAll(f.name, " ", "_")+".yaml", f.body)
			code, out, errOut := runCLI("serve", "--config", p, "--database-url", "postgres://x@127.0.0.1:1/db",
				"--addr", "127.0.0.1:0", "--admin-addr", "")
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			require.Equal(t, "gateway serve: invalid configuration: ", errOut[:min(len(errOut), 38)], errOut)
			require.Contains(t, errOut, f.want)
			require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %s", errOut)
		})
	}
	t.Run("file missing", func(t *testing.T) {
		code, _, errOut := runCLI("serve", "--config", filepath.Join(dir, "missing.yaml"), "--database-url", "postgres://x@127.0.0.1:1/db",
			"--addr", "127.0.0.1:0", "--admin-addr", "")
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "invalid configuration: config: open ")
	})

	tiers := map[string]string{
		"unknown tier":  "tiers:\n  gpt4:\n    max_output: 1\n",
		"bad max":       "tiers:\n  kavi:\n    max_output: 0\n",
		"bad effort":    "tiers:\n  mira:\n    reasoning:\n      default_effort: minimal\n",
		"bad price":     "tiers:\n  vaani:\n    prices:\n      input: 1e-3\n",
		"unknown field": "tiers:\n  kavi:\n    upstream_secret: x\n",
		"not yaml":      "tiers: [",
	}
	wants := map[string]string{"unknown tier": "tiers.gpt4", "bad max": "tiers.kavi.max_output", "bad effort": "tiers.mira.reasoning.default_effort",
		"bad price": "1e-3", "unknown field": "upstream_secret", "not yaml": "config"}
	for name, body := range tiers {
		t.Run(name, func(t *testing.T) {
			_, err := loadTiers(write(strings.ReplaceAll(name, " ", "_")+".yaml", body))
			require.ErrorContains(t, err, wants[name])
		})
	}
}

func TestConfigFileOverridesTiers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`
tiers:
  mira:
    label: Mira Fast
    max_output: 1024
    deadline: 30s
    prices:
      input: "0.10"
      output: 0.3
`), 0o600))
	tiers, err := loadTiers(p)
	require.NoError(t, err)
	i := tierIndex(tiers, "mira")
	require.Equal(t, "Mira Fast", tiers[i].Label)
	require.Equal(t, 1024, tiers[i].MaxOutput)
	require.EqualValues(t, 100_000, tiers[i].Prices.InputPerM)
	require.EqualValues(t, 300_000, tiers[i].Prices.OutputPerM)
	require.EqualValues(t, 50_000, tiers[i].Prices.CacheReadPerM, "fields the file does not name keep their defaults")
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = loadTiers(empty)
	require.NoError(t, err)
	// A document marker before the settings, or an empty document after
	// them, leaves one document of settings.
	marked := filepath.Join(t.TempDir(), "marked.yaml")
	require.NoError(t, os.WriteFile(marked, []byte("---\ntiers:\n  mira:\n    max_output: 512\n---\n# nothing more\n"), 0o600))
	tiers, err = loadTiers(marked)
	require.NoError(t, err)
	require.Equal(t, 512, tiers[tierIndex(tiers, "mira")].MaxOutput)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Retries default to the upstream's bounded retries unless the file says
// otherwise; 0 in the file means none.
func TestRetriesConfiguration(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "g.yaml")
	require.NoError(t, os.WriteFile(p, []byte("tiers:\n  kavi:\n    retries: 0\n  vaani:\n    retries: 4\n"), 0o600))
	st, err := loadSettings(p)
	require.NoError(t, err)
	require.Nil(t, st.Bindings["mira"].Retries, "unset: the default")
	require.Equal(t, 0, *st.Bindings["kavi"].Retries)
	require.Equal(t, 4, *st.Bindings["vaani"].Retries)
	a := &app{cfg: serveConfig{}}
	ups, err := a.buildUpstreams(st, newLogger(io.Discard, "json", "info"))
	require.NoError(t, err)
	require.Equal(t, 2, ups["mira"].Retries(), "the default retries twice")
	require.Equal(t, 0, ups["kavi"].Retries())
	require.Equal(t, 4, ups["vaani"].Retries())
	a.sim.Shutdown()
}

func TestAdminMeteringCommands(t *testing.T) {
	db := storetest.DB(t)
	url := db.Pool.Config().ConnString()
	org := admin(t, url, "org", "create", "--name", "Acme")
	require.Equal(t, map[string]any{"id": org["id"], "plan": "team"}, admin(t, url, "org", "set-plan", "--org", org["id"].(string), "--plan", "team"))
	ws := admin(t, url, "workspace", "create", "--org", org["id"].(string), "--name", "Research", "--slug", "r-and-d")
	require.Equal(t, "r-and-d", ws["slug"])
	require.Nil(t, ws["spend_cap_micros"])
	require.Equal(t, float64(2_500_000), admin(t, url, "workspace", "set-cap", "--workspace", ws["id"].(string), "--spend-cap-usd", "2.5")["spend_cap_micros"])
	require.Nil(t, admin(t, url, "workspace", "set-cap", "--workspace", ws["id"].(string), "--clear")["spend_cap_micros"])

	user := admin(t, url, "user", "create", "--email", "cy@example.com", "--org", org["id"].(string))
	key := admin(t, url, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--kind", "headless", "--credits-usd", "10")
	require.Equal(t, float64(-1_500_000), admin(t, url, "key", "adjust-credits", "--key-id", key["key_id"].(string), "--usd", "-1.5")["credits_adjustment_micros"])
	require.Equal(t, float64(500_000), admin(t, url, "key", "adjust-credits", "--key-id", key["key_id"].(string), "--usd", "2")["credits_adjustment_micros"])

	var plan string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select plan from organizations where id = $1`, org["id"]).Scan(&plan))
	require.Equal(t, "team", plan)
}

// A gateway that cannot bind one of its listeners serves on none of them:
// it exits 2 naming the address, without having served on the other.
func TestServeBindsEveryListenerOrNone(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	freeAddr := free.Addr().String()
	require.NoError(t, free.Close())

	for _, c := range []struct{ addr, admin, flag string }{
		{freeAddr, taken.Addr().String(), "--admin-addr"},
		{taken.Addr().String(), freeAddr, "--addr"},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"serve", "--addr", c.addr, "--admin-addr", c.admin,
			"--database-url", "postgres://nobody@127.0.0.1:1/none"}, &stdout, &stderr)
		require.Equal(t, 2, code, stderr.String())
		require.Contains(t, stderr.String(), c.flag+" "+taken.Addr().String())
		// The other address was bound and released, never served.
		ln, err := net.Listen("tcp", freeAddr)
		require.NoError(t, err, "the other listener was left open")
		require.NoError(t, ln.Close())
	}
}
