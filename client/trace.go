package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext is the W3C Trace Context propagator: the format Kairos
// stores with a job, whatever global propagator the program sets.
var traceContext = propagation.TraceContext{}

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/kairos-dev/kairos/client"

// Context returns ctx carrying the trace context the job was published
// with (its traceparent and tracestate), so that what the consumer does
// next continues the producer's trace: start a span from it, or pass it
// to calls that are traced. ctx is returned unchanged for a job without
// one. The Worker does this for its handlers.
func (j *Job) Context(ctx context.Context) context.Context {
	if j.TraceParent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, jobCarrier{j})
}

// jobCarrier reads a job's trace context for the propagator.
type jobCarrier struct{ j *Job }

func (c jobCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.j.TraceParent
	case "tracestate":
		return c.j.TraceState
	}
	return ""
}

func (jobCarrier) Set(string, string) {}

func (jobCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// workerTracer is the tracer of a worker's handler spans: the config's
// provider, else the global one (a no-op until the program installs one:
// the handler's context then still carries the job's trace context).
func workerTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}
