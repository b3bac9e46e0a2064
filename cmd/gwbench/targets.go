package main

import (
	"os"
	"strconv"
	"strings"

	"github.com/edgegw/gateway/bench/load"
)

// alsoUsage describes --also.
const alsoUsage = "another target NAME=URL[,model=M][,path=P][,header=NAME: VALUE][,key=K][,wire=W][,pid=PID], " +
	"speaking the upstream's API unless wire says otherwise (a reference proxy, nginx, a peer gateway); " +
	"model may hold {tier}; values cannot hold commas; repeatable"

// parseAlso reads one --also: NAME=URL, then comma-separated options
// that say how the target names models (model, "{tier}" standing for the
// request's tier), where it serves chat (path, after the URL's own
// path), how it authenticates (header "Name: value", or key for a Bearer
// key), which wire it speaks (upstream by default; openai, v1 or v2 for
// another instance of this gateway) and which process is its own (pid).
func parseAlso(s string) (load.Target, error) {
	parts := strings.Split(s, ",")
	name, url, ok := strings.Cut(parts[0], "=")
	if !ok || name == "" || url == "" {
		return load.Target{}, usagef("--also %q: want NAME=URL[,option=value...]", s)
	}
	t := load.Target{Name: name, BaseURL: url, Wire: load.WireUpstream}
	for _, opt := range parts[1:] {
		k, v, ok := strings.Cut(opt, "=")
		k = strings.TrimSpace(k)
		if !ok || v == "" {
			return load.Target{}, usagef("--also %s: option %q: want KEY=VALUE", name, k)
		}
		switch k {
		case "model":
			t.Model = v
		case "path":
			t.Path = v
		case "header":
			if _, _, err := load.ParseHeader(v); err != nil {
				return load.Target{}, usagef("--also %s: %v", name, err)
			}
			t.AuthHeader = v
		case "key":
			t.Key = v
		case "wire":
			switch w := load.Wire(v); w {
			case load.WireUpstream, load.WireOpenAI, load.WireV1, load.WireV2:
				t.Wire = w
			default:
				return load.Target{}, usagef("--also %s: wire %q: upstream, openai, v1 or v2", name, v)
			}
		case "pid":
			pid, err := strconv.Atoi(v)
			if err != nil || pid <= 0 {
				return load.Target{}, usagef("--also %s: pid %q: want a process id", name, v)
			}
			t.Procs = append(t.Procs, load.Proc{Name: name, PID: pid, Own: true})
		default:
			return load.Target{}, usagef("--also %s: unknown option %q (model, path, header, key, wire, pid)", name, k)
		}
	}
	return t, nil
}

// pidUsage describes --pid.
const pidUsage = "a process to measure, NAME=PID: a target's name makes it that target's own process; " +
	"another name (postgres, simulator) is measured beside every target; " +
	"its CPU per 1,000 requests and its memory join the reports; repeatable"

// parsePIDs reads --pid NAME=PID flags.
func parsePIDs(flags []string) ([]load.Proc, error) {
	procs := make([]load.Proc, 0, len(flags))
	for _, f := range flags {
		name, v, ok := strings.Cut(f, "=")
		pid, err := strconv.Atoi(v)
		if !ok || name == "" || err != nil || pid <= 0 {
			return nil, usagef("--pid %q: want NAME=PID", f)
		}
		procs = append(procs, load.Proc{Name: name, PID: pid})
	}
	return procs, nil
}

// attachProcs adds to each target the processes of procs: those named
// after it as its own, the others, named after no target, beside it. A
// process is listed once per target.
func attachProcs(targets []load.Target, procs []load.Proc) {
	names := map[string]bool{}
	for _, t := range targets {
		names[t.Name] = true
	}
	for i := range targets {
		t := &targets[i]
		if len(t.Procs) == 0 && t.PID > 0 {
			t.Procs = []load.Proc{{Name: t.Name, PID: t.PID, Own: true}}
		}
		has := map[int]bool{}
		for _, p := range t.Procs {
			has[p.PID] = true
		}
		add := func(p load.Proc) {
			if !has[p.PID] {
				has[p.PID] = true
				t.Procs = append(t.Procs, p)
			}
		}
		for _, p := range procs {
			if p.Name == t.Name {
				p.Own = true
				add(p)
			}
		}
		for _, p := range procs {
			if !names[p.Name] {
				add(p)
			}
		}
		// The load generator shares the machine with what it measures:
		// beside the rest, its own CPU (its children are the targets)
		// completes what the run cost the machine.
		if len(t.Procs) > 0 {
			add(load.Proc{Name: "load generator", PID: os.Getpid(), Alone: true})
		}
		// The target's own processes first.
		own := t.Procs[:0:0]
		for _, p := range t.Procs {
			if p.Own {
				own = append(own, p)
			}
		}
		for _, p := range t.Procs {
			if !p.Own {
				own = append(own, p)
			}
		}
		t.Procs = own
	}
}
