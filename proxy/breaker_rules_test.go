package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
)

// productionBreaker sets the fixture's breakers to the defaults the gateway
// runs with.
func productionBreaker(o *fixtureOptions) { o.breaker = hotpath.BreakerConfig{} }

// One request whose upstream answers 500, sent three times as the OpenAI
// SDKs' default retry policy does, each retried by the gateway, does not
// open the tier's breaker: the tier stays open to everyone else. On the
// embedded default (the simulator) and with a recording upstream.
func TestBreakerClientRetriesDoNotOpen(t *testing.T) {
	for _, upstream := range []string{"simulator", "recording"} {
		t.Run(upstream, func(t *testing.T) {
			opts := []func(*fixtureOptions){productionBreaker}
			var rec *fakeUpstream
			if upstream == "recording" {
				rec = recordingSim(t)
				opts = append(opts, func(o *fixtureOptions) { o.dial = rec.dial })
			}
			f := newChatFixture(t, opts...)
			failing := `{"model":"mira","messages":[{"role":"user","content":"x [[sim:status=500]]"}]}`
			for attempt := range 3 {
				r := f.post(t, "/v1/chat/completions", failing)
				require.Equal(t, 503, r.status, "attempt %d", attempt)
				require.Contains(t, string(r.body), "upstream_overloaded")
				require.Equal(t, "1", r.header.Get("Retry-After"))
			}
			if rec != nil {
				require.EqualValues(t, 9, rec.calls.Load(), "three client attempts, each tried three times")
			}
			require.Equal(t, hotpath.BreakerClosed, f.chat.upstreamFor("mira").Breaker.State())
			r := f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"another tenant [[sim:tokens=2]]"}]}`)
			require.Equal(t, 200, r.status, "%s", r.body)
		})
	}
}

// A tier whose every request fails opens its breaker at the fifth distinct
// request (README: the breaker rule), and the next is refused at once with
// model_unavailable and the rest of the ten-second cooldown as Retry-After.
func TestBreakerOpensWhenTheTierFails(t *testing.T) {
	for _, upstream := range []string{"simulator", "recording"} {
		t.Run(upstream, func(t *testing.T) {
			opts := []func(*fixtureOptions){productionBreaker}
			var rec *fakeUpstream
			if upstream == "recording" {
				rec = recordingSim(t)
				opts = append(opts, func(o *fixtureOptions) { o.dial = rec.dial })
			}
			f := newChatFixture(t, opts...)
			br := f.chat.upstreamFor("mira").Breaker
			for i := range 5 {
				require.Equal(t, hotpath.BreakerClosed, br.State(), "before request %d", i+1)
				r := f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"`+strconv.Itoa(i)+` [[sim:status=502]]"}]}`)
				require.Equal(t, 503, r.status)
			}
			require.Equal(t, hotpath.BreakerOpen, br.State(), "five distinct failing requests open it")
			var calls int64
			if rec != nil {
				calls = rec.calls.Load()
			}
			r := f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"hello"}]}`)
			require.Equal(t, 503, r.status)
			require.Contains(t, string(r.body), "model_unavailable")
			after, err := strconv.Atoi(r.header.Get("Retry-After"))
			require.NoError(t, err)
			require.InDelta(t, 10, after, 1, "the rest of the cooldown")
			if rec != nil {
				require.Equal(t, calls, rec.calls.Load(), "refused without calling the upstream")
			}
			// auto routes around it.
			r = f.post(t, "/api/v1/chat", `{"model":"auto","messages":[{"role":"user","content":"hello"}]}`)
			require.Equal(t, 200, r.status)
		})
	}
}

// Every 503 carries Retry-After: the upstream's own (bounded) for
// upstream_overloaded, else one second; the gateway's retries wait out an
// upstream's Retry-After when it fits the request's deadline and give up
// at once when it does not.
func TestRetryAfter(t *testing.T) {
	var retryAfter atomic.Value
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		if v := retryAfter.Load().(string); v != "" {
			ctx.Response.Header.Set("Retry-After", v)
		}
		status := fasthttp.StatusTooManyRequests
		if strings.Contains(string(ctx.PostBody()), "unavailable") {
			status = fasthttp.StatusServiceUnavailable
		}
		ctx.SetStatusCode(status)
		ctx.SetBodyString(`{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	})
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.dial = up.dial
		o.upstream = func(c *UpstreamConfig) {
			// Streams get the tier's non-streaming deadline, so that both
			// have a deadline a Retry-After can pass.
			c.MaxRetryWait, c.Retries, c.StreamMax = 5*time.Second, 1, 1500*time.Millisecond
		}
	})
	cases := []struct {
		name, header, text string
		calls              int64
		want               string
		slow               bool // the gateway waited out the Retry-After
	}{
		{"bare 429", "", "a", 2, "1", false},
		{"bare 503", "", "unavailable", 2, "1", false},
		{"fits the deadline: honoured", "1", "b", 2, "1", true},
		{"past the deadline: at once", "2", "c", 1, "2", false},
		{"past the longest wait: at once", "30", "d", 1, "30", false},
		{"bounded", "86400", "e", 1, "60", false},
		{"503 with its own", "7", "unavailable e", 1, "7", false},
		{"HTTP date", time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat), "f", 1, "20", false},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(c.name+" stream="+strconv.FormatBool(stream), func(t *testing.T) {
				header := c.header
				if c.name == "HTTP date" {
					// Twenty seconds from now, not from when the table was
					// built: the cases before it take seconds.
					header = time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat)
				}
				retryAfter.Store(header)
				before := up.calls.Load()
				began := time.Now()
				r := f.post(t, "/v1/chat/completions", `{"model":"mira","stream":`+strconv.FormatBool(stream)+
					`,"messages":[{"role":"user","content":"`+c.text+`"}]}`)
				took := time.Since(began)
				require.Equal(t, 503, r.status)
				require.Contains(t, string(r.body), "upstream_overloaded")
				require.Equal(t, c.calls, up.calls.Load()-before)
				if c.name == "HTTP date" {
					got, err := strconv.Atoi(r.header.Get("Retry-After"))
					require.NoError(t, err)
					require.InDelta(t, 20, got, 2)
				} else {
					require.Equal(t, c.want, r.header.Get("Retry-After"))
				}
				if c.slow {
					require.GreaterOrEqual(t, took, time.Second)
				} else {
					require.Less(t, took, 500*time.Millisecond)
				}
			})
		}
	}
}

