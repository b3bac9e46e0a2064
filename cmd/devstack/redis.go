package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// redisName is the server's program and process name.
const redisName = "redis-server"

// findRedis locates redis-server, installing it when missing and allowed.
func findRedis(ctx context.Context, in *installer) (string, error) {
	if p, err := exec.LookPath(redisName); err == nil {
		return p, nil
	}
	if err := in.install(ctx, "redis-server", "redis-server"); err != nil {
		return "", err
	}
	p, err := exec.LookPath(redisName)
	if err != nil {
		return "", fmt.Errorf("cannot find %s after installing it: %w", redisName, err)
	}
	return p, nil
}

func (s *stack) redisPIDFile() string { return filepath.Join(s.redisDir(), "redis.pid") }
func (s *stack) redisLog() string     { return filepath.Join(s.redisDir(), "redis.log") }

// redisPID returns the pid of the Redis server started from .data, if it runs.
func (s *stack) redisPID() (int, bool) {
	pid, ok := readPID(s.redisPIDFile())
	return pid, ok && processAlive(pid, redisName)
}

// redisRunning reports whether the Redis server of .data runs and answers on
// port.
func (s *stack) redisRunning(port int) bool {
	_, running := s.redisPID()
	return running && ping(loopback(port), time.Second) == nil
}

func (s *stack) upRedis(ctx context.Context, bin string, a account, port int) error {
	if pid, running := s.redisPID(); running {
		if err := waitPing(ctx, port, 5*time.Second); err != nil {
			return fmt.Errorf("cannot use the Redis server of %s (pid %d): it does not answer on %s (%w); stop it first with: go run ./cmd/devstack down",
				s.rel(s.redisDir()), pid, loopback(port), err)
		}
		logf("redis already running on %s (pid %d)", loopback(port), pid)
		return nil
	}
	if err := checkPortFree(port, "--redis-port"); err != nil {
		return err
	}
	if err := a.ensureDir(s.redisDir(), 0o750); err != nil {
		return err
	}
	cmd := a.command(ctx, s.redisDir(), bin, redisArgs(s.redisDir(), port)...)
	if _, err := runOutput(cmd); err != nil {
		return withLog(fmt.Errorf("cannot start Redis: %w", err), s.rel(s.redisLog()))
	}
	if err := waitPing(ctx, port, 15*time.Second); err != nil {
		return withLog(fmt.Errorf("cannot reach Redis on %s: %w", loopback(port), err), s.rel(s.redisLog()))
	}
	pid, _ := s.redisPID()
	logf("redis started on %s as user %s (pid %d, dir %s)", loopback(port), a.name, pid, s.rel(s.redisDir()))
	return nil
}

// redisArgs is the command line of a daemonized, loopback-only Redis server
// without persistence whose files all live in dir.
func redisArgs(dir string, port int) []string {
	return []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--protected-mode", "yes",
		"--daemonize", "yes",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--pidfile", filepath.Join(dir, "redis.pid"),
		"--logfile", filepath.Join(dir, "redis.log"),
	}
}

// downRedis stops the Redis server of .data. Without save points, SIGTERM
// shuts it down without writing a snapshot, like SHUTDOWN NOSAVE.
func (s *stack) downRedis() error {
	pid, running := s.redisPID()
	if !running {
		logf("redis is not running")
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("cannot stop Redis (pid %d): %w", pid, err)
	}
	if err := waitExit(pid, redisName, 15*time.Second); err != nil {
		return err
	}
	logf("redis stopped (pid %d)", pid)
	return nil
}

// waitPing waits until a Redis server answers PING on the loopback port.
func waitPing(ctx context.Context, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ping(loopback(port), time.Second)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ping dials addr and checks that it answers PING with PONG.
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("cannot set deadline: %w", err)
	}
	return pingConn(conn)
}

// pingConn sends PING in RESP and expects the simple string PONG.
func pingConn(rw io.ReadWriter) error {
	if _, err := rw.Write(appendCommand(nil, "PING")); err != nil {
		return fmt.Errorf("cannot send PING: %w", err)
	}
	line, err := bufio.NewReader(rw).ReadString('\n')
	if err != nil {
		return fmt.Errorf("cannot read PING reply: %w", err)
	}
	if reply := strings.TrimRight(line, "\r\n"); reply != "+PONG" {
		return fmt.Errorf("cannot use server: PING answered %q, want +PONG", reply)
	}
	return nil
}

// appendCommand appends a RESP array of bulk strings, the form in which
// clients send commands.
func appendCommand(dst []byte, args ...string) []byte {
	dst = fmt.Appendf(dst, "*%d\r\n", len(args))
	for _, a := range args {
		dst = fmt.Appendf(dst, "$%d\r\n%s\r\n", len(a), a)
	}
	return dst
}
