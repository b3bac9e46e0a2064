package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/bench/report"
)

// budgetLine is one line of the performance budget with what was measured.
// An Info line is a figure the budget has no bound for.
type budgetLine struct {
	What     string
	Measured string
	Budget   string
	Pass     bool
	Info     bool
}

// budgetRun measures the gateway's performance budget on a local stack:
// targets are direct, refproxy, [nginx], gateway, in that order.
type budgetRun struct {
	targets []load.Target
	opt     load.Options
	// duration and warmup, when set, replace the scenarios' own.
	duration, warmup time.Duration
	// frontier also searches the highest rate the gateway holds with its
	// p99 overhead under 1, 5 and 10 ms.
	frontier bool
	out      string
	stdout   io.Writer
	// placement says which CPUs the processes ran on: on cores the load
	// generator and the simulator share, a line may fail for their CPU.
	placement string
	lines     []budgetLine
}

func (b *budgetRun) byName(results []*load.Result, name string) *load.Result {
	for _, r := range results {
		if r.Target == name {
			return r
		}
	}
	return nil
}

// frontierStart is the rate the frontier search doubles from.
const frontierStart = 100

func (b *budgetRun) target(name string) load.Target {
	for _, t := range b.targets {
		if t.Name == name {
			return t
		}
	}
	return load.Target{}
}

func (b *budgetRun) scenario(name string) (*load.Scenario, error) {
	sc, err := load.LoadScenario(name)
	if err != nil {
		return nil, err
	}
	if b.duration > 0 {
		sc.Duration = b.duration
	}
	if b.warmup > 0 {
		sc.Warmup = b.warmup
	}
	return sc, sc.Validate()
}

func (b *budgetRun) add(what string, measured, budget time.Duration, upper bool) {
	pass := measured <= budget
	if !upper {
		pass = measured >= budget
	}
	b.lines = append(b.lines, budgetLine{What: what, Measured: fmtDur(measured), Budget: "≤ " + fmtDur(budget), Pass: pass})
}

// info adds a figure the budget has no bound for.
func (b *budgetRun) info(what, measured string) {
	b.lines = append(b.lines, budgetLine{What: what, Measured: measured, Budget: "-", Info: true})
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func (b *budgetRun) compare(ctx context.Context, sc *load.Scenario, name string) ([]*load.Result, error) {
	results, err := load.Compare(ctx, sc, b.targets, b.opt)
	if err != nil {
		return nil, err
	}
	cmp := &report.Comparison{Scenario: name, Results: results, Concurrency: sc.Concurrency}
	if err := write(cmp, filepath.Join(b.out, name), b.stdout); err != nil {
		return nil, err
	}
	return results, nil
}

// run measures every budget line the harness can reach on this machine.
func (b *budgetRun) run(ctx context.Context) error {
	if b.placement != "" {
		b.info("CPUs", b.placement)
	}
	// Throughput at saturation, against the bare reference proxy.
	sat, err := b.scenario("chat-nonstream")
	if err != nil {
		return err
	}
	results, err := b.compare(ctx, sat, "saturation")
	if err != nil {
		return err
	}
	direct, ref, gw := b.byName(results, "direct"), b.byName(results, "refproxy"), b.byName(results, "gateway")
	ratio := load.ThroughputRatio(gw, ref)
	b.lines = append(b.lines, budgetLine{What: "throughput at saturation, gateway / reference proxy",
		Measured: fmt.Sprintf("%.2f (%.0f / %.0f rps)", ratio, gw.Throughput, ref.Throughput), Budget: "≥ 0.80", Pass: ratio >= 0.8})

	// Overhead at half the direct path's saturation rate, open loop.
	half := *sat
	half.Name = "chat-nonstream-half-saturation"
	half.Mode, half.Rate, half.Concurrency = load.ModeOpen, direct.Throughput/2, 0
	if err := half.Validate(); err != nil {
		return err
	}
	results, err = b.compare(ctx, &half, half.Name)
	if err != nil {
		return err
	}
	over := load.Overhead(b.byName(results, "direct"), b.byName(results, "gateway"), "latency")
	rate := fmt.Sprintf(" at %.0f rps", half.Rate)
	b.add("non-streaming overhead p50"+rate, over[50], 150*time.Microsecond, true)
	b.add("non-streaming overhead p99"+rate, over[99], time.Millisecond, true)

	// Added latency with nothing queued: one request at a time.
	serial := *sat
	serial.Name = "chat-nonstream-one-at-a-time"
	serial.Concurrency = 1
	if err := serial.Validate(); err != nil {
		return err
	}
	if results, err = b.compare(ctx, &serial, serial.Name); err != nil {
		return err
	}
	direct = b.byName(results, "direct")
	over = load.Overhead(direct, b.byName(results, "gateway"), "latency")
	refOver := load.Overhead(direct, b.byName(results, "refproxy"), "latency")
	b.info("non-streaming overhead p50, one request at a time",
		fmt.Sprintf("%s (reference proxy %s)", fmtDur(over[50]), fmtDur(refOver[50])))
	b.info("non-streaming overhead p99, one request at a time",
		fmt.Sprintf("%s (reference proxy %s)", fmtDur(over[99]), fmtDur(refOver[99])))

	if b.frontier {
		// The highest open-loop rate held under each p99 overhead.
		budgets := []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond}
		probe := half
		probe.Name, probe.Rate = "frontier", frontierStart
		points, err := load.Frontier(ctx, &probe, b.target("gateway"), b.target("direct"), budgets, b.opt)
		if err != nil {
			return err
		}
		for _, p := range points {
			measured := "none held"
			if p.Rate > 0 {
				measured = fmt.Sprintf("%.0f rps (p99 %s)", p.Rate, fmtDur(p.P99Overhead))
			}
			b.info("throughput frontier: highest rate with p99 overhead under "+fmtDur(p.Budget), measured)
		}
	}

	// Streaming 256 tokens.
	st, err := b.scenario("chat-stream-256tok")
	if err != nil {
		return err
	}
	results, err = b.compare(ctx, st, st.Name)
	if err != nil {
		return err
	}
	d, g := b.byName(results, "direct"), b.byName(results, "gateway")
	b.add("streaming: added inter-frame gap p99", load.Overhead(d, g, "interframe")[99], 100*time.Microsecond, true)
	b.add("streaming: added time to first token p99", load.Overhead(d, g, "ttft")[99], time.Millisecond, true)
	b.lines = append(b.lines, budgetLine{What: "streaming: frame-order violations", Measured: fmt.Sprint(g.FrameViolations),
		Budget: "0", Pass: g.FrameViolations == 0})
	return b.write()
}

func (b *budgetRun) write() error {
	var sb strings.Builder
	sb.WriteString("PERFORMANCE BUDGET\n")
	width, mwidth := 0, 0
	for _, l := range b.lines {
		width, mwidth = max(width, len([]rune(l.What))), max(mwidth, len([]rune(l.Measured)))
	}
	pass, fail := 0, 0
	for _, l := range b.lines {
		verdict := "PASS"
		switch {
		case l.Info:
			verdict = "-"
		case !l.Pass:
			verdict = "FAIL"
			fail++
		default:
			pass++
		}
		fmt.Fprintf(&sb, "%-*s  %-*s  %-10s %s\n", width, l.What, mwidth, l.Measured, l.Budget, verdict)
	}
	fmt.Fprintf(&sb, "%d passed, %d failed\n", pass, fail)
	fmt.Fprint(b.stdout, "\n"+sb.String())
	return os.WriteFile(filepath.Join(b.out, "budget.txt"), []byte(sb.String()), 0o644)
}