// A half-open breaker's probe that the upstream answers with a 429 or a
// 4xx is not a failure of the tier: the tier answered. It closes the
// breaker, as a reply would, and is answered as the upstream fault table
// says, not refused as model_unavailable; and the requests after it are
// served, not refused until the probe times out.
func TestBreakerProbeAnsweredWithoutAReplyClosesIt(t *testing.T) {
	for _, probe := range []struct{ content, code string }{
		{"[[sim:fault=rate_limited_bare]]", "upstream_overloaded"},
		{"[[sim:fault=context_length]]", "context_overflow"},
	} {
		t.Run(probe.code, func(t *testing.T) {
			f := newChatFixture(t, func(o *fixtureOptions) {
				o.breaker = hotpath.BreakerConfig{Cooldown: 200 * time.Millisecond, ProbeTimeout: 10 * time.Second}
			})
			br := f.chat.upstreamFor("mira").Breaker
			for i := 0; br.State() == hotpath.BreakerClosed; i++ {
				require.Less(t, i, 20, "the breaker opens")
				f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"`+strconv.Itoa(i)+` [[sim:status=502]]"}]}`)
			}
			time.Sleep(300 * time.Millisecond) // the cooldown ends: the next request is the probe
			r := f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"probe `+probe.content+`"}]}`)
			require.Contains(t, string(r.body), `"`+probe.code+`"`, "%d %s", r.status, r.body)
			require.Equal(t, hotpath.BreakerClosed, br.State())
			r = f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"after [[sim:tokens=2]]"}]}`)
			require.Equal(t, 200, r.status, "%s", r.body)
		})
	}
}
