package proxy

import (
	"hash/maphash"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
)

// Retry-After on the 503s of the chat routes (README, "How upstream faults
// reach clients"): model_unavailable carries the rest of the tier's breaker
// cooldown; upstream_overloaded carries the upstream's own Retry-After when
// it sent one; either is at least defaultRetryAfter and at most
// maxRetryAfter seconds.
const (
	// defaultRetryAfter is the Retry-After, in seconds, of a 503 with
	// nothing better to say.
	defaultRetryAfter = 1
	// maxRetryAfter bounds the Retry-After, in seconds, the gateway passes
	// on, whatever an upstream asked for.
	maxRetryAfter = 60
)

// The 503 refusals, preallocated for every Retry-After they may carry, so
// that a flood of them allocates nothing. Index: seconds.
var (
	unavailableAfter = retryTable(codec.CodeModelUnavailable, "The model is unavailable right now; retry shortly.")
	overloadedAfter  = retryTable(codec.CodeUpstreamOverloaded, "The model is overloaded right now; retry shortly.")

	errModelUnavailable = unavailableAfter[defaultRetryAfter]
	errOverloaded       = overloadedAfter[defaultRetryAfter]

	// errLedgerSaturated refuses billable work while its ledger row could
	// not be kept (Chat.ledgerRefusal).
	errLedgerSaturated = &codec.Error{Code: codec.CodeServiceUnavailable,
		Message: "The gateway cannot record usage right now; retry shortly.", Detail: codec.Detail{RetryAfter: defaultRetryAfter}}
)

func retryTable(code codec.Code, msg string) *[maxRetryAfter + 1]*codec.Error {
	var t [maxRetryAfter + 1]*codec.Error
	for i := range t {
		t[i] = &codec.Error{Code: code, Message: msg, Detail: codec.Detail{RetryAfter: max(i, defaultRetryAfter)}}
	}
	return &t
}

// retrySeconds is d rounded up to whole seconds, within the bounds.
func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return min(max(s, defaultRetryAfter), maxRetryAfter)
}

// unavailableFor is model_unavailable with Retry-After d.
func unavailableFor(d time.Duration) *codec.Error { return unavailableAfter[retrySeconds(d)] }

// overloadedFor is upstream_overloaded with Retry-After d.
func overloadedFor(d time.Duration) *codec.Error { return overloadedAfter[retrySeconds(d)] }

// upstreamRetryAfter reads how long an upstream asked to be left alone:
// retry-after-ms (OpenAI's), else Retry-After in seconds or as an HTTP date.
// It returns 0 when the answer says nothing usable.
func upstreamRetryAfter(resp *fasthttp.Response) time.Duration {
	if v := resp.Header.Peek("Retry-After-Ms"); len(v) > 0 {
		if ms, err := strconv.ParseFloat(string(v), 64); err == nil && ms > 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := resp.Header.Peek("Retry-After")
	if len(v) == 0 {
		return 0
	}
	if s, err := strconv.Atoi(string(v)); err == nil {
		if s > 0 && s < 1e6 {
			return time.Duration(s) * time.Second
		}
		return 0
	}
	if at, err := fasthttp.ParseHTTPDate(v); err == nil {
		return max(time.Until(at), 0)
	}
	return 0
}

// keySeed seeds the hashes that tell a client's retry of a failed request
// from a new request.
var keySeed = maphash.MakeSeed()

// requestKey identifies an upstream request by its body, for the breaker:
// identical bodies are one request retried. Never 0.
func requestKey(req *fasthttp.Request) uint64 {
	return maphash.Bytes(keySeed, req.Body()) | 1
}
