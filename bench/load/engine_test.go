package load

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func TestClosedLoopCounts(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, ReplyTokens: 16, PromptWords: 10,
		Concurrency: 4, MaxRequests: 60, Duration: 20 * time.Second,
	})
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{Seed: 1})
	require.NoError(t, err)
	require.EqualValues(t, 60, res.Requests)
	require.EqualValues(t, 60, res.Completed)
	require.Zero(t, res.Errors)
	require.Equal(t, map[int]int64{200: 60}, res.ByStatus)
	require.EqualValues(t, 60, res.Latency.TotalCount())
	require.EqualValues(t, 60, res.TTFB.TotalCount())
	require.Zero(t, res.TTFT.TotalCount(), "no frames without a stream")
	require.Positive(t, res.Bytes)
	require.Positive(t, res.Throughput)
	require.Less(t, res.Elapsed, 10*time.Second, "ends at MaxRequests, not the duration")
	require.LessOrEqual(t, res.Quantile("ttfb", 50), res.Quantile("latency", 50))
	require.Positive(t, res.Quantile("latency", 100))
}

func TestOpenLoopCounts(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, ReplyTokens: 4,
		Mode: ModeOpen, Rate: 200, Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
	})
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{})
	require.NoError(t, err)
	// Slots every 5 ms over the 500 ms window: 100 measured requests; the
	// 20 of the warm-up are sent but not counted.
	require.InDelta(t, 100, res.Requests, 1)
	require.Equal(t, res.Requests, res.Completed)
	require.Equal(t, 500*time.Millisecond, res.Elapsed)
	require.InDelta(t, 200, res.Throughput, 4)
}

func TestOpenLoopPoisson(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, ReplyTokens: 2,
		Rate: 400, Poisson: true, Duration: 500 * time.Millisecond,
	})
	require.Equal(t, ModeOpen, sc.Mode)
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{Seed: 3})
	require.NoError(t, err)
	require.InDelta(t, 200, res.Requests, 60)
	require.Equal(t, res.Requests, res.Completed)
}

// stallOnce answers a small completion at once, except the nth request,
// which it holds for d first.
func stallOnce(n int64, d time.Duration) fasthttp.RequestHandler {
	var seen atomic.Int64
	return func(ctx *fasthttp.RequestCtx) {
		if seen.Add(1) == n {
			time.Sleep(d)
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(completion)
	}
}

// slow counts the latencies above 50 ms.
func slow(r *Result) int64 {
	var n int64
	for _, b := range r.Latency.Distribution() {
		if b.From >= int64(50*time.Millisecond/time.Microsecond) {
			n += b.Count
		}
	}
	return n
}

// An open loop times each request from its slot: while one connection is
// held by a stalled answer, the requests due meanwhile wait, and their wait
// counts. A closed loop sends nothing during the stall and sees one slow
// request.
func TestOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	const stall = 200 * time.Millisecond
	opt := Options{Client: ClientOptions{MaxConns: 1}}

	open := quick(t, Scenario{Mode: ModeOpen, Rate: 100, Duration: time.Second})
	res, err := Run(context.Background(), open, Target{Name: "open", BaseURL: serve(t, stallOnce(20, stall))}, opt)
	require.NoError(t, err)
	require.Equal(t, res.Requests, res.Completed)
	require.GreaterOrEqual(t, slow(res), int64(10), "the requests due during the stall include their wait")
	require.GreaterOrEqual(t, res.Quantile("latency", 90), 50*time.Millisecond)
	require.GreaterOrEqual(t, res.Quantile("latency", 100), stall)

	closed := quick(t, Scenario{Concurrency: 1, MaxRequests: 100, Duration: 10 * time.Second})
	res, err = Run(context.Background(), closed, Target{Name: "closed", BaseURL: serve(t, stallOnce(20, stall))}, opt)
	require.NoError(t, err)
	require.EqualValues(t, 100, res.Completed)
	// One slow request (a loaded machine may add one or two of its own).
	require.LessOrEqual(t, slow(res), int64(3), "a closed loop hides the stall behind the requests it did not send")
	require.Less(t, res.Quantile("latency", 90), 50*time.Millisecond)
	require.GreaterOrEqual(t, res.Quantile("latency", 100), stall)
}

