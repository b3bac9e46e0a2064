package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindRootFrom(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	mustMkdir(t, deep)
	mustWrite(t, filepath.Join(root, "go.mod"), "module example.com/x\n")
	// A directory named go.mod is not a module file.
	mustMkdir(t, filepath.Join(root, "a", "go.mod"))

	for _, start := range []string{root, filepath.Join(root, "a"), deep, deep + "/"} {
		got, err := findRootFrom(start)
		if err != nil {
			t.Fatalf("findRootFrom(%q): %v", start, err)
		}
		if got != root {
			t.Errorf("findRootFrom(%q) = %q, want %q", start, got, root)
		}
	}

	nested := filepath.Join(root, "a", "b")
	mustWrite(t, filepath.Join(nested, "go.mod"), "module example.com/y\n")
	if got, err := findRootFrom(deep); err != nil || got != nested {
		t.Errorf("findRootFrom(%q) = %q, %v; want the nearest module %q", deep, got, err, nested)
	}
}

func TestFindRootFromNoModule(t *testing.T) {
	dir := t.TempDir()
	for p := dir; p != filepath.Dir(p); p = filepath.Dir(p) {
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			t.Fatalf("precondition: the temporary directory %s lies inside a module at %s", dir, p)
		}
	}
	if got, err := findRootFrom(dir); err == nil || !strings.HasPrefix(err.Error(), "cannot find repository root") {
		t.Errorf("findRootFrom(%q) = %q, %v; want a 'cannot find repository root' error", dir, got, err)
	}
}

func TestRenderEnv(t *testing.T) {
	tests := []struct {
		name              string
		pgPort, redisPort int
		chromium          string
		want              string
	}{
		{"postgres only", 54329, 0, "", "DATABASE_URL=postgres://gateway@127.0.0.1:54329/gateway?sslmode=disable\n"},
		{"with redis", 54329, 63799, "", "DATABASE_URL=postgres://gateway@127.0.0.1:54329/gateway?sslmode=disable\n" +
			"REDIS_URL=redis://127.0.0.1:63799/0\n"},
		{"other ports", 6000, 6001, "", "DATABASE_URL=postgres://gateway@127.0.0.1:6000/gateway?sslmode=disable\n" +
			"REDIS_URL=redis://127.0.0.1:6001/0\n"},
		{"with chromium", 54329, 63799, "/usr/bin/chromium",
			"DATABASE_URL=postgres://gateway@127.0.0.1:54329/gateway?sslmode=disable\n" +
				"REDIS_URL=redis://127.0.0.1:63799/0\nCHROMIUM_PATH=/usr/bin/chromium\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(renderEnv(tt.pgPort, tt.redisPort, tt.chromium)); got != tt.want {
				t.Errorf("renderEnv(%d, %d, %q) =\n%s\nwant\n%s", tt.pgPort, tt.redisPort, tt.chromium, got, tt.want)
			}
		})
	}
}

func TestHighestVersion(t *testing.T) {
	f := func(names []string, want string, wantOK bool) {
		t.Helper()
		got, ok := highestVersion(names)
		if got != want || ok != wantOK {
			t.Errorf("highestVersion(%q) = %q, %v; want %q, %v", names, got, ok, want, wantOK)
		}
	}
	f([]string{"15"}, "15", true)
	f([]string{"9.6", "15", "13"}, "15", true)
	f([]string{"9.6", "10"}, "10", true) // numeric, not lexical
	f([]string{"16", "9.6", "17"}, "17", true)
	f([]string{"9.5", "9.6"}, "9.6", true)
	f([]string{"README", "15", "15beta"}, "15", true)
	f([]string{"README", "", "+16", "-1"}, "", false)
	f(nil, "", false)
}

func TestInstalledVersions(t *testing.T) {
	lib := t.TempDir()
	for _, v := range []string{"13", "15", "16"} {
		mustMkdir(t, filepath.Join(lib, v, "bin"))
		mustWrite(t, filepath.Join(lib, v, "bin", "pg_ctl"), "")
	}
	mustWrite(t, filepath.Join(lib, "13", "bin", "initdb"), "")
	mustWrite(t, filepath.Join(lib, "15", "bin", "initdb"), "")
	// 16 is a client-only install: no initdb, so no server.

	got := installedVersions(lib)
	if strings.Join(got, ",") != "13,15" {
		t.Fatalf("installedVersions = %q, want [13 15]", got)
	}
	if v, _ := highestVersion(got); v != "15" {
		t.Errorf("highest installed server = %q, want 15", v)
	}
}

