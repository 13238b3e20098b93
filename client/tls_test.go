package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/client/internal/kairostest"
)

// TestTLS: against a Kairos server serving TLS on both listeners (its
// event loops asked for, so stepping aside), a client trusting the
// server's CA creates a token over https, publishes, consumes and ACKs; a
// client without the CA is refused by certificate verification.
func TestTLS(t *testing.T) {
	srv := kairostest.StartTLS(t)
	ctx := ctxT(t)
	admin, err := client.NewAdmin(srv.AdminURL(), client.WithCAFile(srv.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	token, err := admin.CreateToken(ctx, "tls", client.TokenOptions{Description: "over https"})
	if err != nil {
		t.Fatalf("CreateToken over https: %v", err)
	}
	c, err := client.New(srv.APIURL(), client.WithNamespace("tls"), client.WithToken(token), client.WithCAFile(srv.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "q1")

	// WithTLSConfig alone, with the CA in its RootCAs.
	pem, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c2, err := client.New(srv.APIURL(), client.WithNamespace("tls"), client.WithToken(token),
		client.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c2, "q2")

	// Without the CA: the system roots do not know it. An idempotent
	// request is not retried after a certificate error (one dial).
	var dials atomic.Int32
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	}}}
	c3, err := client.New(srv.APIURL(), client.WithNamespace("tls"), client.WithToken(token), client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c3.QueueSize(ctx, "q3")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("QueueSize without the CA: %v, want x509.UnknownAuthorityError", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("QueueSize without the CA dialled %d times, want 1 (no retry)", n)
	}
	// Plain http:// on the TLS listener: net/http's 400, not a publish.
	c4, err := client.New("http://"+srv.API, client.WithNamespace("tls"), client.WithToken(token), client.WithRetry(0, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = c4.Publish(ctx, "q3", []byte("x")); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("Publish in plain HTTP to the TLS listener: %v, want ErrBadRequest (400)", err)
	}
	if n, err := c.QueueSize(ctx, "q3"); err != nil || n != 0 {
		t.Errorf("Size(q3) = %d, %v; want 0 (nothing published)", n, err)
	}
}

// roundTrip publishes, consumes and ACKs one job on queue.
func roundTrip(t *testing.T, c *client.Client, queue string) {
	t.Helper()
	ctx := ctxT(t)
	id, err := c.Publish(ctx, queue, []byte("over TLS"))
	if err != nil {
		t.Fatalf("Publish over https: %v", err)
	}
	job, err := c.Consume(ctx, queue, 30*time.Second, 5*time.Second)
	if err != nil || job.ID != id || string(job.Body) != "over TLS" {
		t.Fatalf("Consume over https = %+v, %v; want %s", job, err, id)
	}
	if err := c.Ack(ctx, queue, id); err != nil {
		t.Fatalf("Ack over https: %v", err)
	}
}

// TestTLSKeepsCustomTransport: WithCAFile with WithHTTPClient uses a copy
// of the caller's transport (its dialer here) with the CA, and leaves the
// caller's transport as it was.
func TestTLSKeepsCustomTransport(t *testing.T) {
	srv := kairostest.StartTLS(t)
	token := srv.Token(t, "tls", "")
	var dials atomic.Int32
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	}}
	hc := &http.Client{Transport: tr}
	c, err := client.New(srv.APIURL(), client.WithNamespace("tls"), client.WithToken(token),
		client.WithHTTPClient(hc), client.WithCAFile(srv.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "q")
	if dials.Load() == 0 {
		t.Error("the custom transport's dialer was not used")
	}
	if tr.TLSClientConfig != nil {
		t.Error("the caller's transport was changed")
	}
}

func TestTLSOptionErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("unused") })
	for _, tc := range []struct {
		name string
		opts []client.Option
	}{
		{"missing CA file", []client.Option{client.WithCAFile(filepath.Join(dir, "missing.crt"))}},
		{"CA file without PEM", []client.Option{client.WithCAFile(notPEM)}},
		{"empty CA file name", []client.Option{client.WithCAFile("")}},
		{"nil TLS config", []client.Option{client.WithTLSConfig(nil)}},
		{"transport of another type", []client.Option{
			client.WithHTTPClient(&http.Client{Transport: rt}), client.WithTLSConfig(&tls.Config{}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := client.New("https://127.0.0.1:1", append(tc.opts, client.WithNamespace("ns"))...); err == nil {
				t.Errorf("New = %v, want an error", c)
			}
			if a, err := client.NewAdmin("https://127.0.0.1:1", tc.opts...); err == nil {
				t.Errorf("NewAdmin = %v, want an error", a)
			}
		})
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
