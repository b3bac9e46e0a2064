package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/edgegw/gateway/bench/child"
	"github.com/edgegw/gateway/bench/faults"
	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/storage"
)

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	return ln, nil
}

var demoKey = regexp.MustCompile(`gw_live_[0-9A-Za-z]+`)

// stackConfig binds every tier to the simulator process, with deadlines
// short enough that the faults scorecard's hangs and stalls end quickly.
// Its plan meters every request (windows, leases, the ledger row) but is
// sized never to refuse the load a benchmark offers.
const stackConfig = `plans:
  default:
    requests_per_minute: 1000000000
    org_requests_per_minute: 1000000000
    max_concurrent_requests: 1000000
providers:
  simulator:
    base_url: %s
tiers:
  kavi:  {provider: simulator, upstream_model: sim-kavi, reasons: true, deadline: 3s, stream_idle_timeout: 2s}
  vaani: {provider: simulator, upstream_model: sim-vaani, reasons: true, deadline: 3s, stream_idle_timeout: 2s}
  mira:  {provider: simulator, upstream_model: sim-mira, reasons: false, deadline: 3s, stream_idle_timeout: 2s}
aux_tiers:
  gw-embed:  {provider: simulator, upstream_model: sim-embed, deadline: 3s}
  gw-rerank: {provider: simulator, upstream_model: sim-rerank, deadline: 3s}
  gw-guard:  {provider: simulator, upstream_model: guard-sim, deadline: 3s}
`

// localTargets are the targets `gwbench local` can run, in the order a
// comparison runs them: the first chosen is the baseline.
var localTargets = []string{"direct", "refproxy", "nginx", "gateway"}

// parseTargets reads --targets: comma-separated names among localTargets,
// at least one. They come back in localTargets' order, whatever order
// they were given in, so that the upstream directly, when chosen, stays
// the baseline.
func parseTargets(s string) (map[string]bool, error) {
	chosen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(localTargets, name) {
			return nil, usagef("--targets: unknown target %q (%s)", name, strings.Join(localTargets, ", "))
		}
		chosen[name] = true
	}
	if len(chosen) == 0 {
		return nil, usagef("--targets: name at least one of %s", strings.Join(localTargets, ", "))
	}
	return chosen, nil
}

