package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// GateConfig is the optional input moderation gate of one chat tier: the
// user text of a chat request on the tier goes through the guard before
// the upstream call, and a flagged input in one of Categories is refused
// 400 moderation_rejected, not billed.
type GateConfig struct {
	// Categories are the moderation categories that refuse a request
	// (names of ModerationCategories). Required: at least one.
	Categories []string
	// FailOpen serves the request unchecked when the guard cannot answer
	// (counted in gateway_chat_moderation_gate_fail_open_total and logged);
	// false refuses it with the guard's 503.
	FailOpen bool
}

// Validate names the first category that is not one.
func (g *GateConfig) Validate() error {
	if len(g.Categories) == 0 {
		return errors.New("categories: name at least one category that blocks")
	}
	for _, c := range g.Categories {
		if !slices.Contains(ModerationCategories[:], c) {
			return fmt.Errorf("categories: %q is not one of %s", c, strings.Join(ModerationCategories[:], ", "))
		}
	}
	return nil
}

// gate is a tier's gate, compiled.
type gate struct {
	block    uint16
	failOpen bool
}

func compileGate(g GateConfig) gate {
	out := gate{failOpen: g.FailOpen}
	for i, name := range ModerationCategories {
		if slices.Contains(g.Categories, name) {
			out.block |= 1 << i
		}
	}
	return out
}

// moderateInput runs the turn's tier gate, when it has one: every user
// message's text is one guard input (earlier turns too, since a client
// writes the whole history it sends). It is not billed to the client. Its
// latency is in gateway_chat_moderation_gate_seconds.
func (t *turn) moderateInput() *codec.Error {
	g, ok := t.ch.gates[t.up.Tier.Name]
	if !ok {
		return nil
	}
	var inputs []string
	for i := range t.req.Messages {
		m := &t.req.Messages[i]
		if m.Role != "user" {
			continue
		}
		if text := contentText(m.Content); strings.TrimSpace(text) != "" && !slices.Contains(inputs, text) {
			inputs = append(inputs, text)
		}
	}
	if len(inputs) == 0 {
		return nil
	}
	began := time.Now()
	a := &auxCall{ch: t.ch, up: t.ch.cfg.Aux.Guard, route: auxModerate, rid: t.requestID, inputs: inputs, tctx: t.tctx}
	results, cerr := a.judgeAll()
	elapsed := time.Since(began)
	t.ch.m.gate.Update(elapsed.Seconds())
	t.upstream += elapsed // the gate's wait is not the gateway's overhead
	if cerr != nil {
		if g.failOpen {
			t.ch.m.gateFailOpen.Inc()
			t.ch.cfg.Log.Warn("moderation gate failed open: the guard could not answer", "request_id", string(t.requestID),
				"tier", t.up.Tier.Name, "guard_error", cerr.Code.String())
			return nil
		}
		return cerr
	}
	var hit uint16
	for i := range results {
		hit |= results[i].v.cats & g.block
	}
	if hit == 0 {
		return nil
	}
	e := &codec.Error{Code: codec.CodeModerationRejected}
	for i, name := range ModerationCategories {
		if hit&(1<<i) != 0 {
			e.Detail.Categories = append(e.Detail.Categories, name)
		}
	}
	e.Message = "The input was refused by content moderation (" + strings.Join(e.Detail.Categories, ", ") + ")."
	return e
}

// checkGates validates the gates against the tiers and the guard.
func checkGates(gates map[string]GateConfig, tiers []hotpath.Tier, guard *Upstream) (map[string]gate, error) {
	out := map[string]gate{}
	for name, g := range gates {
		if !slices.ContainsFunc(tiers, func(t hotpath.Tier) bool { return t.Name == name }) {
			return nil, fmt.Errorf("moderation gate on %q: not a chat tier", name)
		}
		if guard == nil {
			return nil, fmt.Errorf("moderation gate on %s: no guard tier is bound", name)
		}
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("tiers.%s.moderation_gate.%w", name, err)
		}
		out[name] = compileGate(g)
	}
	return out, nil
}
