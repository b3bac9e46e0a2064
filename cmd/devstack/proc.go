package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runOutput runs cmd and returns its combined output. A failure carries the
// last lines of that output.
func runOutput(cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 5 * time.Second // a daemon that keeps our pipe open must not hang us
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w", filepath.Base(cmd.Path), err)
		if tail := lastLines(out.String(), 15); tail != "" {
			err = fmt.Errorf("%w\n%s", err, tail)
		}
	}
	return out.String(), err
}

// lastLines returns at most n trailing non-empty lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// tailFile returns the last n lines of a log file, or "" when unreadable.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), n)
}

// withLog appends the tail of a server log to err.
func withLog(err error, logFile string) error {
	if tail := tailFile(logFile, 15); tail != "" {
		return fmt.Errorf("%w\nlast lines of %s:\n%s", err, logFile, tail)
	}
	return err
}

// readPID reads a pid file holding one number.
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// processAlive reports whether pid is a live (not zombie) process named name.
// Without /proc it falls back to a signal-0 probe and cannot check the name.
func processAlive(pid int, name string) bool {
	if pid <= 0 {
		return false
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		err := syscall.Kill(pid, 0)
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	comm, state, ok := parseProcStat(b)
	return ok && comm == name && state != 'Z' && state != 'X'
}

// parseProcStat extracts the command name and state from /proc/PID/stat,
// whose second field is the name in parentheses (which may itself contain
// spaces and parentheses) and whose third is a one-letter state.
func parseProcStat(b []byte) (comm string, state byte, ok bool) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open || closing+2 >= len(b) || b[closing+1] != ' ' {
		return "", 0, false
	}
	return string(b[open+1 : closing]), b[closing+2], true
}

// waitExit waits until pid is no longer a live process named name.
func waitExit(pid int, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for processAlive(pid, name) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cannot stop %s (pid %d): still running after %s", name, pid, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// loopback is the address the servers listen on.
func loopback(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// checkPortFree fails when something already listens on the loopback port.
func checkPortFree(port int, flagName string) error {
	ln, err := net.Listen("tcp", loopback(port))
	if err != nil {
		return fmt.Errorf("cannot use %s: the port is taken by another program (%w); stop that program or pick another port with %s", loopback(port), err, flagName)
	}
	return ln.Close()
}
