package proxy

import (
	"errors"

	"github.com/edgegw/gateway/codec"
)

// Defaults of the caps on what an upstream sends back.
const (
	DefaultMaxResponseBytes = 4 << 20
	DefaultMaxEventBytes    = 1 << 20
)

// errUpstreamTooLarge answers an upstream response over a size cap: an
// upstream failure, like a body that is not JSON.
var errUpstreamTooLarge = &codec.Error{Code: codec.CodeUpstreamOverloaded,
	Message: "The model sent a response larger than the gateway accepts.",
	Detail:  codec.Detail{RetryAfter: defaultRetryAfter}}

// upstreamOversize counts and logs (never the content) an upstream
// response over its cap; what is "body" or "event".
func (t *turn) upstreamOversize(what string, limit int) *codec.Error {
	t.ch.m.oversize.Inc()
	t.ch.cfg.Log.Warn("upstream response over the size cap", "request_id", string(t.requestID),
		"tier", t.up.Tier.Name, "part", what, "cap_bytes", limit)
	return errUpstreamTooLarge
}

// upstreamUnreadable is how a stream ends when the scanner fails: an event
// over the cap is counted and logged as such, anything else is malformed.
func (t *turn) upstreamUnreadable(err error) *codec.Error {
	if errors.Is(err, codec.ErrEventTooLarge) {
		t.upstreamOversize("event", t.up.cfg.MaxEventBytes)
		return errUpstreamMalformed
	}
	return errUpstreamMalformed
}
