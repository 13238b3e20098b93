package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/engine/tracing"
)

const (
	testTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTS = "rojo=00f067aa0ba902b7"
)

// receiver records the trace headers of each delivery and answers code.
func receiver(t *testing.T, code int) (string, chan [2]string) {
	got := make(chan [2]string, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- [2]string{r.Header.Get("Traceparent"), r.Header.Get("Tracestate")}
		w.WriteHeader(code)
	}))
	t.Cleanup(recv.Close)
	return recv.URL, got
}

// TestDeliveryTraceContext: with tracing off a delivery carries the job's
// own trace context (none for a job without one).
func TestDeliveryTraceContext(t *testing.T) {
	url, got := receiver(t, http.StatusOK)
	h := startManager(t, Options{})
	h.subscribe(t, Subscription{URL: url})
	j := job("J1", 1, "x")
	j.TraceParent, j.TraceState = testTP, testTS
	h.eng.jobs <- j
	h.eng.jobs <- job("J2", 1, "y")
	h.eng.waitSettled(t, 2)
	if s := <-got; s != [2]string{testTP, testTS} {
		t.Fatalf("delivery of a traced job: %q, want %q %q", s, testTP, testTS)
	}
	if s := <-got; s != [2]string{} {
		t.Fatalf("delivery of a job without trace context: %q", s)
	}
}

// TestDeliverySpan: with tracing on each delivery is a client span, a
// child of the job's trace context, named after the job; the receiver
// gets the span's context, and a failed delivery is an error.
func TestDeliverySpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: exp, Syncer: true, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	url, got := receiver(t, http.StatusInternalServerError)
	h := startManager(t, Options{Tracer: p.Tracer()})
	h.subscribe(t, Subscription{URL: url})
	j := job("J1", 2, "x")
	j.TraceParent, j.TraceState = testTP, testTS
	h.eng.jobs <- j
	h.eng.waitSettled(t, 1)
	h.stop()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != tracing.SpanWebhook || spans[0].SpanKind != trace.SpanKindClient {
		t.Fatalf("spans %v", spans)
	}
	s := spans[0]
	parent := tracing.SpanContextOf(testTP, testTS)
	if s.Parent.SpanID() != parent.SpanID() || s.SpanContext.TraceID() != parent.TraceID() {
		t.Fatalf("delivery span parent %v trace %v, want the job's %v", s.Parent.SpanID(), s.SpanContext.TraceID(), parent)
	}
	want, _ := tracing.Format(s.SpanContext)
	if h := <-got; h[0] != want || h[1] != testTS {
		t.Fatalf("receiver got %q, want the delivery span's %q", h, want)
	}
	a := map[string]string{}
	for _, kv := range s.Attributes {
		a[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"kairos.namespace": "ns", "kairos.queue": "q", "kairos.job_id": "J1", "kairos.pool": "default",
		"kairos.webhook.delivery": "2", "kairos.webhook.result": resultHTTPError, "http.response.status_code": "500"} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if s.Status.Code.String() != "Error" {
		t.Errorf("status %v, want Error", s.Status)
	}
}
