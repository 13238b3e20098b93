package client_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// refuseFirst is a RoundTripper that fails the first n requests as a
// refused connection would, then passes requests to next.
type refuseFirst struct {
	n     int64
	calls atomic.Int64
	next  http.RoundTripper
}

func (r *refuseFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.calls.Add(1) <= r.n {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return r.next.RoundTrip(req)
}

func TestRetryRefusedConnection(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name    string
		refused int64
		retries int
		wantErr bool
	}{
		{"refused twice, 3 retries", 2, 3, false},
		{"refused 3 times, 3 retries", 3, 3, false},
		{"refused 4 times, 3 retries", 4, 3, true},
		{"refused once, no retries", 1, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := &refuseFirst{n: tc.refused, next: http.DefaultTransport}
			c := e.client(t, client.WithToken(e.Token), client.WithHTTPClient(&http.Client{Transport: rt}),
				client.WithRetry(tc.retries, time.Millisecond, 4*time.Millisecond))
			// A publish was never sent when the connection was refused:
			// retrying it cannot publish twice.
			_, err := c.Publish(ctx, "refused", []byte(tc.name))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Publish: %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("Publish: %v, want the refused connection", err)
			}
			wantCalls := min(tc.refused+1, int64(tc.retries)+1)
			if got := rt.calls.Load(); got != wantCalls {
				t.Fatalf("%d attempts, want %d", got, wantCalls)
			}
		})
	}
	if n, err := e.C.QueueSize(ctx, "refused"); err != nil || n != 2 {
		t.Fatalf("QueueSize: %d, %v; want exactly 2 jobs (no duplicate)", n, err)
	}
}

// flaky answers 500 to the first fails requests, then 200 with body (or
// drops the connection instead of answering 500 when drop is set).
func flaky(t *testing.T, fails int64, drop bool, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= fails {
			if drop {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			w.Header().Set("X-Request-ID", "01J00000000000000000000000")
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":"internal error"}`))
			return
		}
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPut:
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"job_id":"01J00000000000000000000001","msg":"published"}`))
		default:
			w.Write([]byte(body))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestRetryOnlyIdempotentAfterSending(t *testing.T) {
	ctx := ctxT(t)
	tests := []struct {
		name      string
		drop      bool
		call      func(c *client.Client) error
		wantCalls int64 // with 2 failures and 3 retries allowed
	}{
		{"QueueSize retried after 500", false, func(c *client.Client) error {
			_, err := c.QueueSize(ctx, "q")
			return err
		}, 3},
		{"PeekJob retried after a dropped connection", true, func(c *client.Client) error {
			_, err := c.PeekJob(ctx, "q", "id")
			return err
		}, 3},
		{"Ack retried after 500", false, func(c *client.Client) error { return c.Ack(ctx, "q", "id") }, 3},
		{"Publish not retried after 500", false, func(c *client.Client) error {
			_, err := c.Publish(ctx, "q", []byte("x"))
			return err
		}, 1},
		{"Publish not retried after a dropped connection", true, func(c *client.Client) error {
			_, err := c.Publish(ctx, "q", []byte("x"))
			return err
		}, 1},
		{"Consume not retried after 500", false, func(c *client.Client) error {
			_, err := c.Consume(ctx, "q", time.Second, 0)
			return err
		}, 1},
		{"DeleteDeadLetter not retried after 500", false, func(c *client.Client) error {
			return c.DeleteDeadLetter(ctx, "q", 1)
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, calls := flaky(t, 2, tc.drop, `{"namespace":"ns","queue":"q","size":7,"job_id":"id"}`)
			c, err := client.New(srv.URL, client.WithNamespace("ns"), client.WithToken("t"),
				client.WithRetry(3, time.Millisecond, 2*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(c)
			if got := calls.Load(); got != tc.wantCalls {
				t.Fatalf("%d requests, want %d (err %v)", got, tc.wantCalls, err)
			}
			if (err == nil) != (tc.wantCalls == 3) {
				t.Fatalf("error %v after %d requests", err, tc.wantCalls)
			}
			if err != nil && !tc.drop && !errors.Is(err, client.ErrServer) {
				t.Fatalf("error %v, want ErrServer", err)
			}
		})
	}
}

func TestRetryBackoffIsCappedAndStopsWithContext(t *testing.T) {
	srv, calls := flaky(t, 1000, false, "")
	c, err := client.New(srv.URL, client.WithNamespace("ns"),
		client.WithRetry(6, 10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.QueueSize(ctxT(t), "q")
	took := time.Since(start)
	if !errors.Is(err, client.ErrServer) || calls.Load() != 7 {
		t.Fatalf("QueueSize: %v after %d requests; want ErrServer after 7", err, calls.Load())
	}
	// Pauses: 10, 20, 20, 20, 20, 20 ms with jitter in [d/2, d): at most 110 ms.
	if took < 50*time.Millisecond || took > 2*time.Second {
		t.Fatalf("6 retries took %v", took)
	}
}
