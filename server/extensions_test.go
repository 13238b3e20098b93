package server

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/webhook"
)

// newExtEnv is newEnv with a fresh fake engine for the default pool,
// returned for the tests to set up.
func newExtEnv(t testing.TB, opts ...envOption) (*testEnv, *fakeEngine) {
	t.Helper()
	x := &fakeEngine{}
	opts = append([]envOption{func(_ *config.Config, d *Deps) { d.Engines["default"] = x }}, opts...)
	env := newEnv(t, opts...)
	return env, x
}

const testReceipt = "0123456789abcdef"

var extHdr = map[string]string{"X-Token": goodToken, extHeader: "1"}

// TestExtPublish covers delay_ms, ttl_ms, due_at, priority and the
// idempotency key on publish, bulk publish and re-publish.
func TestExtPublish(t *testing.T) {
	const id = "01HZZZZZZZZZZZZZZZZZ000000"
	created := `{"job_id":"` + id + `","msg":"published"}`
	base := func(mut func(r *engine.PublishRequest)) *engine.PublishRequest {
		r := &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1}
		mut(r)
		return r
	}
	tests := []struct {
		name   string
		query  string
		header map[string]string
		engErr error
		status int
		resp   string
		want   *engine.PublishRequest // nil: the engine must not be called
	}{
		{name: "delay_ms", query: "delay_ms=1500", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Delay = 1500 * time.Millisecond })},
		{name: "ttl_ms", query: "ttl_ms=2500", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.TTL = 2500 * time.Millisecond })},
		{name: "ms win over seconds", query: "delay=5&delay_ms=10&ttl=100&ttl_ms=20", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Delay, r.TTL = 10*time.Millisecond, 20*time.Millisecond })},
		{name: "ttl_ms shorter than delay_ms", query: "delay_ms=500&ttl_ms=499", status: 400, resp: `{"error":"ttl is shorter than delay"}`},
		{name: "ttl_ms 0 is forever", query: "delay_ms=500&ttl_ms=0", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Delay, r.TTL = 500*time.Millisecond, 0 })},
		{name: "bad delay_ms", query: "delay_ms=-1", status: 400, resp: `{"error":"invalid delay_ms"}`},
		{name: "delay_ms too large", query: "delay_ms=4294967295001", status: 400, resp: `{"error":"invalid delay_ms"}`},
		{name: "bad ttl_ms", query: "ttl_ms=1.5", status: 400, resp: `{"error":"invalid ttl_ms"}`},
		{name: "lmstfy's delay check comes first", query: "delay=x&delay_ms=y", status: 400, resp: `{"error":"invalid delay"}`},
		// due_at goes to the engine as the instant itself (which stores it
		// as is), not as a delay from the server's clock.
		{name: "due_at RFC 3339", query: "due_at=2026-01-02T03:04:07.250Z", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.DueAt = time.Date(2026, 1, 2, 3, 4, 7, 250e6, time.UTC) })},
		{name: "due_at with an offset", query: "due_at=2026-01-02T04:04:08%2B01:00", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.DueAt = time.Date(2026, 1, 2, 3, 4, 8, 0, time.UTC) })},
		{name: "due_at with an unencoded plus", query: "due_at=2026-01-02T04:04:08+01:00", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.DueAt = time.Date(2026, 1, 2, 3, 4, 8, 0, time.UTC) })},
		{name: "due_at Unix ms", query: "due_at=" + strconv.FormatInt(time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC).UnixMilli(), 10), status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.DueAt = time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC) })},
		{name: "due_at in the past is now (the engine's call)", query: "due_at=2020-01-01T00:00:00Z", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.DueAt = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) })},
		{name: "due_at beyond the ttl", query: "due_at=2026-01-04T03:04:05Z", status: 400, resp: `{"error":"ttl is shorter than delay"}`},
		{name: "due_at beyond the ttl, ttl 0", query: "due_at=2026-01-04T03:04:05Z&ttl=0", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.DueAt, r.TTL = time.Date(2026, 1, 4, 3, 4, 5, 0, time.UTC), 0 })},
		{name: "due_at and delay", query: "due_at=2026-01-02T03:04:07Z&delay=1", status: 400, resp: `{"error":"due_at conflicts with delay"}`},
		{name: "due_at and delay_ms", query: "due_at=2026-01-02T03:04:07Z&delay_ms=1", status: 400, resp: `{"error":"due_at conflicts with delay"}`},
		{name: "bad due_at", query: "due_at=tomorrow", status: 400, resp: `{"error":"invalid due_at"}`},
		{name: "empty due_at", query: "due_at=", status: 400, resp: `{"error":"invalid due_at"}`},
		{name: "huge due_at", query: "due_at=99999999999999999999", status: 400, resp: `{"error":"invalid due_at"}`},
		{name: "due_at too far", query: "due_at=9999-01-01T00:00:00Z&ttl=0", status: 400, resp: `{"error":"invalid due_at"}`},
		{name: "priority", query: "priority=255", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Priority = 255 })},
		{name: "priority 256", query: "priority=256", status: 400, resp: `{"error":"invalid priority"}`},
		{name: "negative priority", query: "priority=-1", status: 400, resp: `{"error":"invalid priority"}`},
		{name: "job_key", query: "job_key=order-42", status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Key = "order-42" })},
		{name: "Idempotency-Key", header: map[string]string{"Idempotency-Key": "order/43"}, status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Key = "order/43" })},
		{name: "both, equal", query: "job_key=k", header: map[string]string{"Idempotency-Key": "k"}, status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Key = "k" })},
		{name: "both, different", query: "job_key=k", header: map[string]string{"Idempotency-Key": "j"}, status: 400, resp: `{"error":"job_key and Idempotency-Key differ"}`},
		{name: "empty job_key", query: "job_key=", status: 400, resp: `{"error":"invalid job_key"}`},
		{name: "job_key too long", query: "job_key=" + strings.Repeat("k", 257), status: 400, resp: `{"error":"invalid job_key"}`},
		{name: "Idempotency-Key too long", header: map[string]string{"Idempotency-Key": strings.Repeat("k", 257)}, status: 400, resp: `{"error":"invalid job_key"}`},
		{name: "job_key of 256 bytes", query: "job_key=" + strings.Repeat("k", 256), status: 201, resp: created,
			want: base(func(r *engine.PublishRequest) { r.Key = strings.Repeat("k", 256) })},
		{name: "duplicate key answers the first job with 200", query: "job_key=k", engErr: fmt.Errorf("publish: %w", engine.ErrKeyExists),
			status: 200, resp: `{"job_id":"` + id + `","msg":"duplicate job_key"}`,
			want: base(func(r *engine.PublishRequest) { r.Key = "k" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, x := newExtEnv(t)
			var got *engine.PublishRequest
			x.publish = func(_ context.Context, r *engine.PublishRequest) (string, error) {
				got = r
				return id, tc.engErr
			}
			hdr := tok(goodToken)
			for k, v := range tc.header {
				hdr[k] = v
			}
			w := env.api(t, request{method: "PUT", target: "/api/ns/q?" + tc.query, body: "x", header: hdr})
			expect(t, w, tc.status, tc.resp)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("engine called with %+v", got)
				}
				return
			}
			if got != nil {
				got.DueAt = got.DueAt.UTC() // the same instant, whatever the zone it was written in
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("engine got %+v\nwant %+v", got, tc.want)
			}
		})
	}

	t.Run("re-publish takes the extensions", func(t *testing.T) {
		env, x := newExtEnv(t)
		var got *engine.PublishRequest
		x.publish = func(_ context.Context, r *engine.PublishRequest) (string, error) { got = r; return id, nil }
		w := env.api(t, request{method: "PUT", target: "/api/ns/q/job/OLD?delay_ms=5&priority=3&job_key=k", body: "x", header: tok(goodToken)})
		expect(t, w, 201, created)
		want := base(func(r *engine.PublishRequest) {
			r.Delay, r.Priority, r.Key, r.Replaces = 5*time.Millisecond, 3, "k", "OLD"
		})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("engine got %+v", got)
		}
	})
	t.Run("bulk takes delay_ms, ttl_ms and priority, not a key", func(t *testing.T) {
		env, x := newExtEnv(t)
		var got []*engine.PublishRequest
		x.publishBatch = func(_ context.Context, rs []*engine.PublishRequest) ([]string, error) {
			got = rs
			return []string{"A", "B"}, nil
		}
		w := env.api(t, request{method: "PUT", target: "/api/ns/q/bulk?delay_ms=7&ttl_ms=9000&priority=2", body: `[1,2]`, header: tok(goodToken)})
		expect(t, w, 201, `{"job_ids":["A","B"],"msg":"published"}`)
		for i, r := range got {
			if r.Delay != 7*time.Millisecond || r.TTL != 9*time.Second || r.Priority != 2 || string(r.Body) != strconv.Itoa(i+1) {
				t.Fatalf("job %d: %+v", i, r)
			}
		}
		for _, hdr := range []map[string]string{{"X-Token": goodToken, "Idempotency-Key": "k"}, tok(goodToken)} {
			target := "/api/ns/q/bulk"
			if len(hdr) == 1 {
				target += "?job_key=k"
			}
			w = env.api(t, request{method: "PUT", target: target, body: `[1]`, header: hdr})
			expect(t, w, 400, `{"error":"job_key is not allowed in bulk publish"}`)
		}
	})
}