func TestParsePostmasterPID(t *testing.T) {
	const file = "4242\n/srv/.data/pg\n1700000000\n54329\n\n127.0.0.1\n  1234567    65536\nready   \n"
	pid, port, err := parsePostmasterPID([]byte(file))
	if err != nil || pid != 4242 || port != 54329 {
		t.Errorf("parsePostmasterPID = %d, %d, %v; want 4242, 54329, nil", pid, port, err)
	}
	for _, bad := range []string{"", "4242\n", "x\na\nb\n54329\n", "4242\na\nb\nport\n"} {
		if _, _, err := parsePostmasterPID([]byte(bad)); err == nil {
			t.Errorf("parsePostmasterPID(%q): want an error", bad)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	f := func(stat, wantComm string, wantState byte, wantOK bool) {
		t.Helper()
		comm, state, ok := parseProcStat([]byte(stat))
		if comm != wantComm || state != wantState || ok != wantOK {
			t.Errorf("parseProcStat(%q) = %q, %q, %v; want %q, %q, %v", stat, comm, state, ok, wantComm, wantState, wantOK)
		}
	}
	f("123 (postgres) S 1 123 123 0", "postgres", 'S', true)
	f("77 (redis-server) Z 1", "redis-server", 'Z', true)
	f("9 (a) b (c)) R 1", "a) b (c)", 'R', true)
	f("9 postgres S", "", 0, false)
	f("9 (postgres)", "", 0, false)
}

func TestCanSearch(t *testing.T) {
	a := account{name: "svc", uid: 101, gid: 104, groups: []uint32{103}, switchTo: true}
	tests := []struct {
		name     string
		mode     os.FileMode
		uid, gid uint32
		want     bool
	}{
		{"world searchable", 0o755, 0, 0, true},
		{"private to root", 0o700, 0, 0, false},
		{"root group only, not a member", 0o750, 0, 0, false},
		{"owner", 0o700, 101, 0, true},
		{"owner without x, even if others have it", 0o601, 101, 0, false},
		{"primary group", 0o750, 0, 104, true},
		{"supplementary group", 0o710, 0, 103, true},
		{"group without x", 0o701, 0, 104, false},
		{"others x only", 0o711, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := a.canSearch(tt.mode, tt.uid, tt.gid); got != tt.want {
				t.Errorf("canSearch(%v, uid %d, gid %d) = %v, want %v", tt.mode, tt.uid, tt.gid, got, tt.want)
			}
		})
	}
	if root := (account{}); !root.canSearch(0o700, 5, 5) {
		t.Error("root must be able to enter any directory")
	}
}

func TestAppendCommand(t *testing.T) {
	got := string(appendCommand([]byte("x"), "SET", "k", ""))
	if want := "x*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"; got != want {
		t.Errorf("appendCommand = %q, want %q", got, want)
	}
}

func TestPingConn(t *testing.T) {
	tests := []struct {
		name    string
		reply   string
		wantErr bool
	}{
		{"pong", "+PONG\r\n", false},
		{"loading", "-LOADING Redis is loading the dataset in memory\r\n", true},
		{"auth", "-NOAUTH Authentication required.\r\n", true},
		{"closed", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			got := make(chan []byte, 1)
			go func() {
				defer server.Close()
				buf := make([]byte, 64)
				n, _ := server.Read(buf)
				got <- buf[:n]
				io.WriteString(server, tt.reply)
			}()
			err := pingConn(client)
			if (err != nil) != tt.wantErr {
				t.Errorf("pingConn with reply %q: err = %v, want error %v", tt.reply, err, tt.wantErr)
			}
			if req := <-got; !bytes.Equal(req, []byte("*1\r\n$4\r\nPING\r\n")) {
				t.Errorf("request = %q, want a RESP PING", req)
			}
		})
	}
}

func TestRedisArgs(t *testing.T) {
	args := redisArgs("/d", 63799)
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i += 2 {
		flags[args[i]] = args[i+1]
	}
	want := map[string]string{
		"--bind": "127.0.0.1", "--port": "63799", "--save": "", "--appendonly": "no",
		"--daemonize": "yes", "--dir": "/d", "--pidfile": "/d/redis.pid", "--logfile": "/d/redis.log",
	}
	for k, v := range want {
		if got, ok := flags[k]; !ok || got != v {
			t.Errorf("redisArgs %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
}

func TestPGConf(t *testing.T) {
	conf := string(pgConf(54329))
	for _, want := range []string{"listen_addresses = '127.0.0.1'\n", "port = 54329\n", "unix_socket_directories = ''\n", "fsync = off\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("pgConf lacks %q:\n%s", want, conf)
		}
	}
}

func TestIncludeConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "postgresql.conf")
	mustWrite(t, path, "port = 5432\n")
	for range 2 {
		if err := includeConf(path, "devstack.conf"); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "include_if_exists = 'devstack.conf'"); n != 1 {
		t.Errorf("include appears %d times, want once:\n%s", n, b)
	}
	if !strings.HasPrefix(string(b), "port = 5432\n") {
		t.Errorf("original settings were not kept:\n%s", b)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPgBouncerINI(t *testing.T) {
	ini := pgbouncerINI("/d/.data/pgbouncer", 54329, 6432)
	for _, want := range []string{
		"* = host=127.0.0.1 port=54329 user=gateway\n",
		"listen_addr = 127.0.0.1\n",
		"pool_mode = transaction\n",
		"pidfile = /d/.data/pgbouncer/pgbouncer.pid\n",
	} {
		if !strings.Contains(ini, want) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", want, ini)
		}
	}
	if port, ok := iniPort(ini); !ok || port != 6432 {
		t.Errorf("iniPort = %d, %v; want 6432", port, ok)
	}
	if got := string(appendPgBouncerEnv([]byte("A=1\n"), 6432)); got != "A=1\nPGBOUNCER_URL=postgres://gateway@127.0.0.1:6432/gateway?sslmode=disable\n" {
		t.Errorf("env = %q", got)
	}
}