func TestStreamingFigures(t *testing.T) {
	base := startSim(t)
	const tokens, itl = 20, 5 * time.Millisecond
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, Stream: true, IncludeUsage: true,
		ReplyTokens: tokens, ITLms: int(itl / time.Millisecond), TTFTms: 20,
		Concurrency: 4, MaxRequests: 24, Duration: 20 * time.Second,
	})
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{})
	require.NoError(t, err)
	require.EqualValues(t, 24, res.Completed)
	// role primer, the tokens, finish, usage, [DONE]
	require.EqualValues(t, 24*(tokens+4), res.Frames)
	require.EqualValues(t, 24, res.TTFT.TotalCount())
	require.EqualValues(t, 24*(tokens+3), res.InterFrame.TotalCount())
	require.GreaterOrEqual(t, res.Quantile("ttft", 50), 20*time.Millisecond)
	require.Less(t, res.Quantile("ttfb", 50), res.Quantile("ttft", 50), "the role primer comes before the first token")
	p50 := res.Quantile("interframe", 50)
	require.GreaterOrEqual(t, p50, itl-time.Millisecond)
	require.Less(t, p50, 6*itl)
	require.GreaterOrEqual(t, res.Quantile("latency", 50), 20*time.Millisecond+(tokens-1)*itl)
	require.Zero(t, res.FrameViolations)
}

func TestReasoningIsNotFirstToken(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, Stream: true,
		ReplyTokens: 2, ReasoningTokens: 5, ITLms: 10, MaxRequests: 4, Duration: 10 * time.Second,
	})
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Completed)
	require.GreaterOrEqual(t, res.Quantile("ttft", 0), 50*time.Millisecond, "five reasoning tokens 10 ms apart come first")
}

func TestToolCallsCountAsFirstToken(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, Stream: true, Tools: true, MaxRequests: 4, Duration: 10 * time.Second,
	})
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Completed)
	require.EqualValues(t, 4, res.TTFT.TotalCount())
}

