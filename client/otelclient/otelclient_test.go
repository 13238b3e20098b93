package otelclient_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/client/internal/kairostest"
	"github.com/kairos-dev/kairos/client/otelclient"
)

// env is a running server and a client of its namespace with the trace
// context propagated (otelclient.Propagate).
type env struct {
	NS string
	C  *client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := kairostest.Start(t)
	e := &env{NS: "ns1"}
	c, err := client.New(srv.API, client.WithNamespace(e.NS), client.WithToken(srv.Token(t, e.NS, "")), otelclient.Propagate())
	if err != nil {
		t.Fatal(err)
	}
	e.C = c
	return e
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publish(t *testing.T, c *client.Client, queue, body string) {
	t.Helper()
	if _, err := c.Publish(ctxT(t), queue, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func consume(t *testing.T, c *client.Client, queue string, ttr time.Duration) *client.Job {
	t.Helper()
	job, err := c.Consume(ctxT(t), queue, ttr, 0)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

func startWorker(t *testing.T, c *client.Client, cfg client.WorkerConfig, h client.Handler) {
	t.Helper()
	w, err := client.NewWorker(c, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTraceContextRoundTrip: a publish made inside a span carries its
// trace context; consumes (single and batch) hand it back on the job, and
// JobContext continues it. A publish outside any span carries none.
func TestTraceContextRoundTrip(t *testing.T) {
	e := newEnv(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(ctxT(t), "produce")
	sc := span.SpanContext()
	if _, err := e.C.Publish(ctx, "q", []byte("traced")); err != nil {
		t.Fatal(err)
	}
	span.End()
	publish(t, e.C, "q", "plain")
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	j := consume(t, e.C, "q", time.Minute)
	if j.TraceParent != want {
		t.Fatalf("consumed job's traceparent %q, want %q", j.TraceParent, want)
	}
	if got := trace.SpanContextFromContext(otelclient.JobContext(context.Background(), j)); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("JobContext carries %v, want the producer's %v", got, sc)
	}
	jobs, err := e.C.BatchConsume(ctxT(t), []string{"q"}, 2, time.Minute, 0)
	if err != nil || len(jobs) != 1 || string(jobs[0].Body) != "plain" || jobs[0].TraceParent != "" {
		t.Fatalf("batch consume of the plain job: %v %v", jobs, err)
	}
	if got := otelclient.JobContext(context.Background(), jobs[0]); trace.SpanContextFromContext(got).IsValid() {
		t.Fatalf("JobContext of a job without trace context has %v", trace.SpanContextFromContext(got))
	}
	// Batch consumes carry it as a field.
	for range 2 {
		if _, err := e.C.Publish(ctx, "b", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err = e.C.BatchConsume(ctxT(t), []string{"b"}, 2, time.Minute, 0)
	if err != nil || len(jobs) != 2 || jobs[0].TraceParent != want || jobs[1].TraceParent != want {
		t.Fatalf("batch consume: %v %v", jobs, err)
	}
}

// TestWorkerSpans: the worker runs each handler in a consumer span, a
// child of the producer's span, which the handler's context carries; a
// failed handler's span is an error.
func TestWorkerSpans(t *testing.T) {
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(ctxT(t), "produce")
	producer := span.SpanContext()
	id, err := e.C.Publish(ctx, "w", []byte("job"), client.Tries(2))
	if err != nil {
		t.Fatal(err)
	}
	span.End()
	handlerSpans := make(chan trace.SpanContext, 2)
	calls := 0
	startWorker(t, e.C, client.WorkerConfig{Queues: []string{"w"}, Observe: otelclient.WorkerSpans(tp), PollTimeout: time.Second},
		func(ctx context.Context, j *client.Job) error {
			handlerSpans <- trace.SpanContextFromContext(ctx)
			calls++
			if calls == 1 {
				return context.DeadlineExceeded // fails once: released, then handled
			}
			return nil
		})
	var seen []trace.SpanContext
	for range 2 {
		select {
		case sc := <-handlerSpans:
			seen = append(seen, sc)
		case <-time.After(20 * time.Second):
			t.Fatalf("the handler ran %d times, want 2", len(seen))
		}
	}
	eventually(t, 10*time.Second, "two handler spans ended", func() bool {
		n := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "process w" {
				n++
			}
		}
		return n == 2
	})
	var spans []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "process w" {
			spans = append(spans, s)
		}
	}
	for i, s := range spans {
		if s.Parent.SpanID() != producer.SpanID() || s.SpanContext.TraceID() != producer.TraceID() || s.SpanKind != trace.SpanKindConsumer {
			t.Fatalf("handler span %d: parent %v trace %v kind %v, want a consumer child of %v", i, s.Parent.SpanID(), s.SpanContext.TraceID(), s.SpanKind, producer)
		}
		if s.SpanContext.SpanID() != seen[i].SpanID() {
			t.Fatalf("handler %d ran with span %v, want its own %v", i, seen[i].SpanID(), s.SpanContext.SpanID())
		}
		a := map[string]string{}
		for _, kv := range s.Attributes {
			a[string(kv.Key)] = kv.Value.Emit()
		}
		if a["kairos.job_id"] != id || a["kairos.queue"] != "w" || a["kairos.namespace"] != e.NS {
			t.Fatalf("handler span attributes %v", a)
		}
	}
	if spans[0].Status.Code.String() != "Error" || spans[1].Status.Code.String() != "Unset" {
		t.Fatalf("statuses %v %v, want Error then Unset", spans[0].Status, spans[1].Status)
	}
}

// TestNoPropagationWithoutOption: a client without Propagate sends no
// trace context, even from inside a span: the client package itself does
// not know OpenTelemetry.
func TestNoPropagationWithoutOption(t *testing.T) {
	srv := kairostest.Start(t)
	c, err := client.New(srv.API, client.WithNamespace("ns1"), client.WithToken(srv.Token(t, "ns1", "")))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(ctxT(t), "produce")
	if _, err := c.Publish(ctx, "q", []byte("x")); err != nil {
		t.Fatal(err)
	}
	span.End()
	if j := consume(t, c, "q", time.Minute); j.TraceParent != "" {
		t.Fatalf("traceparent %q sent without Propagate", j.TraceParent)
	}
}
