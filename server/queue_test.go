package server

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestQueueRoutes covers peek, peek job, ACK, size, destroy and the dead
// letter routes: status codes, exact bodies and engine arguments.
func TestQueueRoutes(t *testing.T) {
	env0 := newEnv(t)
	id := testJobID(env0)
	peeked := `{"attributes":null,"data":"aGk=","elapsed_ms":1500,"job_id":"` + id +
		`","namespace":"ns","queue":"q","remain_tries":3,"ttl":10}`
	liveJob := &engine.Job{Namespace: "ns", Queue: "q", ID: id, Body: []byte("hi"), TTL: 10 * time.Second, Tries: 3}

	tests := []struct {
		name   string
		req    request
		setup  func(e *fakeEngine, got *[]any)
		status int
		resp   string
		args   []any // arguments the engine got
	}{
		{
			name: "peek queue", req: request{method: "GET", target: "/api/ns/q/peek", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekQueue = func(_ context.Context, ns, q string) (*engine.Job, error) {
					*got = append(*got, ns, q)
					return liveJob, nil
				}
			},
			status: 200, resp: peeked, args: []any{"ns", "q"},
		},
		{
			name: "peek empty queue", req: request{method: "GET", target: "/api/ns/q/peek", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekQueue = func(context.Context, string, string) (*engine.Job, error) {
					return nil, fmt.Errorf("peek: %w", engine.ErrQueueEmpty)
				}
			},
			status: 404, resp: `{"error":"the queue is empty"}`,
		},
		{
			name: "peek queue failure", req: request{method: "GET", target: "/api/ns/q/peek", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekQueue = func(context.Context, string, string) (*engine.Job, error) { return nil, errUnexpected }
			},
			status: 500, resp: `{"error":"internal error"}`,
		},
		{
			name: "peek job", req: request{method: "GET", target: "/api/ns/q/job/" + id, header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekJob = func(_ context.Context, ns, q, jid string) (*engine.Job, error) {
					*got = append(*got, ns, q, jid)
					return liveJob, nil
				}
			},
			status: 200, resp: peeked, args: []any{"ns", "q", id},
		},
		{
			name: "peek missing job", req: request{method: "GET", target: "/api/ns/q/job/nope", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekJob = func(context.Context, string, string, string) (*engine.Job, error) {
					return nil, fmt.Errorf("peek: %w", engine.ErrJobNotFound)
				}
			},
			status: 404, resp: `{"error":"job not found"}`,
		},
		{
			name: "peek job failure is a 500, not a panic", req: request{method: "GET", target: "/api/ns/q/job/x", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekJob = func(context.Context, string, string, string) (*engine.Job, error) { return nil, errUnexpected }
			},
			status: 500, resp: `{"error":"internal error"}`,
		},
		{
			name: "ack", req: request{method: "DELETE", target: "/api/ns/q/job/" + id, header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.del = func(_ context.Context, ns, q, jid string) error {
					*got = append(*got, ns, q, jid)
					return nil
				}
			},
			status: 204, args: []any{"ns", "q", id},
		},
		{
			name: "ack failure", req: request{method: "DELETE", target: "/api/ns/q/job/x", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.del = func(context.Context, string, string, string) error { return errUnexpected }
			},
			status: 500, resp: `{"error":"internal error"}`,
		},
		{
			name: "size without token", req: request{method: "GET", target: "/api/ns/q/size"},
			setup: func(e *fakeEngine, got *[]any) {
				e.size = func(_ context.Context, ns, q string) (int64, error) {
					*got = append(*got, ns, q)
					return 7, nil
				}
			},
			status: 200, resp: `{"namespace":"ns","queue":"q","size":7}`, args: []any{"ns", "q"},
		},
		{
			name: "size with an invalid token", req: request{method: "GET", target: "/api/ns/q/size", header: tok("bogus")},
			setup: func(e *fakeEngine, got *[]any) {
				e.size = func(context.Context, string, string) (int64, error) { return 0, nil }
			},
			status: 200, resp: `{"namespace":"ns","queue":"q","size":0}`,
		},
		{
			name: "destroy", req: request{method: "DELETE", target: "/api/ns/q", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.destroy = func(_ context.Context, ns, q string) (int64, error) {
					*got = append(*got, ns, q)
					return 3, nil
				}
			},
			status: 204, args: []any{"ns", "q"},
		},
		{
			name: "destroy failure", req: request{method: "DELETE", target: "/api/ns/q", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.destroy = func(context.Context, string, string) (int64, error) { return 0, errUnexpected }
			},
			status: 500, resp: `{"error":"internal error"}`,
		},
		{
			name: "peek dead letter", req: request{method: "GET", target: "/api/ns/q/deadletter", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekDeadLetter = func(_ context.Context, ns, q string) (engine.DeadLetter, error) {
					*got = append(*got, ns, q)
					return engine.DeadLetter{Size: 2, Head: id}, nil
				}
			},
			status: 200, resp: `{"deadletter_head":"` + id + `","deadletter_size":2,"namespace":"ns","queue":"q"}`, args: []any{"ns", "q"},
		},
		{
			name: "peek empty dead letter", req: request{method: "GET", target: "/api/ns/q/deadletter", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.peekDeadLetter = func(context.Context, string, string) (engine.DeadLetter, error) { return engine.DeadLetter{}, nil }
			},
			status: 200, resp: `{"deadletter_head":"","deadletter_size":0,"namespace":"ns","queue":"q"}`,
		},
		{
			name: "respawn defaults", req: request{method: "PUT", target: "/api/ns/q/deadletter", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.respawn = func(_ context.Context, ns, q string, limit int64, ttl time.Duration) (int64, error) {
					*got = append(*got, ns, q, limit, ttl)
					return 1, nil
				}
			},
			status: 200, resp: `{"count":1,"msg":"respawned"}`, args: []any{"ns", "q", int64(1), 86400 * time.Second},
		},
		{
			name: "respawn limit and ttl 0", req: request{method: "PUT", target: "/api/ns/q/deadletter?limit=50&ttl=0", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.respawn = func(_ context.Context, ns, q string, limit int64, ttl time.Duration) (int64, error) {
					*got = append(*got, ns, q, limit, ttl)
					return 2, nil
				}
			},
			status: 200, resp: `{"count":2,"msg":"respawned"}`, args: []any{"ns", "q", int64(50), time.Duration(0)},
		},
		{name: "respawn limit 0", req: request{method: "PUT", target: "/api/ns/q/deadletter?limit=0", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{name: "respawn negative limit", req: request{method: "PUT", target: "/api/ns/q/deadletter?limit=-3", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{name: "respawn limit overflow", req: request{method: "PUT", target: "/api/ns/q/deadletter?limit=9223372036854775808", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{name: "respawn negative ttl", req: request{method: "PUT", target: "/api/ns/q/deadletter?ttl=-1", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid ttl"}`},
		{name: "respawn ttl beyond a Duration", req: request{method: "PUT", target: "/api/ns/q/deadletter?ttl=9223372036854775807", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid ttl"}`},
		{name: "respawn limit checked first", req: request{method: "PUT", target: "/api/ns/q/deadletter?limit=x&ttl=x", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{
			name: "respawn failure", req: request{method: "PUT", target: "/api/ns/q/deadletter", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.respawn = func(context.Context, string, string, int64, time.Duration) (int64, error) { return 0, errUnexpected }
			},
			status: 500, resp: `{"error":"internal error"}`,
		},
		{
			name: "delete dead letter", req: request{method: "DELETE", target: "/api/ns/q/deadletter?limit=2", header: tok(goodToken)},
			setup: func(e *fakeEngine, got *[]any) {
				e.deleteDead = func(_ context.Context, ns, q string, limit int64) (int64, error) {
					*got = append(*got, ns, q, limit)
					return 2, nil
				}
			},
			status: 204, args: []any{"ns", "q", int64(2)},
		},
		{name: "delete dead letter bad limit", req: request{method: "DELETE", target: "/api/ns/q/deadletter?limit=", header: tok(goodToken)}, status: 400, resp: `{"error":"invalid limit"}`},
		{
			name: "dead letter size without token", req: request{method: "GET", target: "/api/ns/q/deadletter/size"},
			setup: func(e *fakeEngine, got *[]any) {
				e.deadLetterSize = func(_ context.Context, ns, q string) (int64, error) {
					*got = append(*got, ns, q)
					return 4, nil
				}
			},
			status: 200, resp: `{"namespace":"ns","queue":"q","size":4}`, args: []any{"ns", "q"},
		},
		{
			name: "dead letter size failure", req: request{method: "GET", target: "/api/ns/q/deadletter/size"},
			setup: func(e *fakeEngine, got *[]any) {
				e.deadLetterSize = func(context.Context, string, string) (int64, error) { return 0, errUnexpected }
			},
			status: 500, resp: `{"error":"internal error"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got []any
			if tc.setup != nil {
				tc.setup(env.eng, &got)
			}
			w := env.api(t, tc.req)
			expect(t, w, tc.status, tc.resp)
			if tc.setup == nil {
				if calls := env.eng.Calls(); len(calls) != 0 {
					t.Errorf("engine called: %v", calls)
				}
			}
			if tc.args != nil && !reflect.DeepEqual(got, tc.args) {
				t.Errorf("engine args %v, want %v", got, tc.args)
			}
		})
	}
}

// TestSizePoolFromToken checks that the public size routes still pick the
// pool from a token prefix.
func TestSizePoolFromToken(t *testing.T) {
	env := newEnv(t)
	env.engB.size = func(context.Context, string, string) (int64, error) { return 9, nil }
	w := env.api(t, request{method: "GET", target: "/api/ns/q/size", header: tok("b:whatever")})
	expect(t, w, 200, `{"namespace":"ns","queue":"q","size":9}`)
	w = env.api(t, request{method: "GET", target: "/api/ns/q/size?token=nopool:x"})
	expect(t, w, 404, `{"error":"pool not found"}`)
	if calls := env.eng.Calls(); len(calls) != 0 {
		t.Errorf("default engine called: %v", calls)
	}
}
