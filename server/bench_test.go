package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

// The benchmarks of this file measure the HTTP side of the hot routes
// (publish, bulk publish, consume, ACK): everything between the handler
// being called and the engine, and from the engine's answer to the
// response bytes. The engine answers at once from memory; tokens and rate
// limits are the real auth.Store and auth.Throttler (over miniredis, which
// the store's cache keeps out of the loop), as the server runs them.

// benchEngine answers the hot routes at once with fixed results.
type benchEngine struct {
	fakeEngine
	id   string
	ids  []string
	jobs []*engine.Job
}

func (e *benchEngine) Publish(context.Context, *engine.PublishRequest) (string, error) {
	return e.id, nil
}

func (e *benchEngine) PublishBatch(_ context.Context, reqs []*engine.PublishRequest) ([]string, error) {
	return e.ids[:len(reqs)], nil
}

func (e *benchEngine) Consume(context.Context, *engine.ConsumeRequest) ([]*engine.Job, error) {
	return e.jobs, nil
}

func (e *benchEngine) Delete(context.Context, string, string, string) error { return nil }

// discardWriter is a ResponseWriter that keeps only the status and the
// body size; its header map is reused between requests, as a test must not
// charge the handler for the recorder's allocations.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// benchServer is a Server as kairos-server builds it (info logging, no
// access log, real token store and throttler), over a benchEngine.
type benchServer struct {
	srv   *Server
	eng   *benchEngine
	token string
}

func newBenchServer(b *testing.B) *benchServer {
	b.Helper()
	m := miniredis.RunT(b)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b.Cleanup(func() { _ = client.Close() })
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	logger.SetLevel(logrus.InfoLevel)
	tokens := auth.NewStore(client, []string{"default"}, logger, auth.StoreOptions{CacheTTL: time.Hour})
	throttler := auth.NewThrottler(client, logger, auth.ThrottlerOptions{})
	now := time.Now()
	eng := &benchEngine{id: engine.NewJobID(now, 0, false)}
	body := bytes.Repeat([]byte("x"), 100)
	for range engine.MaxBulkPublish {
		eng.ids = append(eng.ids, engine.NewJobID(now, 0, false))
	}
	eng.jobs = []*engine.Job{{
		Namespace: "bench", Queue: "q", ID: eng.id, Body: body,
		TTL: time.Hour, Tries: 2,
	}}
	reg := prometheus.NewRegistry()
	srv, err := New(testConfig(), Deps{
		Engines:    map[string]engine.Engine{"default": eng},
		Tokens:     tokens,
		Throttler:  throttler,
		Logger:     logger,
		Registerer: reg,
		Gatherer:   reg,
	})
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	tok, err := tokens.Create(context.Background(), "default", "bench", "bench", "", auth.Scope{})
	if err != nil {
		b.Fatalf("create token: %v", err)
	}
	if err := throttler.Reload(context.Background()); err != nil {
		b.Fatalf("reload limits: %v", err)
	}
	return &benchServer{srv: srv, eng: eng, token: tok}
}

// run serves req (with body, resent every time) b.N times and checks the
// status of every response.
func (bs *benchServer) run(b *testing.B, req *http.Request, body []byte, want int) {
	b.Helper()
	req.Header.Set("X-Token", bs.token)
	h := bs.srv.Handler()
	w := &discardWriter{h: make(http.Header)}
	rd := bytes.NewReader(body)
	rc := io.NopCloser(rd)
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		if body != nil {
			rd.Reset(body)
			req.Body = rc
			req.ContentLength = int64(len(body))
		}
		h.ServeHTTP(w, req)
		if w.code != want {
			b.Fatalf("status %d, want %d", w.code, want)
		}
	}
}

func BenchmarkHotRoutes(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 100)
	var bulk strings.Builder
	bulk.WriteByte('[')
	for i := range engine.MaxBulkPublish {
		if i > 0 {
			bulk.WriteByte(',')
		}
		bulk.WriteString(`"` + string(body) + `"`)
	}
	bulk.WriteByte(']')

	b.Run("publish", func(b *testing.B) {
		bs := newBenchServer(b)
		req := httptest.NewRequest(http.MethodPut, "/api/bench/q?ttl=3600&tries=3&delay=0", nil)
		bs.run(b, req, body, http.StatusCreated)
	})
	b.Run("bulk64", func(b *testing.B) {
		bs := newBenchServer(b)
		req := httptest.NewRequest(http.MethodPut, "/api/bench/q/bulk?ttl=3600&tries=3&delay=0", nil)
		bs.run(b, req, []byte(bulk.String()), http.StatusCreated)
	})
	b.Run("consume", func(b *testing.B) {
		bs := newBenchServer(b)
		req := httptest.NewRequest(http.MethodGet, "/api/bench/q?ttr=30&timeout=0", nil)
		bs.run(b, req, nil, http.StatusOK)
	})
	b.Run("consume_wait", func(b *testing.B) { // a long-poll that finds a job at once
		bs := newBenchServer(b)
		req := httptest.NewRequest(http.MethodGet, "/api/bench/q?ttr=30&timeout=3", nil)
		bs.run(b, req, nil, http.StatusOK)
	})
	b.Run("ack", func(b *testing.B) {
		bs := newBenchServer(b)
		req := httptest.NewRequest(http.MethodDelete, "/api/bench/q/job/"+bs.eng.id, nil)
		bs.run(b, req, nil, http.StatusNoContent)
	})
}
