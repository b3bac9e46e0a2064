package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/edgegw/gateway/bench/faults"
	"github.com/edgegw/gateway/bench/load"
)

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	return ln, nil
}

// child is a process the local stack started.
type child struct {
	name string
	cmd  *exec.Cmd
	pid  int
	addr string
	out  strings.Builder // stdout, for the demo key
	mu   sync.Mutex
}

// spawn starts bin and waits until it logs every message in wait (JSON log
// lines on stderr); the "addr" of the first is the child's address.
func spawn(ctx context.Context, name, bin string, env []string, wait []string, args ...string) (*child, error) {
	c := &child{name: name, cmd: exec.Command(bin, args...)}
	c.cmd.Env = append(os.Environ(), env...)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", name, err)
	}
	c.pid = c.cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
		}
	}()
	ready := make(chan string, 1)
	var last strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		addr, seen := "", map[string]bool{}
		signalled := false
		for sc.Scan() {
			if last.Len() < 4096 {
				last.WriteString(sc.Text() + "\n")
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
			if !signalled && allSeen(wait, seen) {
				ready <- addr
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
	}()
	select {
	case a, ok := <-ready:
		if !ok {
			c.stop()
			return nil, fmt.Errorf("%s exited before it was ready:\n%s", name, last.String())
		}
		c.addr = a
		return c, nil
	case <-time.After(60 * time.Second):
		c.stop()
		return nil, fmt.Errorf("%s did not become ready within a minute", name)
	case <-ctx.Done():
		c.stop()
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

func (c *child) stdout() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func (c *child) stop() {
	if c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

var demoKey = regexp.MustCompile(`gw_live_[0-9A-Za-z]+`)

// stackConfig binds every tier to the simulator process, with deadlines
// short enough that the faults scorecard's hangs and stalls end quickly.
const stackConfig = `providers:
  simulator:
    base_url: %s
tiers:
  kavi:  {provider: simulator, upstream_model: sim-kavi, reasons: true, deadline: 3s, stream_idle_timeout: 2s}
  vaani: {provider: simulator, upstream_model: sim-vaani, reasons: true, deadline: 3s, stream_idle_timeout: 2s}
  mira:  {provider: simulator, upstream_model: sim-mira, reasons: false, deadline: 3s, stream_idle_timeout: 2s}
`

func runLocal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var bin, dbURL, scenarios string
	fs := flag.NewFlagSet("gwbench local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs)
	fs.StringVar(&bin, "gateway-bin", filepath.Join(".data", "bin", "gateway"), "the gateway binary (make build)")
	fs.StringVar(&dbURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL for the gateway [$DATABASE_URL]")
	fs.StringVar(&scenarios, "scenarios", "chat-nonstream,chat-stream-256tok", "comma-separated scenarios to compare")
	frontier := fs.Bool("frontier", false, "also search the throughput frontier (slower)")
	budget := fs.Bool("budget", true, "measure the performance budget (saturation, half-saturation overhead, streaming) instead of --scenarios")
	withFaults := fs.Bool("faults", true, "also run the failover scorecard")
	nginx := fs.String("nginx", "auto", "also compare nginx as a reverse proxy: auto (when installed), on or off")
	if err := parse(fs, args); err != nil {
		return err
	}
	if dbURL == "" {
		return usagef("--database-url (or DATABASE_URL) is required: `make bench` starts a private PostgreSQL")
	}
	out := c.outDir("local")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	sim, err := spawn(ctx, "simulator", bin, nil, []string{"simulator listening"}, "sim", "--sim-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer sim.stop()
	simURL := "http://" + sim.addr
	cfg := filepath.Join(out, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(stackConfig, simURL+"/v1")), 0o600); err != nil {
		return err
	}
	gw, err := spawn(ctx, "gateway", bin, []string{"DATABASE_URL=" + dbURL},
		[]string{"listening", "key invalidation channel listening"},
		"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--config", cfg, "--demo", "--log-level", "info")
	if err != nil {
		return err
	}
	defer gw.stop()
	key := ""
	for deadline := time.Now().Add(10 * time.Second); key == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		key = demoKey.FindString(gw.stdout())
	}
	if key == "" {
		return errors.New("the gateway printed no demo key")
	}
	ref, err := spawn(ctx, "refproxy", self, nil, []string{"refproxy listening"}, "refproxy", "--upstream", simURL, "--addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ref.stop()
	fmt.Fprintf(stderr, "gwbench: simulator %s, gateway %s (pid %d), reference proxy %s\n", sim.addr, gw.addr, gw.pid, ref.addr)

	targets := []load.Target{
		{Name: "direct", BaseURL: simURL, Wire: load.WireUpstream},
		{Name: "refproxy", BaseURL: "http://" + ref.addr, Wire: load.WireUpstream},
	}
	if *nginx != "off" {
		ng, err := startNginx(out, sim.addr)
		switch {
		case err == nil:
			defer ng.stop()
			targets = append(targets, load.Target{Name: "nginx", BaseURL: "http://" + ng.addr, Wire: load.WireUpstream})
		case *nginx == "on" || !errors.Is(err, errNoNginx):
			return err
		default:
			fmt.Fprintln(stderr, "gwbench: nginx is not installed; comparing without it")
		}
	}
	targets = append(targets, load.Target{Name: "gateway", BaseURL: "http://" + gw.addr, Key: key, PID: gw.pid})

	if *budget {
		b := &budgetRun{targets: targets, opt: c.options(stderr), duration: c.duration, out: out, stdout: stdout}
		if err := b.run(ctx); err != nil {
			return err
		}
		scenarios = ""
	}
	for _, name := range strings.Split(scenarios, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		c.scenario = strings.TrimSpace(name)
		sc, err := c.load()
		if err != nil {
			return err
		}
		cmp, err := compare(ctx, sc, targets, *frontier, c.options(stderr))
		if err != nil {
			return err
		}
		if err := write(cmp, filepath.Join(out, sc.Name), stdout); err != nil {
			return err
		}
	}
	if *withFaults {
		fmt.Fprintln(stdout, "\nfailover scorecard")
		scores := faults.Run(ctx, &http.Client{Timeout: 2 * time.Minute}, "http://"+gw.addr, key, faults.Cases())
		return writeScores(scores, filepath.Join(out, "faults"), stdout)
	}
	return nil
}
