// Command gwbench is the gateway's bench harness: a load generator that
// tells the truth about tail latency, overhead and frame order.
//
//	gwbench run      --scenario NAME|FILE --target URL [--key KEY] [--model M] [--path P] [--header H] [--pid NAME=PID]...
//	gwbench compare  --scenario NAME|FILE --direct URL --gateway URL --key KEY [--also NAME=URL[,option=value]...]... [--pid NAME=PID]...
//	gwbench faults   --gateway URL --key KEY
//	gwbench local    [--budget] [--scenarios a,b] [--targets a,b] [--frontier] [--faults]   start simulator, gateway and reference proxy here, measure
//	gwbench refproxy --upstream URL [--addr ADDR]
//	gwbench scenarios
//
// Every run writes a text summary, a JSON report and HTML/SVG plots under
// --out (default bench/results/<time>).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/edgegw/gateway/bench/faults"
	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/bench/refproxy"
	"github.com/edgegw/gateway/bench/report"
)

const usage = `usage: gwbench <command> [flags]

commands:
  run        run one scenario against one target
  compare    run one scenario against the upstream directly and through the gateway (and others), interleaved
  faults     drive every upstream fault through every wire of a gateway and score each answer
  local      start a simulator, a gateway and the reference proxy on loopback, then compare and score
  refproxy   serve the bare byte-forwarding reference proxy
  scenarios  list the shipped scenarios

Run 'gwbench <command> --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := args[0], args[1:]
	var err error
	switch cmd {
	case "run":
		err = runOne(ctx, args, stdout, stderr)
	case "compare":
		err = runCompare(ctx, args, stdout, stderr)
	case "faults":
		err = runFaults(ctx, args, stdout, stderr)
	case "local":
		err = runLocal(ctx, args, stdout, stderr)
	case "refproxy":
		err = runRefproxy(ctx, args, stderr)
	case "scenarios":
		for _, s := range load.ShippedScenarios() {
			fmt.Fprintln(stdout, s)
		}
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gwbench: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gwbench %s: %v\n", cmd, err)
		return 2
	case errors.Is(err, errScoreFailed):
		return 1
	default:
		fmt.Fprintf(stderr, "gwbench %s: %v\n", cmd, err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

var errScoreFailed = errors.New("scorecard has failures")

// common holds the flags every measuring command takes.
type common struct {
	scenario string
	out      string
	seed     int64
	duration time.Duration
	quiet    bool
}

func (c *common) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.scenario, "scenario", "chat-nonstream", "shipped scenario name or YAML file")
	fs.StringVar(&c.out, "out", "", "report directory (default bench/results/<time>-<scenario>)")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the request mix")
	fs.DurationVar(&c.duration, "duration", 0, "override the scenario's measured duration")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress line")
}

func (c *common) load() (*load.Scenario, error) {
	sc, err := load.LoadScenario(c.scenario)
	if err != nil {
		return nil, usagef("--scenario: %v", err)
	}
	if c.duration > 0 {
		sc.Duration = c.duration
	}
	if err := sc.Validate(); err != nil {
		return nil, usagef("scenario %s: %v", sc.Name, err)
	}
	return sc, nil
}

func (c *common) options(stderr io.Writer) load.Options {
	o := load.Options{Seed: c.seed}
	if !c.quiet {
		o.Progress = stderr
	}
	return o
}

func (c *common) outDir(name string) string {
	if c.out != "" {
		return c.out
	}
	return filepath.Join("bench", "results", time.Now().UTC().Format("20060102-150405")+"-"+name)
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func machine() string {
	return fmt.Sprintf("%d CPU, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// write renders every report of c and prints the summary.
func write(c *report.Comparison, dir string, stdout io.Writer) error {
	c.Machine, c.When = machine(), time.Now().UTC()
	c.Command = "gwbench " + strings.Join(os.Args[1:], " ")
	if err := report.WriteText(stdout, c); err != nil {
		return err
	}
	paths, err := report.WriteAll(dir, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nreports: %s\n", strings.Join(paths, ", "))
	return nil
}

func runOne(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var target, key string
	fs := flag.NewFlagSet("gwbench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs)
	fs.StringVar(&target, "target", "", "base URL to load, e.g. http://127.0.0.1:8080 (required)")
	fs.StringVar(&key, "key", os.Getenv("GWBENCH_KEY"), "Bearer key for a gateway target [$GWBENCH_KEY]")
	upstream := fs.Bool("upstream", false, "the target is an upstream server: speak its plain /v1/chat/completions")
	var t load.Target
	fs.StringVar(&t.Model, "model", "", "the model every request names ({tier} stands for its tier), instead of the tier or sim-TIER")
	fs.StringVar(&t.Path, "path", "", "the route to post to, after the target URL's path, instead of the wire's, e.g. /chat/completions")
	fs.StringVar(&t.AuthHeader, "header", "", `the header that authenticates every request, "Name: value", instead of --key's Bearer`)
	var pids multiFlag
	fs.Var(&pids, "pid", "a process to measure, NAME=PID: --pid target=PID is the target's own; repeatable")
	if err := parse(fs, args); err != nil {
		return err
	}
	if target == "" {
		return usagef("--target is required")
	}
	if t.AuthHeader != "" {
		if _, _, err := load.ParseHeader(t.AuthHeader); err != nil {
			return usagef("--header: %v", err)
		}
	}
	procs, err := parsePIDs(pids)
	if err != nil {
		return err
	}
	sc, err := c.load()
	if err != nil {
		return err
	}
	t.Name, t.BaseURL, t.Key = "target", target, key
	if *upstream {
		t.Wire = load.WireUpstream
	}
	targets := []load.Target{t}
	attachProcs(targets, procs)
	res, err := load.Run(ctx, sc, targets[0], c.options(stderr))
	if err != nil {
		return err
	}
	return write(&report.Comparison{Scenario: sc.Name, Results: []*load.Result{res}}, c.outDir(sc.Name), stdout)
}

