// Package otelclient adds OpenTelemetry tracing to the Kairos Go client
// (package client), which itself needs the standard library only: a
// program that does not trace does not pull OpenTelemetry in by importing
// the client.
//
// Three pieces, each optional:
//
//	c, err := client.New(addr, client.WithNamespace("shop"), client.WithToken(tok),
//		otelclient.Propagate()) // requests carry the caller's trace context
//	w, err := client.NewWorker(c, client.WorkerConfig{Queues: []string{"orders"},
//		Observe: otelclient.WorkerSpans(nil)}, handle) // a span per job
//	ctx = otelclient.JobContext(ctx, job) // a consumed job's trace context
//
// Kairos stores and hands back W3C Trace Context (traceparent,
// tracestate), whatever global propagator the program sets.
package otelclient

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/client"
)

// traceContext is the W3C Trace Context propagator: the format Kairos
// stores with a job.
var traceContext = propagation.TraceContext{}

// TracerName is the instrumentation scope of the worker's spans.
const TracerName = "github.com/kairos-dev/kairos/client"

// Propagate is the client option that sends, with every request, the
// trace context of the request's ctx (traceparent, tracestate), when it
// has one: a Publish made inside a span stores that span's context with
// the job, and the server's spans of the other requests (ACK, release,
// touch made with a handler's ctx) join the caller's trace.
func Propagate() client.Option {
	return client.WithRequestHeaders(func(ctx context.Context, h http.Header) {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	})
}

// JobContext returns ctx carrying the trace context job was published
// with, so that what the consumer does next continues the producer's
// trace: start a span from it, or pass it to calls that are traced. ctx
// is returned unchanged for a job without one.
func JobContext(ctx context.Context, job *client.Job) context.Context {
	if job.TraceParent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{
		"traceparent": job.TraceParent, "tracestate": job.TraceState,
	})
}

// WorkerSpans is a client.WorkerConfig.Observe that runs each handler in
// a span "process <queue>" (kind consumer), a child of the job's trace
// context (JobContext), which also covers the job's ACK or release and is
// an error when the handler fails. tp nil means otel.GetTracerProvider()
// at each job; with a no-op provider no span is recorded, but the
// handler's ctx still carries the job's trace context.
func WorkerSpans(tp trace.TracerProvider) func(ctx context.Context, job *client.Job) (context.Context, func(error)) {
	return func(ctx context.Context, job *client.Job) (context.Context, func(error)) {
		p := tp
		if p == nil {
			p = otel.GetTracerProvider()
		}
		ctx, span := p.Tracer(TracerName).Start(JobContext(ctx, job), "process "+job.Queue,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("messaging.system", "kairos"),
				attribute.String("messaging.operation.name", "process"),
				attribute.String("messaging.destination.name", job.Queue),
				attribute.String("messaging.message.id", job.ID),
				attribute.String("kairos.namespace", job.Namespace),
				attribute.String("kairos.queue", job.Queue),
				attribute.String("kairos.job_id", job.ID),
				attribute.Int("kairos.remain_tries", job.RemainTries),
			))
		return ctx, func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}