// TestExtConsume covers ttr_ms, timeout_ms and the receipt.
func TestExtConsume(t *testing.T) {
	env0 := newEnv(t)
	id := testJobID(env0)
	job := &engine.Job{Namespace: "ns", Queue: "q", ID: id, Body: []byte("hello"), TTL: time.Hour, Tries: 2, Receipt: testReceipt, Deliveries: 1}
	lmstfy := `{"attributes":null,"data":"aGVsbG8=","elapsed_ms":1500,"job_id":"` + id + `","msg":"new job","namespace":"ns","queue":"q","remain_tries":2,"ttl":3600}`
	withReceipt := strings.Replace(lmstfy, `"queue":"q",`, `"queue":"q","receipt":"`+testReceipt+`",`, 1)
	tests := []struct {
		name   string
		target string
		header map[string]string
		status int
		resp   string
		ttr    time.Duration
		wait   time.Duration
	}{
		{name: "no receipt without the header", target: "/api/ns/q", header: tok(goodToken), status: 200, resp: lmstfy, ttr: 120 * time.Second},
		{name: "header 0", target: "/api/ns/q", header: map[string]string{"X-Token": goodToken, extHeader: "0"}, status: 200, resp: lmstfy, ttr: 120 * time.Second},
		{name: "receipt with the header", target: "/api/ns/q", header: extHdr, status: 200, resp: withReceipt, ttr: 120 * time.Second},
		{name: "header yes", target: "/api/ns/q", header: map[string]string{"X-Token": goodToken, extHeader: "YES"}, status: 200, resp: withReceipt, ttr: 120 * time.Second},
		{name: "receipts in a batch", target: "/api/ns/q?count=2", header: extHdr, status: 200, resp: "[" + withReceipt + "," + withReceipt + "]", ttr: 120 * time.Second},
		{name: "ttr_ms and timeout_ms", target: "/api/ns/q?ttr_ms=1500&timeout_ms=250", header: tok(goodToken), status: 200, resp: lmstfy, ttr: 1500 * time.Millisecond, wait: 250 * time.Millisecond},
		{name: "ms win", target: "/api/ns/q?ttr=9&ttr_ms=1&timeout=9&timeout_ms=2", header: tok(goodToken), status: 200, resp: lmstfy, ttr: time.Millisecond, wait: 2 * time.Millisecond},
		{name: "timeout_ms capped", target: "/api/ns/q?timeout_ms=99999999999", header: tok(goodToken), status: 200, resp: lmstfy, ttr: 120 * time.Second, wait: 600 * time.Second},
		{name: "bad ttr_ms", target: "/api/ns/q?ttr_ms=x", header: tok(goodToken), status: 400, resp: `{"error":"invalid ttr_ms"}`},
		{name: "ttr_ms too large", target: "/api/ns/q?ttr_ms=4294967295001", header: tok(goodToken), status: 400, resp: `{"error":"invalid ttr_ms"}`},
		{name: "bad timeout_ms", target: "/api/ns/q?timeout_ms=-5", header: tok(goodToken), status: 400, resp: `{"error":"invalid timeout_ms"}`},
		{name: "lmstfy's ttr check first", target: "/api/ns/q?ttr=-1&ttr_ms=x", header: tok(goodToken), status: 400, resp: `{"error":"invalid ttr"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, x := newExtEnv(t)
			var got *engine.ConsumeRequest
			x.consume = func(_ context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
				got = r
				if r.Count == 2 {
					return []*engine.Job{job, job}, nil
				}
				return []*engine.Job{job}, nil
			}
			w := env.api(t, request{method: "GET", target: tc.target, header: tc.header})
			expect(t, w, tc.status, tc.resp)
			if tc.status != 200 {
				if got != nil {
					t.Fatalf("engine called: %+v", got)
				}
				return
			}
			if got.TTR != tc.ttr || got.Timeout != tc.wait {
				t.Fatalf("engine got ttr %v timeout %v, want %v %v", got.TTR, got.Timeout, tc.ttr, tc.wait)
			}
		})
	}
}

// TestExtJobRoutes covers ACK with a receipt, release, touch, cancel by
// key, pause/resume, peek with the Kairos fields and dead-letter browsing.
func TestExtJobRoutes(t *testing.T) {
	env0 := newEnv(t)
	id := testJobID(env0)
	now := env0.now
	deadJob := &engine.Job{Namespace: "ns", Queue: "q", ID: id, Body: []byte("hi"), State: engine.StateDead, Deliveries: 3, Priority: 2,
		DeadReason: engine.ReasonTTRExpired, DeadAt: now.Add(-time.Second)}
	deadJSON := `{"attributes":null,"data":"aGk=","dead_at_ms":` + strconv.FormatInt(now.Add(-time.Second).UnixMilli(), 10) +
		`,"dead_reason":"ttr_expired","deliveries":3,"due_at_ms":0,"elapsed_ms":1500,"job_id":"` + id +
		`","namespace":"ns","priority":2,"queue":"q","remain_tries":0,"state":"dead","ttl":0}`
	flying := &engine.Job{Namespace: "ns", Queue: "q", ID: id, Body: []byte("hi"), TTL: 10 * time.Second, Tries: 1, State: engine.StateInFlight,
		Deliveries: 1, DueAt: now.Add(30 * time.Second)}
	flyingJSON := `{"attributes":null,"data":"aGk=","dead_at_ms":0,"dead_reason":"","deliveries":1,"due_at_ms":` +
		strconv.FormatInt(now.Add(30*time.Second).UnixMilli(), 10) + `,"elapsed_ms":1500,"job_id":"` + id +
		`","namespace":"ns","priority":0,"queue":"q","remain_tries":1,"state":"in_flight","ttl":10}`
	stale := fmt.Errorf("x: %w", engine.ErrStaleReceipt)
	missing := fmt.Errorf("x: %w", engine.ErrJobNotFound)

	tests := []struct {
		name   string
		req    request
		setup  func(x *fakeEngine, got *[]any)
		status int
		resp   string
		args   []any
	}{
		// ACK with a receipt.
		{name: "ack with receipt", req: request{method: "DELETE", target: "/api/ns/q/job/J?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.ack = func(_ context.Context, ns, q, id, r string) error { *got = append(*got, ns, q, id, r); return nil }
			}, status: 204, args: []any{"ns", "q", "J", testReceipt}},
		{name: "ack stale", req: request{method: "DELETE", target: "/api/ns/q/job/J?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.ack = func(context.Context, string, string, string, string) error { return stale }
			},
			status: 409, resp: `{"error":"stale receipt"}`},
		{name: "ack unknown", req: request{method: "DELETE", target: "/api/ns/q/job/J?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.ack = func(context.Context, string, string, string, string) error { return missing }
			},
			status: 404, resp: `{"error":"job not found"}`},
		{name: "ack empty receipt", req: request{method: "DELETE", target: "/api/ns/q/job/J?receipt=", header: tok(goodToken)},
			status: 400, resp: `{"error":"missing receipt"}`},
		{name: "ack bad receipt", req: request{method: "DELETE", target: "/api/ns/q/job/J?receipt=0123456789abcdeg", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid receipt"}`},
		{name: "ack without receipt is lmstfy's", req: request{method: "DELETE", target: "/api/ns/q/job/J", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.del = func(_ context.Context, ns, q, id string) error { *got = append(*got, ns, q, id); return nil }
			}, status: 204, args: []any{"ns", "q", "J"}},

		// Release.
		{name: "release with the policy", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.release = func(_ context.Context, r *engine.ReleaseRequest) error { *got = append(*got, *r); return nil }
			}, status: 204,
			args: []any{engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: "J", Receipt: testReceipt, UsePolicy: true, Reason: engine.ReasonNacked}}},
		{name: "release delay_ms keep_try", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt + "&delay_ms=250&delay=9&keep_try=true", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.release = func(_ context.Context, r *engine.ReleaseRequest) error { *got = append(*got, *r); return nil }
			}, status: 204,
			args: []any{engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: "J", Receipt: testReceipt, Delay: 250 * time.Millisecond, KeepTry: true, Reason: engine.ReasonNacked}}},
		{name: "release delay 0", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt + "&delay=0&keep_try=0", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.release = func(_ context.Context, r *engine.ReleaseRequest) error { *got = append(*got, *r); return nil }
			}, status: 204,
			args: []any{engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: "J", Receipt: testReceipt, Reason: engine.ReasonNacked}}},
		{name: "release stale", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.release = func(context.Context, *engine.ReleaseRequest) error { return stale }
			},
			status: 409, resp: `{"error":"stale receipt"}`},
		{name: "release unknown", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.release = func(context.Context, *engine.ReleaseRequest) error { return missing }
			},
			status: 404, resp: `{"error":"job not found"}`},
		{name: "release without receipt", req: request{method: "PUT", target: "/api/ns/q/job/J/release", header: tok(goodToken)},
			status: 400, resp: `{"error":"missing receipt"}`},
		{name: "release short receipt", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=abc", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid receipt"}`},
		{name: "release bad delay_ms", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt + "&delay_ms=x", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid delay_ms"}`},
		{name: "release bad delay", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt + "&delay=-1", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid delay"}`},
		{name: "release bad keep_try", req: request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt + "&keep_try=maybe", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid keep_try"}`},

		// Touch.
		{name: "touch ttr_ms", req: request{method: "PUT", target: "/api/ns/q/job/J/touch?receipt=" + testReceipt + "&ttr=9&ttr_ms=1500", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.touch = func(_ context.Context, ns, q, id, r string, ttr time.Duration) (time.Time, error) {
					*got = append(*got, ns, q, id, r, ttr)
					return time.UnixMilli(1700000001500), nil
				}
			}, status: 200, resp: `{"due_at_ms":1700000001500,"job_id":"J"}`, args: []any{"ns", "q", "J", testReceipt, 1500 * time.Millisecond}},
		{name: "touch ttr", req: request{method: "PUT", target: "/api/ns/q/job/J/touch?receipt=" + testReceipt + "&ttr=30", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.touch = func(_ context.Context, _, _, _, _ string, ttr time.Duration) (time.Time, error) {
					*got = append(*got, ttr)
					return time.UnixMilli(5), nil
				}
			}, status: 200, resp: `{"due_at_ms":5,"job_id":"J"}`, args: []any{30 * time.Second}},
		{name: "touch default ttr", req: request{method: "PUT", target: "/api/ns/q/job/J/touch?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.touch = func(_ context.Context, _, _, _, _ string, ttr time.Duration) (time.Time, error) {
					*got = append(*got, ttr)
					return time.UnixMilli(5), nil
				}
			}, status: 200, resp: `{"due_at_ms":5,"job_id":"J"}`, args: []any{120 * time.Second}},
		{name: "touch stale", req: request{method: "PUT", target: "/api/ns/q/job/J/touch?receipt=" + testReceipt, header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.touch = func(context.Context, string, string, string, string, time.Duration) (time.Time, error) {
					return time.Time{}, stale
				}
			}, status: 409, resp: `{"error":"stale receipt"}`},
		{name: "touch bad ttr", req: request{method: "PUT", target: "/api/ns/q/job/J/touch?receipt=" + testReceipt + "&ttr=x", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid ttr"}`},
		{name: "touch bad ttr_ms", req: request{method: "PUT", target: "/api/ns/q/job/J/touch?receipt=" + testReceipt + "&ttr_ms=x", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid ttr_ms"}`},

		// Cancel by key.
		{name: "cancel key", req: request{method: "DELETE", target: "/api/ns/q/job_key/order-42", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.cancelKey = func(_ context.Context, ns, q, k string) (string, error) {
					*got = append(*got, ns, q, k)
					return "ID1", nil
				}
			}, status: 200, resp: `{"job_id":"ID1","msg":"cancelled"}`, args: []any{"ns", "q", "order-42"}},
		{name: "cancel key with a slash", req: request{method: "DELETE", target: "/api/ns/q/job_key/a%2Fb/c", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.cancelKey = func(_ context.Context, _, _, k string) (string, error) { *got = append(*got, k); return "ID1", nil }
			}, status: 200, resp: `{"job_id":"ID1","msg":"cancelled"}`, args: []any{"a/b/c"}},
		{name: "cancel unknown key", req: request{method: "DELETE", target: "/api/ns/q/job_key/nope", header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.cancelKey = func(context.Context, string, string, string) (string, error) { return "", missing }
			},
			status: 404, resp: `{"error":"job key not found"}`},
		{name: "cancel empty key", req: request{method: "DELETE", target: "/api/ns/q/job_key/", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid job_key"}`},

		// Pause and resume keep the other settings.
		{name: "pause", req: request{method: "PUT", target: "/api/ns/q/pause", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.queueConfig = func(context.Context, string, string) (engine.QueueConfig, error) {
					return engine.QueueConfig{Backoff: &engine.Backoff{Kind: "fixed", Base: time.Second}, DeadTTL: time.Hour}, nil
				}
				x.setQueueConfig = func(_ context.Context, ns, q string, cfg engine.QueueConfig) error {
					*got = append(*got, ns, q, cfg.Backoff.String(), cfg.DeadTTL, cfg.Paused)
					return nil
				}
			}, status: 204, args: []any{"ns", "q", "fixed:1s", time.Hour, true}},
		{name: "resume", req: request{method: "PUT", target: "/api/ns/q/resume", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.queueConfig = func(context.Context, string, string) (engine.QueueConfig, error) {
					return engine.QueueConfig{Paused: true}, nil
				}
				x.setQueueConfig = func(_ context.Context, _, _ string, cfg engine.QueueConfig) error {
					*got = append(*got, cfg.Paused)
					return nil
				}
			}, status: 204, args: []any{false}},
		{name: "pause failure", req: request{method: "PUT", target: "/api/ns/q/pause", header: tok(goodToken)},
			status: 500, resp: `{"error":"internal error"}`},

		// Peek with the Kairos fields.
		{name: "peek job with the header", req: request{method: "GET", target: "/api/ns/q/job/" + id, header: extHdr},
			setup: func(x *fakeEngine, _ *[]any) {
				x.peekJob = func(context.Context, string, string, string) (*engine.Job, error) { return deadJob, nil }
			}, status: 200, resp: `{"attempts":[],` + deadJSON[1:]},
		{name: "peek in-flight job with the header", req: request{method: "GET", target: "/api/ns/q/job/" + id, header: extHdr},
			setup: func(x *fakeEngine, _ *[]any) {
				x.peekJob = func(context.Context, string, string, string) (*engine.Job, error) { return flying, nil }
			}, status: 200, resp: `{"attempts":[],` + flyingJSON[1:]},
		{name: "peek job without the header is lmstfy's", req: request{method: "GET", target: "/api/ns/q/job/" + id, header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.peekJob = func(context.Context, string, string, string) (*engine.Job, error) { return flying, nil }
			}, status: 200,
			resp: `{"attributes":null,"data":"aGk=","elapsed_ms":1500,"job_id":"` + id + `","namespace":"ns","queue":"q","remain_tries":1,"ttl":10}`},
		{name: "peek queue with the header", req: request{method: "GET", target: "/api/ns/q/peek", header: extHdr},
			setup: func(x *fakeEngine, _ *[]any) {
				x.peekQueue = func(context.Context, string, string) (*engine.Job, error) { return flying, nil }
			}, status: 200, resp: flyingJSON},

		// Dead letter browsing.
		{name: "list dead letter, full page", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?offset=2&limit=1", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.listDead = func(_ context.Context, ns, q string, off, lim int64) ([]*engine.Job, error) {
					*got = append(*got, ns, q, off, lim)
					return []*engine.Job{deadJob}, nil
				}
				x.deadLetterSize = func(context.Context, string, string) (int64, error) { return 5, nil }
			}, status: 200, resp: `{"jobs":[` + deadJSON + `],"next_offset":3}`, args: []any{"ns", "q", int64(2), int64(1)}},
		{name: "list dead letter, last page", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.listDead = func(_ context.Context, _, _ string, off, lim int64) ([]*engine.Job, error) {
					*got = append(*got, off, lim)
					return []*engine.Job{deadJob, deadJob}, nil
				}
				x.deadLetterSize = func(context.Context, string, string) (int64, error) { return 2, nil }
			}, status: 200, resp: `{"jobs":[` + deadJSON + `,` + deadJSON + `],"next_offset":-1}`, args: []any{int64(0), int64(20)}},
		{name: "list dead letter, short page with more behind (stale entries skipped)", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?limit=2", header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.listDead = func(context.Context, string, string, int64, int64) ([]*engine.Job, error) {
					return []*engine.Job{deadJob}, nil
				}
				x.deadLetterSize = func(context.Context, string, string) (int64, error) { return 3, nil }
			}, status: 200, resp: `{"jobs":[` + deadJSON + `],"next_offset":2}`},
		{name: "list empty dead letter", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs", header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.listDead = func(context.Context, string, string, int64, int64) ([]*engine.Job, error) { return nil, nil }
				x.deadLetterSize = func(context.Context, string, string) (int64, error) { return 0, nil }
			}, status: 200, resp: `{"jobs":[],"next_offset":-1}`},
		{name: "list dead letter newest first, with the total", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?order=newest&offset=3&limit=2", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.listDeadPage = func(_ context.Context, ns, q string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
					*got = append(*got, ns, q, dq)
					return engine.DeadLetterPage{Jobs: []*engine.Job{deadJob}, Next: 5, Size: 254}, nil
				}
			}, status: 200, resp: `{"jobs":[` + deadJSON + `],"next_offset":5,"total":254}`,
			args: []any{"ns", "q", engine.DeadLetterQuery{Offset: 3, Limit: 2, Newest: true}}},
		{name: "list dead letter of one reason, oldest first", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?reason=ttr_expired&order=oldest", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.listDeadPage = func(_ context.Context, _, _ string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
					*got = append(*got, dq)
					return engine.DeadLetterPage{Next: -1}, nil
				}
			}, status: 200, resp: `{"jobs":[],"next_offset":-1,"total":0}`,
			args: []any{engine.DeadLetterQuery{Limit: 20, Reason: engine.ReasonTTRExpired}}},
		{name: "list dead letter, unknown order", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?order=desc", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid order: oldest or newest"}`},
		{name: "list dead letter, unknown reason", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?reason=bored", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid reason: nacked, ttr_expired or webhook_failed"}`},
		{name: "list dead letter, empty reason", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?reason=", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid reason: nacked, ttr_expired or webhook_failed"}`},
		{name: "list limit 0", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?limit=0", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{name: "list limit 101", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?limit=101", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{name: "list bad offset", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?offset=-1", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid offset"}`},
		{name: "list huge offset", req: request{method: "GET", target: "/api/ns/q/deadletter/jobs?offset=9223372036854775807", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid offset"}`},
		{name: "respawn one", req: request{method: "PUT", target: "/api/ns/q/deadletter/job/J?ttl=60", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.respawnOne = func(_ context.Context, ns, q, id string, ttl time.Duration) error {
					*got = append(*got, ns, q, id, ttl)
					return nil
				}
			}, status: 204, args: []any{"ns", "q", "J", time.Minute}},
		{name: "respawn one, default ttl", req: request{method: "PUT", target: "/api/ns/q/deadletter/job/J", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.respawnOne = func(_ context.Context, _, _, _ string, ttl time.Duration) error { *got = append(*got, ttl); return nil }
			}, status: 204, args: []any{86400 * time.Second}},
		{name: "respawn one not dead", req: request{method: "PUT", target: "/api/ns/q/deadletter/job/J", header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.respawnOne = func(context.Context, string, string, string, time.Duration) error { return missing }
			},
			status: 404, resp: `{"error":"job not found"}`},
		{name: "respawn one bad ttl", req: request{method: "PUT", target: "/api/ns/q/deadletter/job/J?ttl=-1", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid ttl"}`},
		{name: "delete one", req: request{method: "DELETE", target: "/api/ns/q/deadletter/job/J", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.deleteOne = func(_ context.Context, ns, q, id string) error { *got = append(*got, ns, q, id); return nil }
			}, status: 204, args: []any{"ns", "q", "J"}},
		{name: "delete one not dead", req: request{method: "DELETE", target: "/api/ns/q/deadletter/job/J", header: tok(goodToken)},
			setup: func(x *fakeEngine, _ *[]any) {
				x.deleteOne = func(context.Context, string, string, string) error { return missing }
			},
			status: 404, resp: `{"error":"job not found"}`},
		{name: "respawn all", req: request{method: "PUT", target: "/api/ns/q/deadletter?limit=all&ttl=10", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.respawn = func(_ context.Context, _, _ string, limit int64, ttl time.Duration) (int64, error) {
					*got = append(*got, limit, ttl)
					return 7, nil
				}
			}, status: 200, resp: `{"count":7,"msg":"respawned"}`, args: []any{int64(1<<63 - 1), 10 * time.Second}},
		{name: "delete all", req: request{method: "DELETE", target: "/api/ns/q/deadletter?limit=all", header: tok(goodToken)},
			setup: func(x *fakeEngine, got *[]any) {
				x.deleteDead = func(_ context.Context, _, _ string, limit int64) (int64, error) {
					*got = append(*got, limit)
					return 7, nil
				}
			}, status: 204, args: []any{int64(1<<63 - 1)}},
		{name: "limit ALL is not all", req: request{method: "DELETE", target: "/api/ns/q/deadletter?limit=ALL", header: tok(goodToken)},
			status: 400, resp: `{"error":"invalid limit"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, x := newExtEnv(t)
			var got []any
			if tc.setup != nil {
				tc.setup(x, &got)
			}
			w := env.api(t, tc.req)
			expect(t, w, tc.status, tc.resp)
			if tc.args != nil && !reflect.DeepEqual(got, tc.args) {
				t.Fatalf("engine got %#v\nwant %#v", got, tc.args)
			}
			if tc.setup == nil && tc.status < 500 && len(x.Calls()) != 0 {
				t.Fatalf("engine called: %v", x.Calls())
			}
		})
	}
}

// TestExtScopes: the new routes take the documented roles.
func TestExtScopes(t *testing.T) {
	env, x := newExtEnv(t)
	x.release = func(context.Context, *engine.ReleaseRequest) error { return nil }
	x.touch = func(context.Context, string, string, string, string, time.Duration) (time.Time, error) {
		return time.UnixMilli(1), nil
	}
	x.ack = func(context.Context, string, string, string, string) error { return nil }
	x.listDead = func(context.Context, string, string, int64, int64) ([]*engine.Job, error) { return nil, nil }
	x.deadLetterSize = func(context.Context, string, string) (int64, error) { return 0, nil }
	scoped := tok(scopedToken) // may consume and read q and q2
	for _, tc := range []struct {
		method, target string
		status         int
		resp           string
	}{
		{"PUT", "/api/ns/q/job/J/release?receipt=" + testReceipt, 204, ""},
		{"PUT", "/api/ns/q/job/J/touch?receipt=" + testReceipt, 200, `{"due_at_ms":1,"job_id":"J"}`},
		{"DELETE", "/api/ns/q/job/J?receipt=" + testReceipt, 204, ""},
		{"GET", "/api/ns/q/deadletter/jobs", 200, `{"jobs":[],"next_offset":-1}`},
		{"PUT", "/api/ns/q3/job/J/release?receipt=" + testReceipt, 403, `{"error":"token is not allowed to consume queue q3"}`},
		{"DELETE", "/api/ns/q/job_key/k", 403, `{"error":"token is not allowed to publish queue q"}`},
		{"PUT", "/api/ns/q/pause", 403, `{"error":"token is not allowed to manage queue q"}`},
		{"PUT", "/api/ns/q/resume", 403, `{"error":"token is not allowed to manage queue q"}`},
		{"PUT", "/api/ns/q/deadletter/job/J", 403, `{"error":"token is not allowed to manage queue q"}`},
		{"DELETE", "/api/ns/q/deadletter/job/J", 403, `{"error":"token is not allowed to manage queue q"}`},
		{"PUT", "/api/ns/q/job/J/release", 401, `{"error":"token not found"}`},
	} {
		hdr := scoped
		if tc.status == 401 {
			hdr = nil
		}
		w := env.api(t, request{method: tc.method, target: tc.target, header: hdr})
		expect(t, w, tc.status, tc.resp)
	}
	// Release, touch and cancel are not throttled.
	env.throttler.budget[goodToken] = 0
	w := env.api(t, request{method: "PUT", target: "/api/ns/q/job/J/release?receipt=" + testReceipt, header: tok(goodToken)})
	expect(t, w, 204, "")
}

// fakeWebhooks is a Webhooks store in memory that validates like the real
// one.
type fakeWebhooks struct {
	mu   sync.Mutex
	subs map[string]webhook.Subscription
}

func (f *fakeWebhooks) Put(_ context.Context, s webhook.Subscription) (webhook.Subscription, error) {
	if err := s.Normalize(); err != nil {
		return s, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s.Pool+"/"+s.Namespace+"/"+s.Queue] = s
	return s, nil
}

func (f *fakeWebhooks) Get(_ context.Context, pool, ns, q string) (webhook.Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.subs[pool+"/"+ns+"/"+q]
	if !ok {
		return s, webhook.ErrNotFound
	}
	return s, nil
}

func (f *fakeWebhooks) Delete(_ context.Context, pool, ns, q string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[pool+"/"+ns+"/"+q]; !ok {
		return webhook.ErrNotFound
	}
	delete(f.subs, pool+"/"+ns+"/"+q)
	return nil
}

func (f *fakeWebhooks) List(context.Context) ([]webhook.Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []webhook.Subscription
	for _, s := range f.subs {
		out = append(out, s)
	}
	return out, nil
}

// TestExtAdmin covers the queue settings and webhook admin routes.
func TestExtAdmin(t *testing.T) {
	hooks := &fakeWebhooks{subs: map[string]webhook.Subscription{}}
	env, x := newExtEnv(t, func(_ *config.Config, d *Deps) { d.Webhooks = hooks })
	var stored engine.QueueConfig
	x.queueConfig = func(context.Context, string, string) (engine.QueueConfig, error) { return stored, nil }
	x.setQueueConfig = func(_ context.Context, _, _ string, cfg engine.QueueConfig) error { stored = cfg; return nil }
	const hook = `{"concurrency":4,"namespace":"ns","pool":"default","queue":"q","secret":"REDACTED","timeout_ms":10000,"ttr_ms":30000,"url":"https://example.com/hook"}`
	steps := []struct {
		name   string
		req    request
		status int
		resp   string
	}{
		{"config of a new queue", request{method: "GET", target: "/queue/ns/q/config"}, 200, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`},
		{"set a ladder", request{method: "PUT", target: "/queue/ns/q/config", body: `{"backoff":"10s,30s,1m","dead_ttl_ms":3600000}`}, 200,
			`{"backoff":"10s,30s,1m","dead_ttl_ms":3600000,"paused":false,"shards":1}`},
		{"pause keeps the rest", request{method: "PUT", target: "/queue/ns/q/config?pool=default", body: `{"paused":true}`}, 200,
			`{"backoff":"10s,30s,1m","dead_ttl_ms":3600000,"paused":true,"shards":1}`},
		{"exponential", request{method: "PUT", target: "/queue/ns/q/config", body: `{"backoff":"exponential:1s,factor=3,max=1m,jitter=0.2"}`}, 200,
			`{"backoff":"exponential:1s,factor=3,max=1m,jitter=0.2","dead_ttl_ms":3600000,"paused":true,"shards":1}`},
		{"ladder read back as written", request{method: "PUT", target: "/queue/ns/q/config", body: `{"backoff":"1m,90m,1h,2h30m,1h0m5s"}`}, 200,
			`{"backoff":"1m,1h30m,1h,2h30m,1h5s","dead_ttl_ms":3600000,"paused":true,"shards":1}`},
		{"none clears", request{method: "PUT", target: "/queue/ns/q/config", body: `{"backoff":"none","dead_ttl_ms":0,"paused":false}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`},
		{"shards", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":4}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4}`},
		{"shards kept", request{method: "PUT", target: "/queue/ns/q/config", body: `{"paused":false}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4}`},
		{"shards 0 is 1", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":0}`}, 200,
			`{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`},
		{"shards 65", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":65}`}, 400, `{"error":"invalid shards: an integer 1..64 (0 means 1)"}`},
		{"shards -1", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":-1}`}, 400, `{"error":"invalid shards: an integer 1..64 (0 means 1)"}`},
		{"shards not an integer", request{method: "PUT", target: "/queue/ns/q/config", body: `{"shards":2.5}`}, 400,
			`{"error":"invalid queue config: the body should be a JSON object {\"backoff\":string,\"dead_ttl_ms\":int,\"paused\":bool,\"shards\":int,\"max_in_flight\":int,\"group_max_in_flight\":int,\"group_weights\":{string:int}}"}`},
		{"bad backoff", request{method: "PUT", target: "/queue/ns/q/config", body: `{"backoff":"fixed:soon"}`}, 400,
			`{"error":"invalid backoff \"fixed:soon\": fixed needs a duration such as fixed:30s"}`},
		{"negative dead ttl", request{method: "PUT", target: "/queue/ns/q/config", body: `{"dead_ttl_ms":-1}`}, 400, `{"error":"invalid dead_ttl_ms"}`},
		{"unknown field", request{method: "PUT", target: "/queue/ns/q/config", body: `{"pause":true}`}, 400,
			`{"error":"invalid queue config: the body should be a JSON object {\"backoff\":string,\"dead_ttl_ms\":int,\"paused\":bool,\"shards\":int,\"max_in_flight\":int,\"group_max_in_flight\":int,\"group_weights\":{string:int}}"}`},
		{"not JSON", request{method: "PUT", target: "/queue/ns/q/config", body: `paused`}, 400,
			`{"error":"invalid queue config: the body should be a JSON object {\"backoff\":string,\"dead_ttl_ms\":int,\"paused\":bool,\"shards\":int,\"max_in_flight\":int,\"group_max_in_flight\":int,\"group_weights\":{string:int}}"}`},
		{"two objects", request{method: "PUT", target: "/queue/ns/q/config", body: `{}{}`}, 400,
			`{"error":"invalid queue config: the body should be a JSON object {\"backoff\":string,\"dead_ttl_ms\":int,\"paused\":bool,\"shards\":int,\"max_in_flight\":int,\"group_max_in_flight\":int,\"group_weights\":{string:int}}"}`},
		{"body too large", request{method: "PUT", target: "/queue/ns/q/config", body: `{"backoff":"` + strings.Repeat("1s,", 30000) + `"}`}, 413, `{"error":"body too large"}`},
		{"unknown pool", request{method: "GET", target: "/queue/ns/q/config?pool=nope"}, 400, `{"error":"the pool was not exists"}`},
		{"bad queue name", request{method: "GET", target: "/queue/ns/_q/config"}, 400, `{"error":"queue name contains forbidden characters"}`},

		{"no webhook", request{method: "GET", target: "/webhook/ns/q"}, 404, `{"error":"webhook not found"}`},
		{"no webhooks", request{method: "GET", target: "/webhooks"}, 200, `[]`},
		{"set a webhook", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"https://example.com/hook","secret":"s3cret","concurrency":4}`}, 200, hook},
		{"get it", request{method: "GET", target: "/webhook/ns/q?pool=default"}, 200, hook},
		{"list it", request{method: "GET", target: "/webhooks"}, 200, "[" + hook + "]"},
		{"invalid webhook", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"ftp://x","secret":"s"}`}, 400,
			`{"error":"invalid webhook: url must be an absolute http or https URL without credentials"}`},
		{"timeout not under ttr", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","ttr_ms":1000,"timeout_ms":1000}`}, 400,
			`{"error":"invalid webhook: timeout_ms must be at least 1 and shorter than ttr_ms"}`},
		{"concurrency 65", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","concurrency":65}`}, 400,
			`{"error":"invalid webhook: concurrency must be 1..64"}`},
		// An explicit 0 is out of range (leaving the key out gives the default).
		{"concurrency 0", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","concurrency":0}`}, 400,
			`{"error":"invalid webhook: concurrency must be 1..64"}`},
		{"ttr_ms 0", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","ttr_ms":0}`}, 400,
			`{"error":"invalid webhook: ttr_ms must be 2..86400000"}`},
		{"ttr_ms over 24 h", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","ttr_ms":86400001}`}, 400,
			`{"error":"invalid webhook: ttr_ms must be 2..86400000"}`},
		{"timeout_ms 0", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","timeout_ms":0}`}, 400,
			`{"error":"invalid webhook: timeout_ms must be at least 1 and shorter than ttr_ms"}`},
		{"null is absent", request{method: "PUT", target: "/webhook/ns/q2", body: `{"url":"https://example.com/hook","secret":"s3cret","concurrency":null,"ttr_ms":null,"timeout_ms":null}`}, 200,
			`{"concurrency":1,"namespace":"ns","pool":"default","queue":"q2","secret":"REDACTED","timeout_ms":10000,"ttr_ms":30000,"url":"https://example.com/hook"}`},
		{"ttr_ms 1 leaves no room for a timeout", request{method: "PUT", target: "/webhook/ns/q2", body: `{"url":"https://example.com/hook","secret":"s3cret","ttr_ms":1}`}, 400,
			`{"error":"invalid webhook: ttr_ms must be 2..86400000"}`},
		{"ttr_ms 2", request{method: "PUT", target: "/webhook/ns/q2", body: `{"url":"https://example.com/hook","secret":"s3cret","ttr_ms":2}`}, 200,
			`{"concurrency":1,"namespace":"ns","pool":"default","queue":"q2","secret":"REDACTED","timeout_ms":1,"ttr_ms":2,"url":"https://example.com/hook"}`},
		{"unknown webhook field", request{method: "PUT", target: "/webhook/ns/q", body: `{"url":"http://x","secret":"s","retries":3}`}, 400,
			`{"error":"invalid webhook: the body should be a JSON object {\"url\":string,\"secret\":string,\"concurrency\":int,\"ttr_ms\":int,\"timeout_ms\":int}"}`},
		{"delete it", request{method: "DELETE", target: "/webhook/ns/q"}, 204, ""},
		{"delete it again", request{method: "DELETE", target: "/webhook/ns/q"}, 404, `{"error":"webhook not found"}`},
	}
	for _, st := range steps {
		w := env.admin(t, st.req)
		if w.Code != st.status || w.Body.String() != st.resp {
			t.Errorf("%s: got %d %s, want %d %s", st.name, w.Code, w.Body.String(), st.status, st.resp)
		}
	}

	t.Run("webhooks disabled", func(t *testing.T) {
		env, _ := newExtEnv(t)
		for _, r := range []request{{method: "GET", target: "/webhooks"}, {method: "GET", target: "/webhook/ns/q"},
			{method: "PUT", target: "/webhook/ns/q", body: "{}"}, {method: "DELETE", target: "/webhook/ns/q"}} {
			expect(t, env.admin(t, r), 501, `{"error":"webhooks are not enabled on this server"}`)
		}
	})
	t.Run("basic auth", func(t *testing.T) {
		env, x := newExtEnv(t, withConfig(func(c *config.Config) { c.Accounts = map[string]string{"admin": "pw"} }),
			func(_ *config.Config, d *Deps) { d.Webhooks = hooks })
		x.queueConfig = func(context.Context, string, string) (engine.QueueConfig, error) { return engine.QueueConfig{}, nil }
		for _, r := range []request{{method: "GET", target: "/webhooks"}, {method: "GET", target: "/webhook/ns/q"},
			{method: "PUT", target: "/webhook/ns/q", body: "{}"}, {method: "DELETE", target: "/webhook/ns/q"},
			{method: "GET", target: "/queue/ns/q/config"}, {method: "PUT", target: "/queue/ns/q/config", body: "{}"}} {
			if w := env.admin(t, r); w.Code != 401 {
				t.Errorf("%s %s without credentials: %d", r.method, r.target, w.Code)
			}
		}
		r := request{method: "GET", target: "/queue/ns/q/config", header: map[string]string{"Authorization": "Basic YWRtaW46cHc="}}
		expect(t, env.admin(t, r), 200, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`)
	})
}
