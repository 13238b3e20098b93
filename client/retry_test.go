package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// unavailable503 answers 503 to the first fails requests, as Kairos does
// while Redis is unavailable (Retry-After: retryAfter seconds), or with a
// job ID when mayExist is set (a publish not confirmed by the replicas);
// then it answers as flaky does. It records each request's job_key.
func unavailable503(t *testing.T, fails int64, retryAfter string, mayExist bool) (*httptest.Server, *atomic.Int64, *[]string) {
	t.Helper()
	var calls atomic.Int64
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.URL.Query().Get("job_key"))
		mu.Unlock()
		if calls.Add(1) <= fails {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			if mayExist {
				w.Write([]byte(`{"error":"publish not replicated: the job may exist","job_id":"01J00000000000000000000001"}`))
			} else {
				w.Write([]byte(`{"error":"redis is unavailable, retry later"}`))
			}
			return
		}
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPut:
			if r.URL.Query().Get("job_key") != "" && mayExist {
				w.Write([]byte(`{"job_id":"01J00000000000000000000001","msg":"duplicate job_key"}`))
				return
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"job_id":"01J00000000000000000000002","msg":"published"}`))
		default:
			if strings.HasSuffix(r.URL.Path, "/size") {
				w.Write([]byte(`{"namespace":"ns","queue":"q","size":7}`))
				return
			}
			w.Write([]byte(`{"msg":"new job","namespace":"ns","queue":"q","job_id":"01J00000000000000000000003","data":"eA==","ttl":0,"elapsed_ms":1,"remain_tries":1}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &calls, &keys
}

// TestRetryUnavailable: a 503 is retried where a retry cannot duplicate
// work (consume, size, ACK, keyed publishes), after the server's
// Retry-After; a publish without a key is not re-sent, and a "may exist"
// publish returns its job ID (ErrMayExist) unless it carried a key, whose
// retry then answers the first job instead of a duplicate.
func TestRetryUnavailable(t *testing.T) {
	ctx := ctxT(t)
	newClient := func(t *testing.T, url string, opts ...client.Option) *client.Client {
		c, err := client.New(url, append([]client.Option{client.WithNamespace("ns"), client.WithToken("t"),
			client.WithRetry(3, time.Millisecond, 2*time.Millisecond)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name      string
		call      func(c *client.Client) error
		wantCalls int64 // with 2 failures and 3 retries allowed
	}{
		{"Consume", func(c *client.Client) error { _, err := c.Consume(ctx, "q", time.Second, 0); return err }, 3},
		{"QueueSize", func(c *client.Client) error { _, err := c.QueueSize(ctx, "q"); return err }, 3},
		{"Ack", func(c *client.Client) error { return c.Ack(ctx, "q", "id") }, 3},
		{"Publish with a key", func(c *client.Client) error {
			_, err := c.Publish(ctx, "q", []byte("x"), client.JobKey("k"))
			return err
		}, 3},
		{"Publish without a key", func(c *client.Client) error { _, err := c.Publish(ctx, "q", []byte("x")); return err }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, calls, _ := unavailable503(t, 2, "", false)
			err := tc.call(newClient(t, srv.URL))
			if got := calls.Load(); got != tc.wantCalls {
				t.Fatalf("%d requests, want %d (err %v)", got, tc.wantCalls, err)
			}
			if tc.wantCalls == 1 && (!errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrServer)) {
				t.Fatalf("error %v, want ErrUnavailable", err)
			}
			if tc.wantCalls == 3 && err != nil {
				t.Fatalf("error %v after retries", err)
			}
		})
	}

	t.Run("pool full", func(t *testing.T) {
		var calls atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInsufficientStorage)
			_, _ = w.Write([]byte(`{"error":"pool default is full"}`))
		}))
		t.Cleanup(srv.Close)
		_, err := newClient(t, srv.URL).Publish(ctx, "q", []byte("x"), client.JobKey("k"))
		var apiErr *client.APIError
		if !errors.Is(err, client.ErrPoolFull) || !errors.Is(err, client.ErrServer) || errors.Is(err, client.ErrUnavailable) ||
			!errors.As(err, &apiErr) || apiErr.Message != "pool default is full" || calls.Load() != 1 {
			t.Fatalf("keyed Publish into a full pool: %v after %d requests; want ErrPoolFull, not retried", err, calls.Load())
		}
	})

	t.Run("Retry-After", func(t *testing.T) {
		srv, calls, _ := unavailable503(t, 1, "1", false)
		start := time.Now()
		if _, err := newClient(t, srv.URL).QueueSize(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); calls.Load() != 2 || d < 900*time.Millisecond {
			t.Fatalf("%d requests in %v; want the retry after Retry-After (1 s)", calls.Load(), d)
		}
	})

	t.Run("may exist, no key", func(t *testing.T) {
		srv, calls, _ := unavailable503(t, 1, "1", true)
		_, err := newClient(t, srv.URL).Publish(ctx, "q", []byte("x"))
		var apiErr *client.APIError
		if !errors.Is(err, client.ErrMayExist) || !errors.As(err, &apiErr) || apiErr.JobID != "01J00000000000000000000001" ||
			apiErr.RetryAfter != time.Second || calls.Load() != 1 {
			t.Fatalf("Publish: %v (%+v) after %d requests; want ErrMayExist with the job ID, not retried", err, apiErr, calls.Load())
		}
	})

	t.Run("may exist, generated key", func(t *testing.T) {
		srv, calls, keys := unavailable503(t, 1, "", true)
		id, err := newClient(t, srv.URL, client.WithPublishKeys()).Publish(ctx, "q", []byte("x"))
		if err != nil || id != "01J00000000000000000000001" || calls.Load() != 2 {
			t.Fatalf("Publish: %q, %v after %d requests; want the first job's ID after one retry", id, err, calls.Load())
		}
		if k := *keys; len(k) != 2 || k[0] == "" || k[0] != k[1] {
			t.Fatalf("job keys sent %q, want one generated key, sent twice", k)
		}
	})
}

// TestWorkerHonoursRetryAfter: a worker whose consume fails with 503 waits
// the server's Retry-After before its next consume, not its own (shorter)
// backoff, so that a fleet of workers does not hammer a server whose Redis
// is restarting.
func TestWorkerHonoursRetryAfter(t *testing.T) {
	srv, calls, _ := unavailable503(t, 1, "1", false)
	c, err := client.New(srv.URL, client.WithNamespace("ns"), client.WithToken("t"),
		client.WithRetry(0, time.Millisecond, time.Millisecond)) // the worker's own loop, not the client's retry
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	start := time.Now()
	startWorker(t, c, client.WorkerConfig{Queues: []string{"q"}, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond},
		func(context.Context, *client.Job) error {
			select {
			case got <- time.Now():
			default:
			}
			return nil
		})
	select {
	case at := <-got:
		if d := at.Sub(start); d < 900*time.Millisecond {
			t.Fatalf("job handled %v after the 503, before its Retry-After (1 s); %d requests", d, calls.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no job handled")
	}
}