func TestErrorCodes(t *testing.T) {
	base := startSim(t)
	run := func(t *testing.T, sc Scenario, tg Target) *Result {
		t.Helper()
		if tg.BaseURL == "" {
			tg.BaseURL = base
		}
		tg.Name = "t"
		if sc.Wires == nil {
			sc.Wires = map[Wire]float64{WireUpstream: 1}
		}
		sc.MaxRequests = 6
		sc.Duration = 10 * time.Second
		sc.Concurrency = 2
		res, err := Run(context.Background(), quick(t, sc), tg, Options{})
		require.NoError(t, err)
		require.EqualValues(t, 6, res.Requests)
		return res
	}
	t.Run("status from the OpenAI envelope", func(t *testing.T) {
		res := run(t, Scenario{Faults: map[string]float64{"status=503": 1}}, Target{})
		require.Equal(t, map[int]int64{503: 6}, res.ByStatus)
		require.EqualValues(t, 6, res.Errors)
		require.Len(t, res.ByCode, 1)
		for code := range res.ByCode {
			require.NotEmpty(t, code)
		}
	})
	t.Run("streams refused before they open", func(t *testing.T) {
		res := run(t, Scenario{Stream: true, Faults: map[string]float64{"fault=rate_limited": 1}}, Target{})
		require.Equal(t, map[int]int64{429: 6}, res.ByStatus)
		require.Equal(t, map[string]int64{"rate_limit_exceeded": 6}, res.ByCode)
	})
	t.Run("the api envelope", func(t *testing.T) {
		url := serve(t, func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(429)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"code":"rate_limited","error":"slow down","request_id":"r"}`)
		})
		res := run(t, Scenario{Wires: map[Wire]float64{WireV1: 1}}, Target{BaseURL: url})
		require.Equal(t, map[string]int64{"rate_limited": 6}, res.ByCode)
	})
	t.Run("no code in the body", func(t *testing.T) {
		url := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(502) })
		res := run(t, Scenario{}, Target{BaseURL: url})
		require.Equal(t, map[string]int64{"http_502": 6}, res.ByCode)
	})
	t.Run("reset", func(t *testing.T) {
		res := run(t, Scenario{Faults: map[string]float64{"fault=reset": 1}}, Target{})
		require.Equal(t, map[string]int64{CodeTransport: 6}, res.ByCode)
		require.Empty(t, res.ByStatus)
	})
	t.Run("dropped stream", func(t *testing.T) {
		res := run(t, Scenario{Stream: true, ReplyTokens: 10, Faults: map[string]float64{"drop_after=3": 1}}, Target{})
		require.Equal(t, map[string]int64{CodeIncomplete: 6}, res.ByCode)
		require.Equal(t, map[int]int64{200: 6}, res.ByStatus)
		require.EqualValues(t, 6*4, res.Frames, "the primer and three tokens")
	})
	t.Run("malformed non-stream", func(t *testing.T) {
		res := run(t, Scenario{ReplyTokens: 10, Faults: map[string]float64{"fault=malformed_after=3": 1}}, Target{})
		require.Equal(t, map[string]int64{CodeBadBody: 6}, res.ByCode)
	})
	t.Run("v2 error event", func(t *testing.T) {
		url := serve(t, transcript(v2Error))
		res := run(t, Scenario{Wires: map[Wire]float64{WireV2: 1}, Stream: true}, Target{BaseURL: url})
		require.Equal(t, map[string]int64{"upstream_overloaded": 6}, res.ByCode)
		require.Zero(t, res.FrameViolations)
		require.EqualValues(t, 6, res.TTFT.TotalCount(), "a delta came before the error")
	})
	t.Run("timeout", func(t *testing.T) {
		sc := Scenario{Faults: map[string]float64{"fault=hang": 1}, Timeout: 100 * time.Millisecond}
		res := run(t, sc, Target{})
		require.Equal(t, map[string]int64{CodeTimeout: 6}, res.ByCode)
	})
}

func TestFrameChecks(t *testing.T) {
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireV1: 1}, Stream: true, Concurrency: 2, MaxRequests: 8, Duration: 10 * time.Second,
	})
	t.Run("a good stream", func(t *testing.T) {
		res, err := Run(context.Background(), sc, Target{Name: "good", BaseURL: serve(t, transcript(v1Good))}, Options{})
		require.NoError(t, err)
		require.EqualValues(t, 8, res.Completed)
		require.Zero(t, res.FrameViolations)
		require.Empty(t, res.FirstViolations)
		require.EqualValues(t, 8*6, res.Frames)
		require.EqualValues(t, 8, res.TTFT.TotalCount())
	})
	t.Run("a broken stream", func(t *testing.T) {
		res, err := Run(context.Background(), sc, Target{Name: "bad", BaseURL: serve(t, transcript(v1Bad))}, Options{})
		require.NoError(t, err)
		require.EqualValues(t, 8, res.FrameViolations)
		require.Len(t, res.FirstViolations, maxViolations)
		for _, v := range res.FirstViolations {
			require.Regexp(t, `^bad request \d+: .+`, v)
		}
	})
}

func TestBacklogAndAbandon(t *testing.T) {
	base := startSim(t)
	t.Run("open loop caps what is in flight", func(t *testing.T) {
		sc := quick(t, Scenario{
			Wires: map[Wire]float64{WireUpstream: 1}, Faults: map[string]float64{"fault=hang": 1},
			Mode: ModeOpen, Rate: 200, MaxInFlight: 5, Duration: 300 * time.Millisecond, Timeout: 150 * time.Millisecond,
		})
		start := time.Now()
		res, err := Run(context.Background(), sc, Target{Name: "t", BaseURL: base}, Options{})
		require.NoError(t, err)
		require.Less(t, time.Since(start), 2*time.Second)
		require.Positive(t, res.ByCode[CodeBacklog])
		require.Positive(t, res.ByCode[CodeTimeout])
		require.Equal(t, res.Requests, res.ByCode[CodeBacklog]+res.ByCode[CodeTimeout])
		require.InDelta(t, 60, res.Requests, 1)
	})
	t.Run("a cancelled run abandons what is in flight", func(t *testing.T) {
		sc := quick(t, Scenario{
			Wires: map[Wire]float64{WireUpstream: 1}, Faults: map[string]float64{"fault=hang": 1},
			Concurrency: 3, Duration: 10 * time.Second, Timeout: time.Minute,
		})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		res, err := Run(ctx, sc, Target{Name: "t", BaseURL: base}, Options{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 3*time.Second)
		require.Equal(t, map[string]int64{CodeTimeout: 3}, res.ByCode)
		require.EqualValues(t, 3, res.Errors)
	})
}

func TestLoopbackOnly(t *testing.T) {
	sc := quick(t, Scenario{})
	for _, base := range []string{"http://192.0.2.1:8080", "http://[2001:db8::1]:80"} {
		_, err := Run(context.Background(), sc, Target{Name: "far", BaseURL: base}, Options{})
		require.ErrorIs(t, err, ErrNotLoopback, base)
		_, err = Compare(context.Background(), sc, []Target{{Name: "far", BaseURL: base}}, Options{})
		require.ErrorIs(t, err, ErrNotLoopback, base)
		r, err := newRunner(context.Background(), sc, Target{Name: "far", BaseURL: base}, Options{AllowNonLoopback: true})
		require.NoError(t, err)
		r.close()
	}
	for _, base := range []string{"http://127.0.0.1:1", "http://[::1]:1", "http://localhost:1"} {
		r, err := newRunner(context.Background(), sc, Target{Name: "near", BaseURL: base}, Options{})
		require.NoError(t, err, base)
		r.close()
	}
}

func TestProgressAndRSS(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, Concurrency: 2, Duration: 1100 * time.Millisecond,
		SampleRSS: 100 * time.Millisecond,
	})
	var out bytes.Buffer
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base, PID: os.Getpid()}, Options{Progress: &out})
	require.NoError(t, err)
	require.Contains(t, out.String(), "\r")
	require.Contains(t, out.String(), "direct")
	require.Contains(t, out.String(), "completed")
	require.Contains(t, out.String(), "p99")
	require.GreaterOrEqual(t, len(res.RSS), 5)
	for _, s := range res.RSS {
		require.Positive(t, s.Bytes)
		require.False(t, s.After, "no cooldown: every sample is under load")
	}

	rss, err := RSS(os.Getpid())
	require.NoError(t, err)
	require.Greater(t, rss, int64(1<<20))
	_, err = RSS(1 << 30)
	require.Error(t, err)
}

// requireCooldown checks that samples are in time order, under load first
// and then at least two after it (one when the load ends, one when the
// cooldown does), the last no earlier than the load's end plus the
// cooldown.
func requireCooldown(t *testing.T, samples []RSSSample, loadEnd, cooldown time.Duration) {
	t.Helper()
	var load, after []RSSSample
	for i, s := range samples {
		require.Positive(t, s.Bytes)
		if i > 0 {
			require.GreaterOrEqual(t, s.At, samples[i-1].At, "in time order")
			require.False(t, samples[i-1].After && !s.After, "no load sample after an after-load one")
		}
		if s.After {
			after = append(after, s)
		} else {
			load = append(load, s)
		}
	}
	require.NotEmpty(t, load)
	require.GreaterOrEqual(t, len(after), 2)
	require.GreaterOrEqual(t, after[0].At, loadEnd, "after-load samples start when the load has ended")
	require.GreaterOrEqual(t, after[len(after)-1].At, loadEnd+cooldown, "and go on for the whole cooldown")
}

func TestCooldownSamplesAfterTheLoad(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, Concurrency: 2, Duration: 500 * time.Millisecond,
		SampleRSS: 100 * time.Millisecond, Cooldown: 300 * time.Millisecond,
	})
	var out bytes.Buffer
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base, PID: os.Getpid()}, Options{Progress: &out})
	require.NoError(t, err)
	require.Positive(t, res.Completed)
	require.Equal(t, sc.Duration, res.Elapsed, "the cooldown is not part of the measured window")
	requireCooldown(t, res.RSS, sc.Duration, sc.Cooldown)
	require.Contains(t, out.String(), "cooldown: sampling resident memory for 300ms")

	raw, err := json.Marshal(res.RSS[len(res.RSS)-1])
	require.NoError(t, err)
	require.Contains(t, string(raw), `"after_load":true`)

	t.Run("nothing sampled, no cooldown", func(t *testing.T) {
		long := *sc
		long.Cooldown = time.Hour
		res, err := Run(context.Background(), &long, Target{Name: "direct", BaseURL: base}, Options{})
		require.NoError(t, err, "no pid: the hour is not waited for")
		require.Empty(t, res.RSS)
	})
	t.Run("cut short by the context", func(t *testing.T) {
		long := *sc
		long.Duration, long.Cooldown = 200*time.Millisecond, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Cancelled as the cooldown starts.
		progress := writerFunc(func(p []byte) (int, error) {
			if bytes.HasPrefix(p, []byte("cooldown:")) {
				cancel()
			}
			return len(p), nil
		})
		res, err := Run(ctx, &long, Target{Name: "direct", BaseURL: base, PID: os.Getpid()}, Options{Progress: progress})
		require.ErrorIs(t, err, context.Canceled)
		require.NotEmpty(t, res.RSS)
		require.True(t, res.RSS[len(res.RSS)-1].After, "cut during the cooldown")
	})
}

func TestCompareCooldown(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, Concurrency: 2, Duration: 400 * time.Millisecond,
		SampleRSS: 100 * time.Millisecond, Cooldown: 300 * time.Millisecond,
	})
	results, err := Compare(context.Background(), sc, []Target{
		{Name: "direct", BaseURL: base, Wire: WireUpstream},
		{Name: "gateway", BaseURL: base, Wire: WireUpstream, PID: os.Getpid()},
	}, Options{Round: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Empty(t, results[0].RSS, "no pid, no samples")
	// Both targets' rounds come before the cooldown.
	requireCooldown(t, results[1].RSS, 2*sc.Duration, sc.Cooldown)

	// One target alone is a comparison too.
	results, err = Compare(context.Background(), sc, []Target{
		{Name: "gateway", BaseURL: base, Wire: WireUpstream, PID: os.Getpid()},
	}, Options{Round: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, results, 1)
	require.Positive(t, results[0].Completed)
	requireCooldown(t, results[0].RSS, sc.Duration, sc.Cooldown)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A closed-loop client with a think time waits that long between its
// requests and keeps its connection idle meanwhile.
func TestThinkTimeSpacesRequestsOnKeptConnections(t *testing.T) {
	base := startSim(t)
	sc := quick(t, Scenario{
		Wires: map[Wire]float64{WireUpstream: 1}, ReplyTokens: 2, Concurrency: 2, Think: 300 * time.Millisecond,
		MaxRequests: 6, Duration: 20 * time.Second,
	})
	start := time.Now()
	res, err := Run(context.Background(), sc, Target{Name: "direct", BaseURL: base}, Options{Seed: 1})
	require.NoError(t, err)
	require.EqualValues(t, 6, res.Completed)
	require.Zero(t, res.Errors)
	require.GreaterOrEqual(t, time.Since(start), 600*time.Millisecond, "three requests a client, two pauses each")
	require.LessOrEqual(t, res.Connections, int64(2), "one kept connection per client")

	_, err = LoadScenario("idle-gaps")
	require.NoError(t, err)
	bad := Scenario{Rate: 10, Think: time.Second}
	require.ErrorContains(t, bad.Validate(), "think")
}

// The Anthropic and Responses wires: their recorded streams count as
// complete, with a first token, and a broken one as a violation.
func TestVendorWireStreams(t *testing.T) {
	for _, c := range []struct {
		wire Wire
		file string
	}{{WireAnthropic, "anthropic_sse_reasoning.txt"}, {WireResponses, "responses_sse_tools.txt"}} {
		t.Run(string(c.wire), func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "proxy", "testdata", "golden", c.file))
			require.NoError(t, err)
			_, body, ok := strings.Cut(string(raw), "\n\n")
			require.True(t, ok)
			sc := quick(t, Scenario{Wires: map[Wire]float64{c.wire: 1}, Stream: true, Concurrency: 2, MaxRequests: 6, Duration: 10 * time.Second})
			res, err := Run(context.Background(), sc, Target{Name: "good", BaseURL: serve(t, transcript(body))}, Options{})
			require.NoError(t, err)
			require.EqualValues(t, 6, res.Completed)
			require.Zero(t, res.FrameViolations)
			require.EqualValues(t, 6, res.TTFT.TotalCount())
			cut := body[:strings.LastIndex(body, "event: ")]
			res, err = Run(context.Background(), sc, Target{Name: "cut", BaseURL: serve(t, transcript(cut))}, Options{})
			require.NoError(t, err)
			require.EqualValues(t, 6, res.FrameViolations)
		})
	}
}
