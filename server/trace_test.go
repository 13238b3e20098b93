package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/tracing"
	"github.com/kairos-dev/kairos/server/openapitest"
)

const (
	testTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTS = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

// checkSpec validates a live response against doc/openapi.yaml.
func checkSpec(t *testing.T, method, url string, h map[string]string, r liveResponse) {
	t.Helper()
	v, err := openapitest.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, val := range h {
		req.Header.Set(k, val)
	}
	if err := v.Check(openapitest.Public, req, r.status, r.header, []byte(r.body)); err != nil {
		t.Errorf("%s %s: not as doc/openapi.yaml says: %v", method, url, err)
	}
}

// loopModes are the two ways a live server serves the hot requests: its
// event loops (where the platform has them) and net/http alone.
var loopModes = map[string]int{"loops": 0, "net/http": -1}

// TestTraceContextPropagation: with tracing off, the W3C trace context of
// a publish is stored with the job and handed back on consume (a header
// for a single job, fields with X-Kairos-Extensions), on the event loops
// and on net/http alike; a traceparent that is not valid is ignored, and
// StoreTraceContext = false stores none.
func TestTraceContextPropagation(t *testing.T) {
	for mode, loops := range loopModes {
		t.Run(mode, func(t *testing.T) {
			l := startLive(t, liveOptions{config: func(c *config.Config) { c.Kairos.EventLoops = loops }})
			tok := l.token(t, "ns", auth.Scope{})
			plain := map[string]string{"X-Token": tok}
			ext := map[string]string{"X-Token": tok, extHeader: "1"}
			traced := map[string]string{"X-Token": tok, "Traceparent": testTP, "Tracestate": testTS}
			publish := func(q string, h map[string]string) string {
				t.Helper()
				r := liveDo(t, "PUT", l.api+"/api/ns/"+q, strings.NewReader("body"), h)
				if r.status != 201 {
					t.Fatalf("publish: %d %s", r.status, r.body)
				}
				var out struct {
					JobID string `json:"job_id"`
				}
				_ = json.Unmarshal([]byte(r.body), &out)
				return out.JobID
			}

			// A plain single-job consume: the trace context as headers,
			// lmstfy's body unchanged.
			publish("a", traced)
			r := liveDo(t, "GET", l.api+"/api/ns/a?ttr=30", nil, plain)
			if r.status != 200 || r.header.Get("Traceparent") != testTP || r.header.Get("Tracestate") != testTS {
				t.Fatalf("consume: %d %v %s; want the traceparent and tracestate headers", r.status, r.header, r.body)
			}
			if strings.Contains(r.body, "trace") {
				t.Fatalf("consume without X-Kairos-Extensions: body %s has trace fields", r.body)
			}
			checkSpec(t, "GET", l.api+"/api/ns/a?ttr=30", plain, r)

			// With X-Kairos-Extensions: fields, single and batch.
			id := publish("b", traced)
			publish("b", plain)
			r = liveDo(t, "GET", l.api+"/api/ns/b?count=2&ttr=30", nil, ext)
			var jobs []jobResponse
			if err := json.Unmarshal([]byte(r.body), &jobs); err != nil || len(jobs) != 2 {
				t.Fatalf("batch consume: %d %s %v", r.status, r.body, err)
			}
			for _, j := range jobs {
				want := [2]string{}
				if j.JobID == id {
					want = [2]string{testTP, testTS}
				}
				if j.TraceParent != want[0] || j.TraceState != want[1] {
					t.Fatalf("batch consume: job %s has %q %q, want %q", j.JobID, j.TraceParent, j.TraceState, want)
				}
			}
			if !strings.Contains(r.body, `"remain_tries":0,"traceparent":"`+testTP+`","tracestate":"`+testTS+`","ttl":`) {
				t.Fatalf("batch consume: fields out of place in %s", r.body)
			}
			if r.header.Get("Traceparent") != "" {
				t.Fatalf("batch consume: a traceparent header %q", r.header.Get("Traceparent"))
			}
			checkSpec(t, "GET", l.api+"/api/ns/b?count=2&ttr=30", ext, r)
			pk := liveDo(t, "GET", l.api+"/api/ns/b/job/"+id, nil, ext)
			if !strings.Contains(pk.body, `"traceparent":"`+testTP+`"`) {
				t.Fatalf("peek job: %s", pk.body)
			}
			checkSpec(t, "GET", l.api+"/api/ns/b/job/"+id, ext, pk)

			// Not valid: ignored (no traceparent, so no tracestate either).
			for _, bad := range []string{
				"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
				"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
				"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
				"garbage",
			} {
				h := map[string]string{"X-Token": tok, "Traceparent": bad, "Tracestate": testTS}
				r := liveDo(t, "PUT", l.api+"/api/ns/c", strings.NewReader("x"), h)
				if r.status == 201 {
					r = liveDo(t, "GET", l.api+"/api/ns/c?ttr=30", nil, plain)
					if r.header.Get("Traceparent") != "" || r.header.Get("Tracestate") != "" {
						t.Fatalf("traceparent %q: stored %v", bad, r.header)
					}
				}
			}
		})
	}
	t.Run("StoreTraceContext=false", func(t *testing.T) {
		off := false
		l := startLive(t, liveOptions{config: func(c *config.Config) { c.Kairos.StoreTraceContext = &off }})
		tok := l.token(t, "ns", auth.Scope{})
		liveDo(t, "PUT", l.api+"/api/ns/a", strings.NewReader("x"), map[string]string{"X-Token": tok, "Traceparent": testTP})
		r := liveDo(t, "GET", l.api+"/api/ns/a?ttr=30", nil, map[string]string{"X-Token": tok})
		if r.status != 200 || r.header.Get("Traceparent") != "" {
			t.Fatalf("consume: %d %v", r.status, r.header)
		}
	})
}

// spanRecorder is a tracer exporting to the SDK's in-memory exporter.
func spanRecorder(t *testing.T) (trace.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: exp, Syncer: true, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p.Tracer(), exp
}

// findSpans returns the ended spans called name.
func findSpans(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans called name have ended.
func waitSpans(t *testing.T, exp *tracetest.InMemoryExporter, name string, n int) []tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s := findSpans(exp, name); len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %q spans after 10 s, want %d; spans: %v", len(findSpans(exp, name)), name, n, spanNames(exp))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func spanNames(exp *tracetest.InMemoryExporter) []string {
	var out []string
	for _, s := range exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs fails unless span s has the string attributes want.
func checkAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if got[k].Emit() != v {
			t.Errorf("span %q: %s = %q, want %q (attributes %v)", s.Name, k, got[k].Emit(), v, s.Attributes)
		}
	}
}

