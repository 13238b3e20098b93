//go:build linux

package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
)

// servePlain serves env's server without event loops (net/http only) and
// returns its public address.
func servePlain(t *testing.T, opts ...envOption) string {
	t.Helper()
	opts = append([]envOption{withConfig(func(c *config.Config) { c.Kairos.EventLoops = -1 })}, opts...)
	env := newEnv(t, opts...)
	if err := env.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return env.srv.Addr()
}

// TestLoopTimeoutsAsNetHTTP: the loops close connections when net/http
// would, also for requests they hand over to it: ReadHeaderTimeout from
// the accept for a connection's first request (one that never sends a
// byte gets no IdleTimeout), from its first bytes for a later one, and not
// restarted when net/http takes the request over.
func TestLoopTimeoutsAsNetHTTP(t *testing.T) {
	timeouts := withConfig(func(c *config.Config) {
		c.Kairos.ReadHeaderTimeoutSecond, c.Kairos.ReadTimeoutSecond, c.Kairos.IdleTimeoutSecond = 2, 3, 5
	})
	_, _, loops := serveLoops(t, timeouts)
	plain := servePlain(t, timeouts)
	// Each case sends its steps (after a pause, some bytes) and expects
	// the server to close the connection about `closed` after the dial.
	type step struct {
		after time.Duration
		send  string
	}
	cases := []struct {
		name   string
		steps  []step
		closed time.Duration
	}{
		{"silent", nil, 2 * time.Second},
		{"slow head of a net/http request", []step{
			{0, "GET /api/ns/q"},
			{1200 * time.Millisecond, "/size HTTP/1.1\r\nHost: kairos\r\n"},
		}, 2 * time.Second},
		{"slow head after a fast request", []step{
			{0, fastPut("x")},
			{time.Second, "GET /api/ns/q"},
			{time.Second, "/size HTTP/1.1\r\nHost: kairos\r\n"},
		}, 3 * time.Second},
		{"idle after a fast request", []step{
			{0, fastPut("x")},
		}, 5 * time.Second},
	}
	for _, tc := range cases {
		for name, addr := range map[string]string{"loops": loops, "net/http": plain} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				conn := dialLoop(t, addr, 0)
				go func() {
					for _, s := range tc.steps {
						time.Sleep(s.after)
						if _, err := io.WriteString(conn, s.send); err != nil {
							return
						}
					}
				}()
				_ = conn.SetReadDeadline(start.Add(tc.closed + 3*time.Second))
				_, err := io.Copy(io.Discard, conn) // answers, then EOF
				d := time.Since(start)
				if err != nil {
					t.Fatalf("after %v: %v", d, err)
				}
				if d < tc.closed-100*time.Millisecond || d > tc.closed+700*time.Millisecond {
					t.Errorf("closed after %v, want %v", d, tc.closed)
				}
			})
		}
	}
}

// TestLoopHandedOverHalfClose: a connection the loop handed to net/http
// half-closes as net/http's own do: after a 413 for a body it will not
// read, the client reads the answer and then EOF, not a reset.
func TestLoopHandedOverHalfClose(t *testing.T) {
	_, _, addr := serveLoops(t)
	body := strings.Repeat("b", engine.MaxBodySize+1)
	for i := range 5 {
		conn := dialLoop(t, addr, 10*time.Second)
		go func() {
			_, _ = fmt.Fprintf(conn, "PUT /api/ns/q HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n%s", goodToken, len(body), body)
		}()
		br := bufio.NewReader(conn)
		a := readAnswers(t, br, 1)
		if a[0].status != 413 {
			t.Fatalf("try %d: %d %s, want 413", i, a[0].status, a[0].body)
		}
		_, err := io.Copy(io.Discard, br)
		if errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("try %d: reset after the 413, want EOF", i)
		}
		if err != nil {
			t.Fatalf("try %d: after the 413: %v", i, err)
		}
		conn.Close()
	}
}