// multiFlag collects repeated NAME=URL flags.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var direct, gateway, key string
	var also, pids multiFlag
	fs := flag.NewFlagSet("gwbench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs)
	fs.StringVar(&direct, "direct", "", "the upstream's base URL, e.g. the simulator's (required)")
	fs.StringVar(&gateway, "gateway", "", "the gateway's base URL (required)")
	fs.StringVar(&key, "key", os.Getenv("GWBENCH_KEY"), "the gateway key [$GWBENCH_KEY]")
	fs.Var(&also, "also", alsoUsage)
	fs.Var(&pids, "pid", pidUsage+" (targets: direct, gateway and the --also names)")
	frontier := fs.Bool("frontier", false, "also search the highest rate held with gateway p99 overhead under 1, 5 and 10 ms")
	if err := parse(fs, args); err != nil {
		return err
	}
	if direct == "" || gateway == "" {
		return usagef("--direct and --gateway are required")
	}
	procs, err := parsePIDs(pids)
	if err != nil {
		return err
	}
	sc, err := c.load()
	if err != nil {
		return err
	}
	targets := []load.Target{{Name: "direct", BaseURL: direct, Wire: load.WireUpstream}}
	seen := map[string]bool{"direct": true, "gateway": true}
	for _, a := range also {
		t, err := parseAlso(a)
		if err != nil {
			return err
		}
		if seen[t.Name] {
			return usagef("--also %s: a target of that name is already compared", t.Name)
		}
		seen[t.Name] = true
		targets = append(targets, t)
	}
	targets = append(targets, load.Target{Name: "gateway", BaseURL: gateway, Key: key})
	attachProcs(targets, procs)
	cmp, err := compare(ctx, sc, targets, *frontier, c.options(stderr))
	if err != nil {
		return err
	}
	return write(cmp, c.outDir(sc.Name), stdout)
}

func compare(ctx context.Context, sc *load.Scenario, targets []load.Target, frontier bool, opt load.Options) (*report.Comparison, error) {
	results, err := load.Compare(ctx, sc, targets, opt)
	if err != nil {
		return nil, err
	}
	cmp := &report.Comparison{Scenario: sc.Name, Results: results}
	if sc.Mode == load.ModeClosed {
		cmp.Concurrency = sc.Concurrency // streams open at once: memory per stream
	}
	if frontier {
		cmp.Frontier = map[string][]report.FrontierPoint{}
		for _, t := range targets[1:] {
			points, err := load.Frontier(ctx, sc, t, targets[0], []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond}, opt)
			if err != nil {
				return nil, err
			}
			for _, p := range points {
				cmp.Frontier[t.Name] = append(cmp.Frontier[t.Name], report.FrontierPoint(p))
			}
		}
	}
	return cmp, nil
}

func runFaults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var gateway, key, out string
	fs := flag.NewFlagSet("gwbench faults", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&gateway, "gateway", "", "the gateway's base URL (required); its tiers must sit on the simulator with short deadlines (see README)")
	fs.StringVar(&key, "key", os.Getenv("GWBENCH_KEY"), "the gateway key [$GWBENCH_KEY]")
	fs.StringVar(&out, "out", "", "report directory (default bench/results/<time>-faults)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if gateway == "" {
		return usagef("--gateway is required")
	}
	scores := faults.Run(ctx, &http.Client{Timeout: 2 * time.Minute}, gateway, key, faults.Cases())
	return writeScores(scores, out, stdout)
}

// writeScores prints the scorecard and, with out, keeps it as
// scorecard.txt and scorecard.json there.
func writeScores(scores []faults.Score, out string, stdout io.Writer) error {
	var table strings.Builder
	_, fail := faults.WriteTable(&table, scores)
	fmt.Fprint(stdout, table.String())
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "scorecard.txt"), []byte(table.String()), 0o644); err != nil {
			return err
		}
		rows := make([]report.ScoreRow, 0, len(scores))
		for _, s := range scores {
			rows = append(rows, report.ScoreRow{Case: s.Case.Name, Wire: s.Wire.String(), Want: s.Want, Got: s.Got, Pass: s.Pass})
		}
		raw, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "scorecard.json"), raw, 0o644); err != nil {
			return err
		}
	}
	if fail > 0 {
		return errScoreFailed
	}
	return nil
}

func runRefproxy(ctx context.Context, args []string, stderr io.Writer) error {
	var upstream, addr string
	fs := flag.NewFlagSet("gwbench refproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&upstream, "upstream", "", "base URL to forward to (required)")
	fs.StringVar(&addr, "addr", "127.0.0.1:8091", "listen address")
	if err := parse(fs, args); err != nil {
		return err
	}
	if upstream == "" {
		return usagef("--upstream is required")
	}
	p, err := refproxy.New(refproxy.Config{Upstream: upstream})
	if err != nil {
		return usagef("%v", err)
	}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, `{"msg":"refproxy listening","addr":%q}`+"\n", ln.Addr().String())
	go func() { <-ctx.Done(); p.Shutdown() }()
	return p.Serve(ln)
}
