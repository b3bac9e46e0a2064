package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/hotpath"
)

// tracingConfig configures span export over OTLP. Tracing is off unless
// an endpoint is configured, by flag or by the standard
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT.
type tracingConfig struct {
	// Endpoint is the collector's URL. With http/protobuf a URL without a
	// path gets /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT does.
	Endpoint string
	// Protocol is http/protobuf (the default) or grpc.
	Protocol string
	// SampleRatio is the share of new traces sampled, 0 to 1; a client's
	// traceparent decides for its own trace. Unless SampleRatioSet,
	// resolve takes OTEL_TRACES_SAMPLER_ARG, else 1.
	SampleRatio    float64
	SampleRatioSet bool
	// ServiceName is the service.name of the spans. Default gateway (or
	// OTEL_SERVICE_NAME).
	ServiceName string
	// Headers are sent with every export, "name=value,name=value"
	// (credentials of a hosted collector). Empty: the exporter reads
	// OTEL_EXPORTER_OTLP_TRACES_HEADERS or OTEL_EXPORTER_OTLP_HEADERS.
	Headers string
	// ExportInterval is the longest a finished span waits for its batch.
	// Zero: 5s (the flag's default).
	ExportInterval time.Duration
	// getenv reads the OTEL_ variables; nil is os.Getenv.
	getenv func(string) string
}

func (c *tracingConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Endpoint, "otel-endpoint", "", "OTLP collector URL that spans are exported to (http://host:4318 for http/protobuf, http://host:4317 for grpc); empty, and no OTEL_EXPORTER_OTLP_ENDPOINT, turns tracing off")
	fs.StringVar(&c.Protocol, "otel-protocol", "", "OTLP protocol: http/protobuf or grpc (default http/protobuf, or OTEL_EXPORTER_OTLP_PROTOCOL)")
	fs.Var(ratioFlag{c}, "otel-sample-ratio", "share of new traces sampled, 0 to 1; a client's traceparent decides for its own trace (default 1, or OTEL_TRACES_SAMPLER_ARG)")
	fs.StringVar(&c.ServiceName, "otel-service-name", "", "service.name of exported spans (default gateway, or OTEL_SERVICE_NAME)")
	fs.StringVar(&c.Headers, "otel-headers", "", "headers sent with every export, name=value,name=value (default OTEL_EXPORTER_OTLP_HEADERS)")
	c.ExportInterval = 5 * time.Second
	fs.Var(positiveDuration{&c.ExportInterval}, "otel-export-interval", "longest a finished span waits for its export batch, a positive `duration`")
}

// ratioFlag is --otel-sample-ratio. It records that it was given, since
// left unset it defers to OTEL_TRACES_SAMPLER_ARG, and takes only a share
// from 0 to 1 (never NaN).
type ratioFlag struct{ c *tracingConfig }

func (f ratioFlag) String() string {
	if f.c == nil || !f.c.SampleRatioSet {
		return "" // no "(default …)": the usage says what unset means
	}
	return strconv.FormatFloat(f.c.SampleRatio, 'g', -1, 64)
}

func (f ratioFlag) Set(s string) error {
	r, err := parseRatio(s)
	if err != nil {
		return err
	}
	f.c.SampleRatio, f.c.SampleRatioSet = r, true
	return nil
}

// parseRatio reads a sampling share, 0 to 1.
func parseRatio(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(r >= 0 && r <= 1) { // NaN fails both
		return 0, errors.New("must be a number from 0 to 1")
	}
	return r, nil
}

// positiveDuration is a duration flag that refuses zero and negative
// values rather than mapping them to the default.
type positiveDuration struct{ d *time.Duration }

func (f positiveDuration) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (such as 5s or 500ms)")
	}
	if d <= 0 {
		return errors.New("must be positive")
	}
	*f.d = d
	return nil
}

func (c *tracingConfig) env(name string) string {
	if c.getenv != nil {
		return c.getenv(name)
	}
	return os.Getenv(name)
}

