package app_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/client/otelclient"
	"github.com/kairos-dev/kairos/engine/tracing"
)

// otlpSpan is one span an OTLP receiver got.
type otlpSpan struct {
	service, name     string
	trace, id, parent string // hex
	attrs             map[string]string
}

// otlpReceiver is an OTLP/HTTP trace receiver: POST /v1/traces with an
// ExportTraceServiceRequest in protobuf (gzip or not), as the
// collector's otlphttp receiver takes it.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []otlpSpan
	bad   []string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			r.fail(req.Method + " " + req.URL.Path + " " + req.Header.Get("Content-Type"))
			http.Error(w, "unsupported", http.StatusUnsupportedMediaType)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				r.fail("gzip: " + err.Error())
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &msg)
		}
		if err != nil {
			r.fail("decode: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *otlpReceiver) fail(s string) {
	r.mu.Lock()
	r.bad = append(r.bad, s)
	r.mu.Unlock()
}

func (r *otlpReceiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						attrs[kv.GetKey()] = v.GetStringValue()
					case v.GetIntValue() != 0:
						attrs[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
					}
				}
				r.spans = append(r.spans, otlpSpan{
					service: service, name: s.GetName(),
					trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()), attrs: attrs,
				})
			}
		}
	}
}

// byName returns the spans received so far, by name (the first of each).
func (r *otlpReceiver) byName() map[string]otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]otlpSpan{}
	for _, s := range r.spans {
		if _, ok := m[s.name]; !ok {
			m[s.name] = s
		}
	}
	return m
}

// TestE2ETracing: a real kairos-server on a real redis-server exports its
// spans over OTLP/HTTP (configured by OTEL_* only) to a receiver the test
// runs; the Go client publishes inside a producer span and its worker
// handles the job; the receiver gets one connected trace: producer →
// Kairos publish → Kairos consume and the worker's handler → Kairos ACK.
func TestE2ETracing(t *testing.T) {
	recv := startOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	k := startKairos(t, e2eRedisConfig(t)())
	if k.App.Tracing.Tracer() == nil {
		t.Fatal("OTEL_TRACES_EXPORTER=otlp did not turn tracing on")
	}
	tok := k.newToken(t, "e2e")

	// The application's own tracing: the same receiver, another service.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	app := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("e2e-app"))))
	defer func() { _ = app.Shutdown(context.Background()) }()

	c, err := client.New(k.API, client.WithToken(tok), client.WithNamespace("e2e"), otelclient.Propagate())
	if err != nil {
		t.Fatal(err)
	}
	pctx, produce := app.Tracer("e2e").Start(ctx, "produce")
	id, err := c.Publish(pctx, "orders", []byte("charge 42"))
	produce.End()
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	w, err := client.NewWorker(c, client.WorkerConfig{Queues: []string{"orders"}, Observe: otelclient.WorkerSpans(app), PollTimeout: time.Second},
		func(context.Context, *client.Job) error { handled <- struct{}{}; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-ctx.Done():
		t.Fatal("the worker did not get the job")
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	names := []string{"produce", tracing.SpanPublish, tracing.SpanConsume, "process orders", tracing.SpanAck}
	var got map[string]otlpSpan
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = recv.byName()
		all := true
		for _, n := range names {
			if _, ok := got[n]; !ok {
				all = false
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %v after 30 s, want %v (refused: %v)", got, names, recv.bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(recv.bad) > 0 {
		t.Fatalf("the receiver refused requests: %v", recv.bad)
	}
	p, pub, cons, proc, ack := got["produce"], got[tracing.SpanPublish], got[tracing.SpanConsume], got["process orders"], got[tracing.SpanAck]
	for _, s := range []otlpSpan{pub, cons, proc, ack} {
		if s.trace != p.trace {
			t.Errorf("span %q (%s) is in trace %s, want the producer's %s", s.name, s.service, s.trace, p.trace)
		}
	}
	for _, link := range []struct {
		child, parent otlpSpan
	}{{pub, p}, {cons, pub}, {proc, pub}, {ack, proc}} {
		if link.child.parent != link.parent.id {
			t.Errorf("span %q: parent %s, want %q (%s)", link.child.name, link.child.parent, link.parent.name, link.parent.id)
		}
	}
	for _, s := range []otlpSpan{pub, cons, ack} {
		if s.service != "kairos" || s.attrs["kairos.namespace"] != "e2e" || s.attrs["kairos.queue"] != "orders" || s.attrs["kairos.job_id"] != id {
			t.Errorf("Kairos span %q: service %q attributes %v", s.name, s.service, s.attrs)
		}
	}
	if p.service != "e2e-app" || proc.service != "e2e-app" || proc.attrs["kairos.job_id"] != id {
		t.Errorf("application spans: %+v %+v", p, proc)
	}
}
