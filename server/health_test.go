package server

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
)

// withReadyChecks gives the server /readyz checks.
func withReadyChecks(checks ...ReadyCheck) envOption {
	return func(_ *config.Config, d *Deps) { d.ReadyChecks = checks }
}

// TestHealthAndReadiness: /healthz and /readyz on both handlers, without a
// token; /readyz names each failed check in a short word (no error text, no
// address) and recovers once the check passes again.
func TestHealthAndReadiness(t *testing.T) {
	var mu sync.Mutex
	var poolErr error
	var calls atomic.Int32
	env := newEnv(t, withReadyChecks(
		ReadyCheck{Name: "pool default", Check: func(context.Context) error {
			calls.Add(1)
			mu.Lock()
			defer mu.Unlock()
			return poolErr
		}},
		ReadyCheck{Name: "admin redis", Check: func(context.Context) error { return nil }},
	))
	for _, tc := range []struct {
		err  error
		code int
		body string
	}{
		{nil, 200, `{"ready":true,"checks":{"admin redis":"ok","pool default":"ok"}}`},
		{&net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379}, Err: syscall.ECONNREFUSED},
			503, `{"ready":false,"checks":{"admin redis":"ok","pool default":"unreachable"}}`},
		{fmt.Errorf("pool default: %w", ErrLoading), 503, `{"ready":false,"checks":{"admin redis":"ok","pool default":"loading"}}`},
		{fmt.Errorf("pool default: role \"slave\": %w", ErrNotMaster), 503, `{"ready":false,"checks":{"admin redis":"ok","pool default":"not master"}}`},
		{fmt.Errorf("pool default: node 10.1.2.3:7000: cluster_state:fail: %w", ErrClusterDown), 503, `{"ready":false,"checks":{"admin redis":"ok","pool default":"cluster down"}}`},
		// A full Redis serves the drain: ready, and says it is full.
		{fmt.Errorf("pool default: used_memory 9000000 > maxmemory 8388608 under noeviction: %w", ErrFull), 200, `{"ready":true,"checks":{"admin redis":"ok","pool default":"full"}}`},
		// A pool in its memory reserve serves all but the heaviest
		// namespaces' publishes: ready, and says so.
		{fmt.Errorf("pool default: a node is in its memory reserve: %w", ErrReserve), 200, `{"ready":true,"checks":{"admin redis":"ok","pool default":"reserve"}}`},
		{nil, 200, `{"ready":true,"checks":{"admin redis":"ok","pool default":"ok"}}`},
	} {
		mu.Lock()
		poolErr = tc.err
		mu.Unlock()
		env.srv.readiness.mu.Lock()
		env.srv.readiness.at = time.Time{} // past the cache
		env.srv.readiness.mu.Unlock()
		for _, h := range []func(testing.TB, request) *httptest.ResponseRecorder{env.api, env.admin} {
			w := h(t, request{method: "GET", target: "/readyz"})
			expect(t, w, tc.code, tc.body)
			if tc.code == 503 && w.Header().Get("Retry-After") == "" {
				t.Errorf("%v: 503 without Retry-After", tc.err)
			}
			expect(t, h(t, request{method: "GET", target: "/healthz"}), 200, `{"status":"ok"}`)
		}
		// The dashboard's overview marks a full pool and a pool in its
		// reserve, from the same checks.
		ui := env.admin(t, request{method: "GET", target: "/ui/"}).Body.String()
		for _, mark := range []string{"full", "reserve"} {
			if want := strings.Contains(tc.body, `"pool default":"`+mark+`"`); strings.Contains(ui, "data-pool-"+mark) != want {
				t.Errorf("%v: dashboard marks the pool %s: %v, want %v", tc.err, mark, !want, want)
			}
		}
	}
	// Within readyCacheFor, probes share one result: a flood of probes on
	// the public port cannot flood Redis.
	before := calls.Load()
	for range 20 {
		env.api(t, request{method: "GET", target: "/readyz"})
	}
	if n := calls.Load() - before; n > 1 {
		t.Errorf("20 probes ran the check %d times, want at most 1", n)
	}
}
