// Package tracing sets up Kairos's OpenTelemetry tracing: a tracer
// provider exporting spans over OTLP (HTTP or gRPC) as the standard OTEL_*
// environment variables say, and the span names and attributes that the
// server, the engine's pump and the webhook deliveries share.
//
// Tracing is off unless asked for ([Kairos] Tracing = true, or
// OTEL_TRACES_EXPORTER=otlp): then New returns a Provider whose Tracer is
// nil, and every span site in Kairos is one nil check, so the hot paths
// pay nothing. The W3C trace context of a publish is stored with the job
// and handed back on consume either way (that is propagation, not
// tracing; see doc/tracing.md).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names Kairos's tracer (the instrumentation scope of
// its spans).
const InstrumentationName = "github.com/kairos-dev/kairos"

// Span names.
const (
	SpanPublish = "kairos publish"
	SpanConsume = "kairos consume"
	SpanAck     = "kairos ack"
	SpanRelease = "kairos release"
	SpanWebhook = "kairos webhook deliver"
	SpanPump    = "kairos pump"
)

// Attribute keys of Kairos's spans, besides the messaging semantic
// conventions' (messaging.system = kairos, messaging.destination.name,
// messaging.message.id, messaging.operation.name).
const (
	AttrNamespace = attribute.Key("kairos.namespace")
	AttrQueue     = attribute.Key("kairos.queue")
	AttrJobID     = attribute.Key("kairos.job_id")
	AttrPool      = attribute.Key("kairos.pool")
	AttrMoved     = attribute.Key("kairos.pump.moved")
)

// System is the messaging.system attribute of every Kairos span.
var System = semconv.MessagingSystemKey.String("kairos")

// Job returns the attributes naming one job.
func Job(ns, queue, id string) []attribute.KeyValue {
	return []attribute.KeyValue{
		System,
		AttrNamespace.String(ns), AttrQueue.String(queue),
		semconv.MessagingDestinationName(queue),
		AttrJobID.String(id), semconv.MessagingMessageID(id),
	}
}

// Queue returns the attributes naming one queue (for a span whose job is
// not known yet, or that has several).
func Queue(ns, queue string) []attribute.KeyValue {
	return []attribute.KeyValue{
		System,
		AttrNamespace.String(ns), AttrQueue.String(queue),
		semconv.MessagingDestinationName(queue),
	}
}

// JobIDs returns the attributes of one job ID or several.
func JobIDs(ids []string) []attribute.KeyValue {
	if len(ids) == 1 {
		return []attribute.KeyValue{AttrJobID.String(ids[0]), semconv.MessagingMessageID(ids[0])}
	}
	return []attribute.KeyValue{attribute.StringSlice(string(AttrJobID), ids), semconv.MessagingBatchMessageCount(len(ids))}
}

// Propagator is the W3C Trace Context propagator: the format in which
// Kairos reads, stores and hands back trace contexts, whatever global
// propagator the process sets.
var Propagator = propagation.TraceContext{}

// ContextOf returns ctx carrying the remote span context of a W3C
// traceparent and tracestate, or ctx unchanged when tp is not valid.
func ContextOf(ctx context.Context, tp, ts string) context.Context {
	if tp == "" {
		return ctx
	}
	return Propagator.Extract(ctx, &carrier{tp, ts})
}

// SpanContextOf is the span context of a W3C traceparent and tracestate
// (not valid when tp is not).
func SpanContextOf(tp, ts string) trace.SpanContext {
	return trace.SpanContextFromContext(ContextOf(context.Background(), tp, ts))
}

// Format returns the W3C traceparent and tracestate of sc, "" when it is
// not valid.
func Format(sc trace.SpanContext) (tp, ts string) {
	if !sc.IsValid() {
		return "", ""
	}
	var c carrier
	Propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.tp, c.ts
}

// carrier is a propagation.TextMapCarrier of one traceparent and one
// tracestate, without the map a HeaderCarrier needs.
type carrier struct{ tp, ts string }

func (c *carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.tp
	case "tracestate":
		return c.ts
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.tp = value
	case "tracestate":
		c.ts = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// Options configure New.
type Options struct {
	// Enabled is [Kairos] Tracing: export spans even when
	// OTEL_TRACES_EXPORTER is not set.
	Enabled bool
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Exporter, when not nil, replaces the OTLP exporter (tests: the SDK's
	// in-memory exporter); tracing is then on.
	Exporter sdktrace.SpanExporter
	// Syncer sends each span to Exporter as it ends instead of in batches
	// (tests).
	Syncer bool
}

// Provider is the tracer provider of one Kairos server.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// ErrConfig is wrapped by the errors of a tracing environment New refuses.
var ErrConfig = errors.New("tracing")

// New returns the tracing of a server: off (a Provider whose Tracer is
// nil) unless opts.Enabled or OTEL_TRACES_EXPORTER=otlp; then spans go, in
// batches, to the OTLP exporter that OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// (or OTEL_EXPORTER_OTLP_PROTOCOL) names: http/protobuf (the default) or
// grpc. The exporters read the rest of OTEL_EXPORTER_OTLP_* (endpoint,
// headers, timeout, TLS), the SDK OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*
// and OTEL_SPAN_*, and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turn it off. A value Kairos cannot honour is
// an error naming the variable, never a silent fallback.
func New(ctx context.Context, opts Options) (*Provider, error) {
	env := opts.Getenv
	if env == nil {
		env = os.Getenv
	}
	enabled := opts.Enabled || opts.Exporter != nil
	switch v := strings.TrimSpace(env("OTEL_TRACES_EXPORTER")); v {
	case "":
	case "none":
		enabled = false
	case "otlp":
		enabled = true
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: Kairos exports traces with otlp (or none)", ErrConfig, v)
	}
	if strings.EqualFold(strings.TrimSpace(env("OTEL_SDK_DISABLED")), "true") {
		enabled = false
	}
	if !enabled {
		return &Provider{}, nil
	}
	exp := opts.Exporter
	if exp == nil {
		key, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", strings.TrimSpace(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
		if proto == "" {
			key, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", strings.TrimSpace(env("OTEL_EXPORTER_OTLP_PROTOCOL"))
		}
		var err error
		switch proto {
		case "", "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		default:
			return nil, fmt.Errorf("%w: %s=%q: Kairos exports OTLP traces over http/protobuf or grpc", ErrConfig, key, proto)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: OTLP exporter: %w", ErrConfig, err)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("kairos"), semconv.ServiceVersion(opts.ServiceVersion)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	export := sdktrace.WithBatcher(exp)
	if opts.Syncer {
		export = sdktrace.WithSyncer(exp)
	}
	return &Provider{tp: sdktrace.NewTracerProvider(export, sdktrace.WithResource(res))}, nil
}

// Tracer returns Kairos's tracer, or nil when tracing is off: callers
// check for nil rather than call a no-op tracer, which would still
// allocate a context and the attributes of each span.
func (p *Provider) Tracer() trace.Tracer {
	if p == nil || p.tp == nil {
		return nil
	}
	return p.tp.Tracer(InstrumentationName)
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p != nil && p.tp != nil }

// Shutdown exports the spans still buffered and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.tp == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}