// TestTracingSpans: with tracing on, publish, consume, ACK, release and
// the pump make spans with namespace, queue and job ID; the publish span
// continues the producer's trace and is the context stored with the job;
// the consume span continues it too; ACK and release join the trace of
// the request's traceparent. The event loops stay on: requests carrying a
// trace context go to net/http, which makes their spans, and the loops
// still hand back a consumed job's trace context.
func TestTracingSpans(t *testing.T) {
	tracer, exp := spanRecorder(t)
	l := startLive(t, liveOptions{tracer: tracer})
	tok := l.token(t, "ns", auth.Scope{})
	producer := tracing.SpanContextOf(testTP, testTS)

	r := liveDo(t, "PUT", l.api+"/api/ns/q?tries=2", strings.NewReader("x"), map[string]string{"X-Token": tok, "Traceparent": testTP, "Tracestate": testTS})
	var pub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(r.body), &pub); err != nil || r.status != 201 {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	ps := waitSpans(t, exp, tracing.SpanPublish, 1)[0]
	if ps.Parent.SpanID() != producer.SpanID() || ps.SpanContext.TraceID() != producer.TraceID() || !ps.Parent.IsRemote() {
		t.Fatalf("publish span: parent %v trace %v, want the producer's %v", ps.Parent.SpanID(), ps.SpanContext.TraceID(), producer)
	}
	if ps.SpanKind != trace.SpanKindServer {
		t.Errorf("publish span kind %v", ps.SpanKind)
	}
	checkAttrs(t, ps, map[attribute.Key]string{tracing.AttrNamespace: "ns", tracing.AttrQueue: "q", tracing.AttrJobID: pub.JobID,
		"messaging.system": "kairos", "messaging.message.id": pub.JobID, "http.response.status_code": "201"})

	// The job carries the publish span's context: same trace, the
	// publish span as parent, the producer's tracestate.
	r = liveDo(t, "GET", l.api+"/api/ns/q?ttr=30", nil, map[string]string{"X-Token": tok, extHeader: "1"})
	wantTP, _ := tracing.Format(ps.SpanContext)
	if got := r.header.Get("Traceparent"); got != wantTP || r.header.Get("Tracestate") != testTS {
		t.Fatalf("consume: traceparent %q tracestate %q, want %q %q", got, r.header.Get("Tracestate"), wantTP, testTS)
	}
	var job jobResponse
	_ = json.Unmarshal([]byte(r.body), &job)
	cs := waitSpans(t, exp, tracing.SpanConsume, 1)[0]
	if cs.Parent.SpanID() != ps.SpanContext.SpanID() || cs.SpanContext.TraceID() != producer.TraceID() {
		t.Fatalf("consume span: parent %v, want the publish span %v", cs.Parent.SpanID(), ps.SpanContext.SpanID())
	}
	if len(cs.Links) != 1 || cs.Links[0].SpanContext.SpanID() != ps.SpanContext.SpanID() {
		t.Fatalf("consume span links %v", cs.Links)
	}
	checkAttrs(t, cs, map[attribute.Key]string{tracing.AttrNamespace: "ns", tracing.AttrQueue: "q", tracing.AttrJobID: pub.JobID})

	// Release and ACK as a worker whose span continues the job's trace.
	worker := "00-" + producer.TraceID().String() + "-1111111111111111-01"
	r = liveDo(t, "PUT", l.api+"/api/ns/q/job/"+pub.JobID+"/release?receipt="+job.Receipt, nil, map[string]string{"X-Token": tok, "Traceparent": worker})
	if r.status != 204 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	rs := waitSpans(t, exp, tracing.SpanRelease, 1)[0]
	r = liveDo(t, "GET", l.api+"/api/ns/q?ttr=30", nil, map[string]string{"X-Token": tok})
	if r.status != 200 {
		t.Fatalf("consume again: %d %s", r.status, r.body)
	}
	r = liveDo(t, "DELETE", l.api+"/api/ns/q/job/"+pub.JobID, nil, map[string]string{"X-Token": tok, "Traceparent": worker})
	if r.status != 204 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	as := waitSpans(t, exp, tracing.SpanAck, 1)[0]
	for _, s := range []tracetest.SpanStub{rs, as} {
		if s.Parent.SpanID().String() != "1111111111111111" || s.SpanContext.TraceID() != producer.TraceID() {
			t.Fatalf("%s span: parent %v trace %v, want the worker's", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID())
		}
		checkAttrs(t, s, map[attribute.Key]string{tracing.AttrNamespace: "ns", tracing.AttrQueue: "q", tracing.AttrJobID: pub.JobID})
	}

	// The pump moving a delayed job.
	r = liveDo(t, "PUT", l.api+"/api/ns/d?delay_ms=50", strings.NewReader("x"), map[string]string{"X-Token": tok})
	_ = json.Unmarshal([]byte(r.body), &pub)
	pumped := waitSpans(t, exp, tracing.SpanPump, 1)
	checkAttrs(t, pumped[0], map[attribute.Key]string{tracing.AttrNamespace: "ns", tracing.AttrQueue: "d", tracing.AttrJobID: pub.JobID,
		tracing.AttrPool: "default", tracing.AttrMoved: "1"})

	// A bulk publish names every job; a publish without traceparent is a
	// root span, and its context is stored all the same.
	r = liveDo(t, "PUT", l.api+"/api/ns/b/bulk", strings.NewReader(`[1,2]`), map[string]string{"X-Token": tok})
	if r.status != 201 {
		t.Fatalf("bulk: %d %s", r.status, r.body)
	}
	var bulk struct {
		JobIDs []string `json:"job_ids"`
	}
	if err := json.Unmarshal([]byte(r.body), &bulk); err != nil || len(bulk.JobIDs) != 2 {
		t.Fatalf("bulk: %s %v", r.body, err)
	}
	bs := waitSpans(t, exp, tracing.SpanPublish, 3)[2]
	if got := attrs(bs)[tracing.AttrJobID].AsStringSlice(); len(got) != 2 || got[0] != bulk.JobIDs[0] || got[1] != bulk.JobIDs[1] {
		t.Fatalf("bulk publish span job IDs %v, want %v", got, bulk.JobIDs)
	}
	if bs.Parent.IsValid() {
		t.Fatalf("bulk publish span has parent %v", bs.Parent)
	}
	r = liveDo(t, "GET", l.api+"/api/ns/b?ttr=30", nil, map[string]string{"X-Token": tok})
	if want, _ := tracing.Format(bs.SpanContext); r.header.Get("Traceparent") != want {
		t.Fatalf("consume of a bulk job: traceparent %q, want %q", r.header.Get("Traceparent"), want)
	}
}

// BenchmarkTracingOffSpanSites: with tracing off the span sites cost
// nothing: a publish's trace context read (absent and present) and the
// route helpers allocate nothing.
func BenchmarkTracingOffSpanSites(b *testing.B) {
	s := &Server{storeTrace: true}
	absent := map[string][]string{"X-Token": {"t"}}
	present := map[string][]string{"X-Token": {"t"}, hdrTraceParent: {testTP}, hdrTraceState: {testTS}}
	b.ReportAllocs()
	for b.Loop() {
		if tp, _ := requestTrace(absent); tp != "" {
			b.Fatal(tp)
		}
		if tp, _ := requestTrace(present); tp != testTP {
			b.Fatal(tp)
		}
		if h := s.traced(tracing.SpanPublish, trace.SpanKindServer, nil); len(h) != 1 {
			b.Fatal(len(h))
		}
	}
}

// TestTracingOffAllocatesNothing runs the benchmark above as a test.
func TestTracingOffAllocatesNothing(t *testing.T) {
	r := testing.Benchmark(BenchmarkTracingOffSpanSites)
	if a := r.AllocsPerOp(); a != 0 {
		t.Fatalf("tracing off: %d allocations per request's trace handling, want 0", a)
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)