func runLocal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var bin, dbURL, scenarios, targetList, gwFlags, pinList string
	var pids multiFlag
	fs := flag.NewFlagSet("gwbench local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs)
	fs.StringVar(&bin, "gateway-bin", filepath.Join(".data", "bin", "gateway"), "the gateway binary (make build)")
	fs.StringVar(&gwFlags, "gateway-flags", "", "more flags for `gateway serve`, space-separated; they come last, so they override the run's own (for example --admin-addr 127.0.0.1:9090 to read its metrics and profiles during the run)")
	fs.StringVar(&dbURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL for the gateway [$DATABASE_URL]")
	fs.StringVar(&scenarios, "scenarios", "chat-nonstream,chat-stream-256tok", "comma-separated scenarios to compare")
	var auxScenarios string
	fs.StringVar(&auxScenarios, "aux-scenarios", "embeddings,rerank,moderation", "comma-separated specialised-route scenarios compared after the budget or --scenarios; empty runs none")
	frontier := fs.Bool("frontier", false, "also search the throughput frontier: the highest rate the gateway holds with its p99 overhead under 1, 5 and 10 ms (up to a minute more)")
	budget := fs.Bool("budget", true, "measure the performance budget (saturation, half-saturation overhead, streaming) instead of --scenarios")
	withFaults := fs.Bool("faults", true, "also run the failover scorecard")
	nginx := fs.String("nginx", "auto", "also compare nginx as a reverse proxy: auto (when installed), on or off")
	fs.StringVar(&targetList, "targets", strings.Join(localTargets, ","),
		"comma-separated targets to compare among "+strings.Join(localTargets, ", ")+"; the first is the baseline (nginx only as --nginx allows)")
	fs.StringVar(&pinList, "pin-targets", "", "run each target's own process and PostgreSQL on these CPUs (a list: 1, 0,2 or 2-3) and the simulator and the load generator on the others, so that a target's throughput is not what they leave it; empty shares every CPU among them (docs/performance.md)")
	fs.Var(&pids, "pid", pidUsage+"; the processes local starts, the load generator and a PostgreSQL on this machine are measured without it")
	if err := parse(fs, args); err != nil {
		return err
	}
	procs, err := parsePIDs(pids)
	if err != nil {
		return err
	}
	chosen, err := parseTargets(targetList)
	if err != nil {
		return err
	}
	if *budget && !(chosen["direct"] && chosen["refproxy"] && chosen["gateway"]) {
		return usagef("--budget needs direct, refproxy and gateway among --targets (or --budget=false)")
	}
	var pin *pinPlan
	if pinList != "" {
		if pin, err = newPinPlan(pinList); err != nil {
			return err
		}
	}
	if dbURL == "" {
		return usagef("--database-url (or DATABASE_URL) is required: `make bench` starts a private PostgreSQL")
	}
	if !slices.ContainsFunc(procs, func(p load.Proc) bool { return p.Name == postgresProc }) {
		if pg, ok := localPostgres(ctx, dbURL); ok {
			procs = append(procs, pg)
		}
	}
	out := c.outDir("local")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	sim, err := child.Start(ctx, "simulator", bin, nil, []string{"simulator listening"}, "sim", "--sim-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer sim.Stop()
	simURL := "http://" + sim.Addr
	cfg := filepath.Join(out, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(stackConfig, simURL+"/v1")), 0o600); err != nil {
		return err
	}
	// The ledger's spool and journal of this run's gateway only: one in
	// the working directory's .data/spool would adopt what earlier runs'
	// gateways left there and replay it into this run's measure.
	spool, err := os.MkdirTemp(out, "ledger-spool-")
	if err != nil {
		return err
	}
	defer keepBacklog(spool, stderr)
	// One process: counters in process, as a single gateway runs, even
	// when REDIS_URL is in the environment.
	serve := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--redis-url", "", "--config", cfg,
		"--ledger-spool-dir", spool, "--demo", "--log-level", "info"}, strings.Fields(gwFlags)...)
	gw, err := child.Start(ctx, "gateway", bin, []string{"DATABASE_URL=" + dbURL},
		[]string{"listening", "key invalidation channel listening"}, serve...)
	if err != nil {
		return err
	}
	defer gw.Stop()
	key := ""
	for deadline := time.Now().Add(10 * time.Second); key == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		key = demoKey.FindString(gw.Stdout())
	}
	if key == "" {
		return errors.New("the gateway printed no demo key")
	}
	fmt.Fprintf(stderr, "gwbench: simulator %s, gateway %s (pid %d)\n", sim.Addr, gw.Addr, gw.PID)

	// Each target's own process first, then the simulator every target
	// loads: its CPU per request should not move between them.
	simProc := load.Proc{Name: "simulator", PID: sim.PID}
	own := func(p *child.Process) []load.Proc {
		return []load.Proc{{Name: p.Name, PID: p.PID, Own: true}, simProc}
	}
	var targets []load.Target
	if chosen["direct"] {
		targets = append(targets, load.Target{Name: "direct", BaseURL: simURL, Wire: load.WireUpstream,
			Procs: []load.Proc{{Name: "simulator", PID: sim.PID, Own: true}}})
	}
	if chosen["refproxy"] {
		ref, err := child.Start(ctx, "refproxy", self, nil, []string{"refproxy listening"}, "refproxy", "--upstream", simURL, "--addr", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ref.Stop()
		fmt.Fprintf(stderr, "gwbench: reference proxy %s\n", ref.Addr)
		targets = append(targets, load.Target{Name: "refproxy", BaseURL: "http://" + ref.Addr, Wire: load.WireUpstream,
			Procs: own(ref)})
	}
	if chosen["nginx"] && *nginx != "off" {
		ng, err := startNginx(ctx, out, sim.Addr)
		switch {
		case err == nil:
			defer ng.Stop()
			targets = append(targets, load.Target{Name: "nginx", BaseURL: "http://" + ng.Addr, Wire: load.WireUpstream,
				Procs: own(ng)})
		case *nginx == "on" || !errors.Is(err, errNoNginx):
			return err
		default:
			fmt.Fprintln(stderr, "gwbench: nginx is not installed; comparing without it")
		}
	}
	if chosen["gateway"] {
		targets = append(targets, load.Target{Name: "gateway", BaseURL: "http://" + gw.Addr, Key: key, PID: gw.PID,
			Procs: own(gw)})
	}
	if len(targets) == 0 {
		return errors.New("no target left to compare: nginx is off or not installed")
	}
	attachProcs(targets, procs)
	if pin != nil {
		defer pin.restore()
		if err := pin.apply(targets, sim.PID); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "gwbench: %s\n", placement(pin))
	}

	if *budget {
		b := &budgetRun{targets: targets, opt: c.options(stderr), duration: c.duration, frontier: *frontier, out: out, stdout: stdout,
			placement: placement(pin)}
		if err := b.run(ctx); err != nil {
			return err
		}
		scenarios = ""
	}
	if auxScenarios != "" {
		scenarios += "," + auxScenarios
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
		// The frontier search is chat's; the aux routes are compared at
		// their scenario's load only.
		cmp, err := compare(ctx, sc, targets, *frontier && sc.Route == "", c.options(stderr))
		if err != nil {
			return err
		}
		if err := write(cmp, filepath.Join(out, sc.Name), stdout); err != nil {
			return err
		}
	}
	// Rows the ledger spooled during the run are rows PostgreSQL did not
	// keep up with: their CPU is not in the figures above.
	if n, _ := storage.SpoolBacklog(spool); n > 0 {
		fmt.Fprintf(stdout, "\nledger: the gateway spooled %.1f MiB of rows PostgreSQL did not take during the run; "+
			"PostgreSQL's CPU above is short of what the run's rows cost\n", float64(n)/(1<<20))
	}
	if *withFaults {
		fmt.Fprintln(stdout, "\nfailover scorecard")
		scores := faults.Run(ctx, &http.Client{Timeout: 2 * time.Minute}, "http://"+gw.Addr, key, faults.Cases())
		return writeScores(scores, filepath.Join(out, "faults"), stdout)
	}
	return nil
}

// keepBacklog removes a run's spool directory once its gateway has
// stopped, unless rows are left in it: spool segments, or the journal of a
// gateway that could not write its last rows (or was killed). Those are
// ledger rows PostgreSQL has not received yet, and a gateway started with
// --ledger-spool-dir on it writes them.
func keepBacklog(dir string, stderr io.Writer) {
	spooled, journals := storage.SpoolBacklog(dir)
	if spooled > 0 || journals > 0 {
		fmt.Fprintf(stderr, "gwbench: ledger rows wait in %s (%.1f MiB spooled, %d journals); `gateway serve --ledger-spool-dir %s` writes them\n",
			dir, float64(spooled)/(1<<20), journals, dir)
		return
	}
	_ = os.RemoveAll(dir)
}
