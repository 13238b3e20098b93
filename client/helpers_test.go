package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/client/internal/kairostest"
	"github.com/kairos-dev/kairos/config"
)

// env is a running server with a namespace, its token, a client and an
// admin client.
type env struct {
	Srv   *kairostest.Server
	NS    string
	Token string
	C     *client.Client
	Admin *client.Admin
}

func newEnv(t *testing.T, edit ...func(*config.Config)) *env {
	t.Helper()
	srv := kairostest.Start(t, edit...)
	e := &env{Srv: srv, NS: "ns1"}
	e.Token = srv.Token(t, e.NS, "")
	e.C = e.client(t, client.WithToken(e.Token))
	admin, err := client.NewAdmin(srv.Admin)
	if err != nil {
		t.Fatalf("NewAdmin: %v", err)
	}
	e.Admin = admin
	return e
}

// client returns a client of e's namespace with opts.
func (e *env) client(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(e.Srv.API, append([]client.Option{client.WithNamespace(e.NS)}, opts...)...)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// publish publishes body and fails the test on error.
func publish(t *testing.T, c *client.Client, queue, body string, opts ...client.PublishOption) string {
	t.Helper()
	id, err := c.Publish(ctxT(t), queue, []byte(body), opts...)
	if err != nil {
		t.Fatalf("Publish(%s, %q): %v", queue, body, err)
	}
	if id == "" {
		t.Fatalf("Publish(%s, %q): empty job id", queue, body)
	}
	return id
}

// consume consumes one job without waiting and fails the test on error.
func consume(t *testing.T, c *client.Client, queue string, ttr time.Duration) *client.Job {
	t.Helper()
	job, err := c.Consume(ctxT(t), queue, ttr, 0)
	if err != nil {
		t.Fatalf("Consume(%s): %v", queue, err)
	}
	return job
}

// wantErr checks that err matches target (errors.Is) and is an *APIError
// with status (0: not an APIError).
func wantErr(t *testing.T, what string, err, target error, status int) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
	var apiErr *client.APIError
	if status == 0 {
		if errors.As(err, &apiErr) {
			t.Fatalf("%s: got an APIError %v, want a client-side error", what, apiErr)
		}
		return
	}
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: error %v is not an *APIError", what, err)
	}
	if apiErr.Status != status {
		t.Fatalf("%s: status %d, want %d (%v)", what, apiErr.Status, status, err)
	}
	if len(apiErr.RequestID) != 26 {
		t.Fatalf("%s: request id %q, want a ULID", what, apiErr.RequestID)
	}
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
