package server

import (
	"context"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

func TestConsume(t *testing.T) {
	env0 := newEnv(t)
	id := testJobID(env0)
	v1 := "1" + engine.NewJobID(env0.now.Add(-20*time.Millisecond), 0, false)
	job := func(q string) *engine.Job {
		return &engine.Job{Namespace: "ns", Queue: q, ID: id, Body: []byte("hello"), TTL: 3599600 * time.Millisecond, Tries: 2}
	}
	single := `{"attributes":null,"data":"aGVsbG8=","elapsed_ms":1500,"job_id":"` + id +
		`","msg":"new job","namespace":"ns","queue":"q","remain_tries":2,"ttl":3600}`
	tests := []struct {
		name   string
		target string
		jobs   []*engine.Job
		engErr error
		status int
		resp   string
		want   *engine.ConsumeRequest // nil: engine not called
	}{
		{
			name: "defaults", target: "/api/ns/q", jobs: []*engine.Job{job("q")}, status: 200, resp: single,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 1},
		},
		{
			name: "no job", target: "/api/ns/q?timeout=3&ttr=30", status: 404, resp: `{"msg":"no job available"}`,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 30 * time.Second, Timeout: 3 * time.Second, Count: 1},
		},
		{
			name: "timeout clamped to the cap", target: "/api/ns/q?timeout=4294967295", status: 404, resp: `{"msg":"no job available"}`,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Timeout: 600 * time.Second, Count: 1},
		},
		{
			name: "multi-queue priority order, empty items dropped", target: "/api/ns/q3,,q4,q5,", jobs: []*engine.Job{job("q4")}, status: 200,
			resp: strings.Replace(single, `"queue":"q"`, `"queue":"q4"`, 1),
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q3", "q4", "q5"}, TTR: 120 * time.Second, Count: 1},
		},
		{
			name: "count 2 answers an array even of one", target: "/api/ns/q?count=2", jobs: []*engine.Job{job("q")}, status: 200,
			resp: "[" + single + "]",
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 2},
		},
		{
			name: "count 100", target: "/api/ns/q?count=100", jobs: []*engine.Job{job("q"), job("q")}, status: 200,
			resp: "[" + single + "," + single + "]",
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 100},
		},
		{
			name: "count>1 and nothing", target: "/api/ns/q?count=5", status: 404, resp: `{"msg":"no job available"}`,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 5},
		},
		{
			name: "attributes, empty body, no expiry", target: "/api/ns/q?ttr=0",
			jobs:   []*engine.Job{{Namespace: "ns", Queue: "q", ID: v1, Attributes: map[string]string{"z": "1", "a": "<&>"}}},
			status: 200,
			resp: `{"attributes":{"a":"\u003c\u0026\u003e","z":"1"},"data":"","elapsed_ms":20,"job_id":"` + v1 +
				`","msg":"new job","namespace":"ns","queue":"q","remain_tries":0,"ttl":0}`,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1},
		},
		{
			name: "engine failure", target: "/api/ns/q", engErr: errUnexpected, status: 500, resp: `{"error":"internal error"}`,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 1},
		},
		{
			name: "jobs with an error are handed out", target: "/api/ns/q", jobs: []*engine.Job{job("q")}, engErr: errUnexpected, status: 200, resp: single,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 1},
		},
		{
			name: "engine closed answers no job", target: "/api/ns/q", engErr: engine.ErrClosed, status: 404, resp: `{"msg":"no job available"}`,
			want: &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: 120 * time.Second, Count: 1},
		},
		{name: "count 0", target: "/api/ns/q?count=0", status: 400, resp: `{"error":"invalid count"}`},
		{name: "count 101", target: "/api/ns/q?count=101", status: 400, resp: `{"error":"invalid count"}`},
		{name: "count negative", target: "/api/ns/q?count=-1", status: 400, resp: `{"error":"invalid count"}`},
		{name: "count huge", target: "/api/ns/q?count=99999999999999999999", status: 400, resp: `{"error":"invalid count"}`},
		{name: "ttr negative", target: "/api/ns/q?ttr=-1", status: 400, resp: `{"error":"invalid ttr"}`},
		{name: "ttr overflow", target: "/api/ns/q?ttr=4294967296", status: 400, resp: `{"error":"invalid ttr"}`},
		{name: "timeout invalid", target: "/api/ns/q?timeout=1s", status: 400, resp: `{"error":"invalid timeout"}`},
		{name: "ttr checked before timeout and count", target: "/api/ns/q?ttr=x&timeout=x&count=0", status: 400, resp: `{"error":"invalid ttr"}`},
		{name: "timeout checked before count", target: "/api/ns/q?timeout=x&count=0", status: 400, resp: `{"error":"invalid timeout"}`},
		{name: "only commas", target: "/api/ns/,,", status: 400, resp: `{"error":"invalid queue name(s)"}`},
		{name: "params checked before queue list", target: "/api/ns/,,?count=0", status: 400, resp: `{"error":"invalid count"}`},
		{name: "reserved queue name in list", target: "/api/ns/q,_q", status: 400, resp: `{"error":"invalid queue name(s)"}`},
		{name: "too long queue name in list", target: "/api/ns/q," + strings.Repeat("a", 256), status: 400, resp: `{"error":"invalid queue name(s)"}`},
		{name: "forbidden character", target: "/api/ns/q;q2", status: 400, resp: `{"error":"queue name contains forbidden characters"}`},
		{name: "forbidden namespace", target: "/api/n.s/q", status: 400, resp: `{"error":"namespace name contains forbidden characters"}`},
		{name: "namespace too long", target: "/api/" + strings.Repeat("n", 256) + "/q", status: 400, resp: `{"error":"namespace or queue name too long"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got *engine.ConsumeRequest
			env.eng.consume = func(_ context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
				got = req
				return tc.jobs, tc.engErr
			}
			w := env.api(t, request{method: "GET", target: tc.target, header: tok(goodToken)})
			expect(t, w, tc.status, tc.resp)
			if tc.want == nil {
				if calls := env.eng.Calls(); len(calls) != 0 {
					t.Errorf("engine called: %v", calls)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("consume request\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTTLSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want int64
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Millisecond, 1},
		{1499 * time.Millisecond, 1},
		{1500 * time.Millisecond, 2},
		{86400 * time.Second, 86400},
	}
	for _, tc := range tests {
		if got := ttlSeconds(tc.in); got != tc.want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestConsumeCancelledByClose checks that a waiting consume is answered
// 404 at once when the server shuts down.
func TestConsumeCancelledByClose(t *testing.T) {
	env := newEnv(t)
	waiting := make(chan struct{})
	env.eng.consume = func(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
		close(waiting)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(req.Timeout):
			t.Errorf("consume was not cancelled")
			return nil, nil
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := env.api(t, request{method: "GET", target: "/api/ns/q?timeout=30", header: tok(goodToken)})
		expect(t, w, 404, `{"msg":"no job available"}`)
	}()
	<-waiting
	start := time.Now()
	if err := env.srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	<-done
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("consume answered after %v", d)
	}
}

// TestConsumeCancelledByClient checks that the engine's wait is cancelled
// when the client goes away.
func TestConsumeCancelledByClient(t *testing.T) {
	env := newEnv(t)
	cancelled := make(chan struct{})
	env.eng.consume = func(ctx context.Context, _ *engine.ConsumeRequest) ([]*engine.Job, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := request{method: "GET", target: "/api/ns/q?timeout=30", header: tok(goodToken)}.build(t).WithContext(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		env.srv.Handler().ServeHTTP(httptest.NewRecorder(), r)
	}()
	cancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("engine wait not cancelled")
	}
	<-done
}
