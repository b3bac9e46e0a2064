//go:build !race

package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracing sets the fixture's tracer.
func tracing(tr trace.Tracer) func(*fixtureOptions) {
	return func(o *fixtureOptions) { o.tracer = tr }
}

// sdkTracer is the SDK's tracer with the sampler given, exporting to an
// exporter that drops what it gets: what is measured is the spans' cost on
// the request's path, not the export, which runs off it.
func sdkTracer(t testing.TB, s sdktrace.Sampler) trace.Tracer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()), sdktrace.WithSampler(s))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return tp.Tracer(TracerName)
}

// doer returns one request through f.
func (f *requestHarness) doer(t testing.TB) func() { return func() { f.do(t) } }

// newStreamHarnessWith is newStreamHarness with fixture options.
func newStreamHarnessWith(t testing.TB, frames int, opts ...func(*fixtureOptions)) *streamHarness {
	body := strings.Replace(benchBody, `{"model"`, `{"stream":true,"model"`, 1)
	return newWireStreamHarness(t, frames, "word", "/api/v1/chat", body, opts...)
}

// Tracing off (no tracer, the default) costs a request exactly what it
// cost before tracing was built: the measured figures of
// TestNonStreamRequestAllocationBudget and TestStreamAllocatesNothingPerFrame
// (docs/performance.md). The figures with tracing on are logged.
func TestTracingOffAllocationBudget(t *testing.T) {
	const measuredRequest, measuredStream = 11, 32
	off := testing.AllocsPerRun(200, newRequestHarness(t, tracing(nil)).doer(t))
	require.Equal(t, float64(measuredRequest), off, "a non-streaming request with tracing off")
	require.LessOrEqual(t, off, float64(maxRequestAllocs))
	short := newStreamHarness(t, 10)
	offStream := testing.AllocsPerRun(50, func() { short.stream(t) })
	require.Equal(t, float64(measuredStream), offStream, "a stream with tracing off")

	noopTracer := testing.AllocsPerRun(200, newRequestHarness(t, tracing(noop.NewTracerProvider().Tracer(""))).doer(t))
	unsampled := testing.AllocsPerRun(200, newRequestHarness(t, tracing(sdkTracer(t, sdktrace.NeverSample()))).doer(t))
	sampled := testing.AllocsPerRun(200, newRequestHarness(t, tracing(sdkTracer(t, sdktrace.AlwaysSample()))).doer(t))
	t.Logf("allocations per non-streaming request: %.0f tracing off, %.0f with the no-op tracer, %.0f with the SDK not sampling, %.0f sampling",
		off, noopTracer, unsampled, sampled)
	sampledStream := newStreamHarnessWith(t, 10, tracing(sdkTracer(t, sdktrace.AlwaysSample())))
	onStream := testing.AllocsPerRun(50, func() { sampledStream.stream(t) })
	t.Logf("allocations per stream: %.0f tracing off, %.0f sampling", offStream, onStream)
}

// BenchmarkNonStreamRequestTraced is BenchmarkNonStreamRequest with every
// trace sampled (spans to a discarding exporter).
func BenchmarkNonStreamRequestTraced(b *testing.B) {
	f := newRequestHarness(b, tracing(sdkTracer(b, sdktrace.AlwaysSample())))
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		f.do(b)
	}
}
