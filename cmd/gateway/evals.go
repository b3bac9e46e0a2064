package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/control"
	"github.com/edgegw/gateway/proxy"
)

// evalFlags are the eval runner's settings (docs/evals.md, Bounds and
// configuration).
type evalFlags struct {
	Workers, Fleet int
	Lease, Poll    time.Duration
}

func (f evalFlags) validate() error {
	switch {
	case f.Workers < 0 || f.Workers > 1024:
		return errors.New("eval-workers: must be from 0 to 1024")
	case f.Fleet < 1:
		return errors.New("eval-fleet-concurrency: must be at least 1")
	case f.Lease < time.Second:
		return errors.New("eval-lease: must be at least 1s")
	case f.Poll <= 0:
		return errors.New("eval-poll: must be positive")
	}
	return nil
}

// evalChat is the chat pipeline as the eval routes and runner use it.
type evalChat struct{ *proxy.Chat }

func (evalChat) CompileSchema(raw []byte) (control.OutputSchema, *codec.Error) {
	s, cerr := proxy.CompileSchema(raw)
	if cerr != nil {
		return nil, cerr
	}
	return s, nil
}

// startEvals starts this process's eval runner over the chat pipeline.
func (a *app) startEvals(chat *proxy.Chat, log *slog.Logger) control.EvalConfig {
	f := a.cfg.Eval
	ec := evalChat{chat}
	r := &control.EvalRunner{DB: a.db, Chat: ec, Log: log, Workers: f.Workers, FleetConcurrency: f.Fleet,
		Lease: f.Lease, Poll: f.Poll}
	if a.ledger != nil {
		r.Ledger = a.ledger
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.evalStop, a.evalDone = cancel, make(chan struct{})
	go func() { defer close(a.evalDone); r.Run(ctx) }()
	return control.EvalConfig{Chat: ec, Runner: r}
}

// stopEvals stops claiming eval work and waits, within the shutdown bound,
// for the items in hand; an item still running after it is left to its
// lease and finished by another process.
func (a *app) stopEvals() {
	if a.evalStop == nil {
		return
	}
	a.evalStop()
	select {
	case <-a.evalDone:
	case <-time.After(a.cfg.ShutdownTimeout):
		a.log.Warn("eval items still running at shutdown; their leases will lapse")
	}
}
