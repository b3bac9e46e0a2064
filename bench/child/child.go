// Package child runs the processes a benchmark or a test stands up beside
// itself (a simulator, a gateway, a proxy) and knows when they are ready:
// each logs JSON lines on stderr, and a process is ready once it has logged
// every message waited for.
package child

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ReadyTimeout bounds how long Start waits for a process to be ready.
const ReadyTimeout = time.Minute

// Process is a started child process.
type Process struct {
	Name string
	PID  int
	// Addr is the "addr" field of the first message waited for, when it
	// has one: where the process listens.
	Addr string

	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder // stdout
	stop sync.Once
}

// Start runs bin with args (env added to this process's environment) and
// returns once the process has logged every message in wait. With an empty
// wait it returns as soon as the process started. Stop it with Stop.
func Start(ctx context.Context, name, bin string, env, wait []string, args ...string) (*Process, error) {
	p := &Process{Name: name, cmd: exec.Command(bin, args...)}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", name, err)
	}
	p.PID = p.cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	ready := make(chan string, 1)
	var head strings.Builder // the first lines, to say why a start failed
	go func() {
		sc := bufio.NewScanner(stderr)
		addr, seen, signalled := "", map[string]bool{}, len(wait) == 0
		if signalled {
			ready <- ""
		}
		for sc.Scan() {
			if signalled {
				continue // keep draining, or the child blocks on a full pipe
			}
			if head.Len() < 4096 {
				head.WriteString(sc.Text() + "\n")
			}
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			msg, _ := line["msg"].(string)
			if msg == wait[0] {
				addr, _ = line["addr"].(string)
			}
			seen[msg] = true
			if allSeen(wait, seen) {
				ready <- addr
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			p.Stop()
			return nil, fmt.Errorf("%s exited before it was ready:\n%s", name, head.String())
		}
		p.Addr = addr
		return p, nil
	case <-time.After(ReadyTimeout):
		p.Stop()
		return nil, fmt.Errorf("%s did not become ready within %v", name, ReadyTimeout)
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

func allSeen(want []string, seen map[string]bool) bool {
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}

// Stdout is everything the process printed on stdout so far.
func (p *Process) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Stop interrupts the process and waits for it, killing it after ten
// seconds. Calling it twice is harmless.
func (p *Process) Stop() {
	p.stop.Do(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		exited := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
	})
}
