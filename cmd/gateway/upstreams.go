package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/proxy"
)

// buildUpstreams binds every tier to its provider. Tiers on the built-in
// "sim" provider share one in-process simulator reached over an in-memory
// listener: the embedded default behind `make run`.
func (a *app) buildUpstreams(st settings, log *slog.Logger) (map[string]*proxy.Upstream, error) {
	ups := map[string]*proxy.Upstream{}
	var simLn *fasthttputil.InmemoryListener
	all := make([]*hotpath.Tier, 0, len(st.Tiers)+len(st.AuxTiers))
	for i := range st.Tiers {
		all = append(all, &st.Tiers[i])
	}
	for i := range st.AuxTiers {
		all = append(all, &st.AuxTiers[i])
	}
	for _, t := range all {
		b := st.Bindings[t.Name]
		uc := proxy.UpstreamConfig{
			Model: b.UpstreamModel, SystemPrompt: b.SystemPrompt, Reasons: b.Reasons,
			StreamIdle: b.StreamIdleTimeout, MaxResponseBytes: a.cfg.UpstreamMaxResponse, MaxEventBytes: a.cfg.UpstreamMaxEvent,
		}
		switch t.Name {
		case hotpath.TierEmbed:
			uc.Path = "/embeddings"
		case hotpath.TierRerank:
			uc.Path = "/rerank"
		}
		switch {
		case b.Retries == nil: // the upstream default
		case *b.Retries == 0:
			uc.Retries = -1 // none
		default:
			uc.Retries = *b.Retries
		}
		if b.Provider == simProvider {
			if simLn == nil {
				simLn = fasthttputil.NewInmemoryListener()
				a.sim = sim.New(sim.Config{TTFT: a.cfg.SimTTFT, ITL: a.cfg.SimITL, Log: log})
				a.warm("simulator", sim.Pretouch)
				go func() { _ = a.sim.Serve(simLn) }()
			}
			ln := simLn
			uc.BaseURL = "http://simulator.internal/v1"
			uc.Dial = func(string) (net.Conn, error) { return ln.Dial() }
		} else {
			p := st.Providers[b.Provider]
			uc.BaseURL, uc.MaxConns = p.BaseURL, p.MaxConns
			if p.APIKeyEnv != "" {
				uc.APIKey = os.Getenv(p.APIKeyEnv)
				if uc.APIKey == "" {
					return nil, fmt.Errorf("config providers.%s.api_key_env: %s is not set", b.Provider, p.APIKeyEnv)
				}
			}
		}
		up, err := proxy.NewUpstream(t, uc, hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
		if err != nil {
			return nil, fmt.Errorf("config tiers.%s: %w", t.Name, err) // aux tiers are named by their gw- prefix
		}
		ups[t.Name] = up
	}
	return ups, nil
}
