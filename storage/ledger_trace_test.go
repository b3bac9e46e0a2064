package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A batch statement exports one span linked to the sampled requests whose
// rows it wrote; rows without a span add no link.
func TestLedgerWriteSpanLinksItsRequests(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	f := newTestLedger(t, newMemWriter(), t.TempDir(), func(c *LedgerConfig) {
		c.Tracer, c.BatchSize, c.FlushInterval = tp.Tracer("ledger"), 10, 1<<40
	})
	var traced [16]byte
	for i := range 3 {
		r := sampleRecord()
		r.RequestID = "traced-" + string(rune('a'+i))
		r.TraceID, r.SpanID = [16]byte{1, byte(i)}, [8]byte{2, byte(i)}
		traced = r.TraceID
		f.l.Record(&r)
	}
	record(f.l, "untraced")
	require.NoError(t, f.l.Flush(ctxT(t)))

	var write []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == SpanLedgerWrite {
			write = append(write, s)
		}
	}
	require.Len(t, write, 1)
	s := write[0]
	require.Len(t, s.Links, 3)
	require.Equal(t, traced, [16]byte(s.Links[2].SpanContext.TraceID()))
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	require.Equal(t, "4", attrs["gateway.ledger.rows"])
	require.Equal(t, "4", attrs["gateway.ledger.inserted"])
	require.Equal(t, "false", attrs["gateway.ledger.replay"])
}