// resolve fills what the flags left unset from the standard OTEL_
// variables and the defaults, and reports whether tracing is on.
func (c *tracingConfig) resolve() (on bool, err error) {
	// What the flags hold is checked even with tracing off.
	if c.SampleRatioSet && !(c.SampleRatio >= 0 && c.SampleRatio <= 1) {
		return false, errors.New("otel-sample-ratio: must be a number from 0 to 1")
	}
	if c.ExportInterval < 0 {
		return false, errors.New("otel-export-interval: must be positive")
	}
	if strings.EqualFold(c.env("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	fromEnv := c.env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || c.env("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	if c.Endpoint == "" && !fromEnv {
		return false, nil
	}
	if c.Protocol == "" {
		c.Protocol = firstOf(c.env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), c.env("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	}
	if c.Protocol != "http/protobuf" && c.Protocol != "grpc" {
		return false, fmt.Errorf("otel-protocol: %q is not http/protobuf or grpc", c.Protocol)
	}
	if !c.SampleRatioSet {
		c.SampleRatio = 1
		if arg := c.env("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
			if c.SampleRatio, err = parseRatio(arg); err != nil {
				return false, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q %w", arg, err)
			}
		}
	}
	c.ServiceName = firstOf(c.ServiceName, c.env("OTEL_SERVICE_NAME"), "gateway")
	if c.ExportInterval == 0 {
		c.ExportInterval = 5 * time.Second
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return false, fmt.Errorf("otel-endpoint: %q is not an http:// or https:// URL", hotpath.RedactURL(c.Endpoint))
		}
		if c.Protocol == "http/protobuf" && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
			c.Endpoint = u.String()
		}
	}
	if _, err := c.headers(); err != nil {
		return false, err
	}
	return true, nil
}

// headers parses Headers.
func (c *tracingConfig) headers() (map[string]string, error) {
	if c.Headers == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(c.Headers, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, errors.New("otel-headers: want name=value,name=value")
		}
		if uv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
			v = uv
		}
		out[k] = v
	}
	return out, nil
}

func firstOf(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// newTracerProvider starts the exporter and the provider whose tracers the
// data plane and the ledger use. Spans are exported in batches from a
// bounded queue off the request's path; a full queue drops spans rather
// than wait. Call resolve first.
func newTracerProvider(ctx context.Context, c tracingConfig, version string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	// The SDK reports failed exports (a collector down or refusing) to a
	// process-wide handler; they go to the gateway's log, one line per
	// interval.
	var limit hotpath.LogLimiter
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if ok, n := limit.Allow(); ok {
			log.Warn("cannot export spans", "err", err, "suppressed", n)
		}
	}))
	hdr, _ := c.headers()
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch c.Protocol {
	case "grpc":
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		if hdr != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(hdr))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		}
		if hdr != nil {
			opts = append(opts, otlptracehttp.WithHeaders(hdr))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot start the OTLP exporter: %w", err)
	}
	// OTEL_RESOURCE_ATTRIBUTES adds to the description; the service's
	// name and version are the configuration's.
	res := resource.Default()
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	res, err = resource.Merge(res, resource.NewSchemaless(
		attribute.String("service.name", c.ServiceName), attribute.String("service.version", version)))
	if err != nil {
		return nil, fmt.Errorf("cannot describe the service for tracing: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(c.ExportInterval)),
		sdktrace.WithSampler(linkedSampler{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))}),
		sdktrace.WithResource(res),
	), nil
}

// linkedSampler samples a new trace whose span links to a sampled span
// (a ledger write carrying a sampled request's row), and otherwise asks
// its sampler: a write is then exported whenever a request it carries is.
type linkedSampler struct{ sdktrace.Sampler }

func (s linkedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return s.Sampler.ShouldSample(p)
}

func (s linkedSampler) Description() string { return "LinkedSampler{" + s.Sampler.Description() + "}" }
