package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/redisretry"
)

// TestUnavailableErrors: the one classification of outages. Every error
// that means Redis cannot serve for now maps to 503 + Retry-After with a
// message that names no Redis internals, on the public and admin APIs;
// other errors keep their mapping.
func TestUnavailableErrors(t *testing.T) {
	ctx := context.Background()
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want *apiError
	}{
		{"refused", ctx, fmt.Errorf("publish: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), errUnavailable},
		{"reset", ctx, fmt.Errorf("consume: %w", syscall.ECONNRESET), errUnavailable},
		{"other", ctx, fmt.Errorf("size: %w", errors.New("x")), errInternal},
		{"eof", ctx, fmt.Errorf("size: %w", io.EOF), errUnavailable},
		// A connection lost after the command was sent (redisretry.Dialer):
		// it may have run, and the client decides.
		{"lost", ctx, fmt.Errorf("ack: %w", &redisretry.LostError{Op: "read", Err: io.EOF}), errUnavailable},
		{"lost timeout", ctx, fmt.Errorf("publish: %w", &redisretry.LostError{Op: "read", Err: os.ErrDeadlineExceeded}), errUnavailable},
		{"pool timeout", ctx, fmt.Errorf("ack: %w", redis.ErrPoolTimeout), errUnavailable},
		{"client closed", ctx, fmt.Errorf("ack: %w", redis.ErrClosed), errUnavailable},
		{"redis deadline", ctx, fmt.Errorf("ack: %w", context.DeadlineExceeded), errUnavailable},
		{"client gone", gone, fmt.Errorf("ack: %w", context.Canceled), errClientGone},
		{"engine sentinel", ctx, fmt.Errorf("peek: %w", engine.ErrUnavailable), errUnavailable},
		{"token store", ctx, fmt.Errorf("verify token: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), errUnavailable},
		{"throttler", ctx, fmt.Errorf("throttle: %w", throttlerError{redis.ErrPoolTimeout}), errUnavailable},
		{"throttler bug", ctx, fmt.Errorf("throttle: %w", throttlerError{errors.New("x")}), errThrottler},
		{"invalid token", ctx, auth.ErrInvalidToken, errInvalidToken},
		{"not replicated", ctx, fmt.Errorf("publish: %w", engine.ErrNotReplicated), errNotReplicated},
		// maxmemory reached under noeviction (what doc/config.md asks
		// for): a full Redis is no outage (TestFullErrors), not a 503.
		{"oom", ctx, fmt.Errorf("publish: %w", redisReply("OOM command not allowed when used memory > 'maxmemory'. script: 6644f33, on @user_script:38.")), errRedisFull},
		{"redis bug", ctx, fmt.Errorf("publish: %w", redisReply("ERR wrong number of arguments")), errInternal},
		// Redis Cluster: a cluster that lost a master, a slot being moved,
		// and redirects go-redis gave up following (its slot map is being
		// rebuilt) are outages; the node they name never reaches a client.
		{"cluster down", ctx, fmt.Errorf("publish: %w", redisReply("CLUSTERDOWN The cluster is down")), errUnavailable},
		{"try again", ctx, fmt.Errorf("consume: %w", redisReply("TRYAGAIN Multiple keys request during rehashing of slot")), errUnavailable},
		{"moved", ctx, fmt.Errorf("ack: %w", redisReply("MOVED 3999 127.0.0.1:7002")), errUnavailable},
		{"ask", ctx, fmt.Errorf("ack: %w", redisReply("ASK 3999 127.0.0.1:7002")), errUnavailable},
		{"moved from go-redis", ctx, fmt.Errorf("ack: %w", movedError(t)), errUnavailable},
		// Keys of several slots in one command is a bug, not an outage.
		{"cross slot", ctx, fmt.Errorf("publish: %w", redis.ErrCrossSlot), errInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mapAPIError(tc.ctx, tc.err); got != tc.want {
				t.Errorf("mapAPIError(%v) = %d %s, want %d %s", tc.err, got.status, got.body, tc.want.status, tc.want.body)
			}
			if !errors.As(tc.err, new(throttlerError)) && tc.want != errInvalidToken && tc.want != errNotReplicated {
				if got := mapAdminError(tc.ctx, tc.err); got != tc.want {
					t.Errorf("mapAdminError(%v) = %d %s, want %d %s", tc.err, got.status, got.body, tc.want.status, tc.want.body)
				}
			}
		})
	}
	if errUnavailable.status != 503 || errUnavailable.retryAfter <= 0 || strings.Contains(string(errUnavailable.body), "LOADING") {
		t.Errorf("errUnavailable = %+v", errUnavailable)
	}
}

// TestFullErrors: a write that the pool's Redis refused for memory
// (engine.ErrPoolFull) answers 507 naming the pool, without Retry-After,
// on both APIs; an OOM that no engine named (the admin Redis) says
// "redis is full". Neither is the 503 of an outage.
func TestFullErrors(t *testing.T) {
	ctx := context.Background()
	oom := redisReply("OOM command not allowed when used memory > 'maxmemory'.")
	pf := fmt.Errorf("publish: %w", &engine.PoolFullError{Pool: "blue", Err: oom})
	for _, m := range []func(context.Context, error) *apiError{mapAPIError, mapAdminError} {
		got := m(ctx, pf)
		if got.status != 507 || string(got.body) != `{"error":"pool blue is full"}` || got.retryAfter != 0 {
			t.Errorf("pool full: %d %s Retry-After %d", got.status, got.body, got.retryAfter)
		}
		if got := m(ctx, fmt.Errorf("token: %w", oom)); got != errRedisFull || got.status != 507 || string(got.body) != `{"error":"redis is full"}` {
			t.Errorf("raw OOM: %d %s", got.status, got.body)
		}
	}
}

// TestOutageRoutes: with a store that is unavailable, the token check, the
// throttler and the engine calls all answer 503 with Retry-After through
// gin, never 500 nor 401.
func TestOutageRoutes(t *testing.T) {
	down := fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	const body = `{"error":"redis is unavailable, retry later"}`
	t.Run("token store", func(t *testing.T) {
		env := newEnv(t)
		env.tokens.err = down
		w := env.api(t, request{method: "PUT", target: "/api/ns/q", body: "x", header: tok(goodToken)})
		expect(t, w, 503, body)
		if w.Header().Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", w.Header().Get("Retry-After"))
		}
	})
	t.Run("throttler", func(t *testing.T) {
		env := newEnv(t)
		okEngine(env.eng)
		env.throttler.err = down
		expect(t, env.api(t, request{method: "GET", target: "/api/ns/q", header: tok(goodToken)}), 503, body)
	})
	t.Run("engine", func(t *testing.T) {
		env := newEnv(t)
		env.eng.publish = func(context.Context, *engine.PublishRequest) (string, error) { return "", down }
		expect(t, env.api(t, request{method: "PUT", target: "/api/ns/q", body: "x", header: tok(goodToken)}), 503, body)
	})
	t.Run("not replicated", func(t *testing.T) {
		env := newEnv(t)
		env.eng.publish = func(context.Context, *engine.PublishRequest) (string, error) {
			return "01JX0000000000000000000000", fmt.Errorf("publish: %w", engine.ErrNotReplicated)
		}
		w := env.api(t, request{method: "PUT", target: "/api/ns/q", body: "x", header: tok(goodToken)})
		expect(t, w, 503, `{"error":"publish not replicated: the job may exist","job_id":"01JX0000000000000000000000"}`)
	})
}

// movedError is the error go-redis returns for a MOVED reply, from a
// fake Redis that answers every command so.
func movedError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write([]byte("-MOVED 3999 127.0.0.1:7002\r\n")); err != nil {
				return
			}
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), DisableIdentity: true, Protocol: 2, MaxRetries: -1})
	defer c.Close()
	err = c.Get(context.Background(), "k").Err()
	if _, ok := redis.IsMovedError(err); !ok {
		t.Fatalf("fake Redis: Get = %v, want a MOVED error", err)
	}
	return err
}

// redisReply is an error reply of Redis, as go-redis returns it.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}
