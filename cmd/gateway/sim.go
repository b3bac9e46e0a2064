package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/edgegw/gateway/bench/sim"
)

// runSim is `gateway sim`: the upstream simulator on its own listener,
// until SIGINT or SIGTERM.
func runSim(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveSim(ctx, args, stdout, stderr)
}

// serveSim parses the flags of `gateway sim` and serves until ctx ends.
func serveSim(ctx context.Context, args []string, _, stderr io.Writer) int {
	var cfg sim.Config
	fs := flag.NewFlagSet("gateway sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("sim-addr", "127.0.0.1:8090", "address the simulator listens on")
	fs.DurationVar(&cfg.TTFT, "sim-ttft", 0, "time to first token of every reply (a request's [[sim:ttft_ms=N]] overrides it)")
	fs.DurationVar(&cfg.ITL, "sim-itl", 0, "pause between two tokens of a stream (a request's [[sim:itl_ms=N]] overrides it)")
	fs.Uint64Var(&cfg.Seed, "sim-seed", 0, "mixed into every request's seed: another seed, other replies")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: gateway sim [flags]\n\nServe the deterministic OpenAI-compatible upstream simulator.\n"+
			"Every flag can also be set with the environment variable shown beside it.\n\n")
		fs.PrintDefaults()
	}
	if exit, run := parseCommand(fs, args, stderr); !run {
		return exit
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		fmt.Fprintf(stderr, "gateway sim: invalid configuration: sim-addr: %v\n", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "gateway sim: invalid configuration: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg.Log = log
	if err := sim.Pretouch(); err != nil {
		log.Warn("cannot compile JSON codecs ahead; their first requests will", "err", err)
	}
	s, ln, err := sim.Listen(*addr, cfg)
	if err != nil {
		log.Error("cannot start the simulator", "err", err)
		return 1
	}
	log.Info("simulator listening", "addr", ln.Addr().String())
	<-ctx.Done()
	log.Info("shutting down")
	s.Shutdown()
	return 0
}
