package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/tracing"
)

// W3C Trace Context headers, in Go's canonical form so that reading them
// is one map lookup without allocation.
const (
	hdrTraceParent = "Traceparent"
	hdrTraceState  = "Tracestate"
)

// requestTrace returns the W3C trace context a request carries, ""
// when its traceparent is absent or not valid (then its tracestate is
// ignored too, as W3C Trace Context says). Several tracestate headers are
// one list. It allocates only for several tracestate headers.
func requestTrace(h http.Header) (tp, ts string) {
	v := h[hdrTraceParent]
	if len(v) != 1 || !engine.ValidTraceParent(v[0]) {
		return "", ""
	}
	tp = v[0]
	switch st := h[hdrTraceState]; len(st) {
	case 0:
	case 1:
		ts = st[0]
	default:
		ts = strings.Join(st, ",")
	}
	if !engine.ValidTraceState(ts) {
		ts = ""
	}
	return tp, ts
}

// publishTrace returns the trace context a publish stores with its jobs:
// with tracing on, the context of Kairos's publish span (a child of the
// request's, so that the consumer continues the trace from it); off, the
// request's own; none with StoreTraceContext = false.
func (s *Server) publishTrace(c *gin.Context) (tp, ts string) {
	if !s.storeTrace {
		return "", ""
	}
	if s.tracer != nil {
		return tracing.Format(trace.SpanContextFromContext(c.Request.Context()))
	}
	return requestTrace(c.Request.Header)
}

// traced returns handlers with, first, the middleware that makes span
// name around them when tracing is on; handlers unchanged when it is off.
func (s *Server) traced(name string, kind trace.SpanKind, handlers ...gin.HandlerFunc) []gin.HandlerFunc {
	if s.tracer == nil {
		return handlers
	}
	return append([]gin.HandlerFunc{s.spanMiddleware(name, kind)}, handlers...)
}

// spanMiddleware makes span name, a child of the request's trace context,
// named after the route's namespace, queue and job; the handlers find it
// in the request's context.
func (s *Server) spanMiddleware(name string, kind trace.SpanKind) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := tracing.Propagator.Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
		attrs := tracing.Queue(c.Param("namespace"), c.Param("queue"))
		if id := c.Param("job_id"); id != "" {
			attrs = append(attrs, tracing.JobIDs([]string{id})...)
		}
		ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
		c.Request = c.Request.WithContext(ctx)
		c.Next()
		endSpan(span, c.Writer.Status())
	}
}

// endSpan records the HTTP status of a request's span and ends it; a 5xx
// is an error.
func endSpan(span trace.Span, status int) {
	span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// consumedKey is where the consume handler leaves the jobs it hands out
// for the consume span (tracing on only).
const consumedKey = "kairos.consumed"

// consumeSpan makes the span of a consume once the jobs are known, from
// the request's start: a child of the request's trace context if it has
// one, else of the one job's (so that producer, Kairos and consumer share
// one trace), with a link to every job's trace context.
func (s *Server) consumeSpan(c *gin.Context) {
	start := time.Now()
	c.Next()
	ctx := tracing.Propagator.Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
	v, _ := c.Get(consumedKey)
	jobs, _ := v.([]*engine.Job)
	var links []trace.Link
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
		if sc := tracing.SpanContextOf(j.TraceParent, j.TraceState); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && len(jobs) == 1 {
		ctx = tracing.ContextOf(ctx, jobs[0].TraceParent, jobs[0].TraceState)
	}
	attrs := tracing.Queue(c.Param("namespace"), c.Param("queue"))
	if len(ids) > 0 {
		attrs = append(attrs, tracing.JobIDs(ids)...)
	}
	_, span := s.tracer.Start(ctx, tracing.SpanConsume, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...), trace.WithLinks(links...))
	endSpan(span, c.Writer.Status())
}

// tracedConsume is traced for the consume route, whose span is made by
// consumeSpan.
func (s *Server) tracedConsume(handlers ...gin.HandlerFunc) []gin.HandlerFunc {
	if s.tracer == nil {
		return handlers
	}
	return append([]gin.HandlerFunc{s.consumeSpan}, handlers...)
}

// spanJobIDs names the jobs a handler published on its request's span.
func (s *Server) spanJobIDs(c *gin.Context, ids ...string) {
	if s.tracer != nil && len(ids) > 0 {
		trace.SpanFromContext(c.Request.Context()).SetAttributes(tracing.JobIDs(ids)...)
	}
}

// setTraceHeaders hands a consumed job's trace context back as response
// headers (single-job consumes).
func setTraceHeaders(h http.Header, j *engine.Job) {
	if j.TraceParent == "" {
		return
	}
	h[hdrTraceParent] = []string{j.TraceParent}
	if j.TraceState != "" {
		h[hdrTraceState] = []string{j.TraceState}
	}
}
