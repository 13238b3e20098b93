package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// TestServeAndShutdown runs both listeners on 127.0.0.1:0, checks real
// requests, and checks that a consumer waiting in a long-poll is answered
// 404 as soon as the server shuts down.
func TestServeAndShutdown(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	waiting := make(chan struct{}, 1)
	env.eng.consume = func(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
		waiting <- struct{}{}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(req.Timeout):
			return nil, nil
		}
	}
	srv := env.srv
	if err := srv.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	if err := srv.Listen(); err == nil {
		t.Errorf("second Listen succeeded")
	}
	if srv.Addr() == "" || srv.AdminAddr() == "" || srv.Addr() == srv.AdminAddr() {
		t.Fatalf("addresses %q %q", srv.Addr(), srv.AdminAddr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()

	client := &http.Client{Timeout: 20 * time.Second}
	get := func(url string, header map[string]string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", url, err)
			return 0, "", nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	code, body, h := get("http://"+srv.Addr()+"/api/ns/q/size", nil)
	if code != 200 || body != `{"namespace":"ns","queue":"q","size":0}` || h.Get("X-Request-ID") == "" {
		t.Errorf("size: %d %s %v", code, body, h)
	}
	code, body, h = get("http://"+srv.AdminAddr()+"/version", nil)
	if code != 200 || !strings.Contains(body, `"version": "v1.2.3"`) || h.Get("X-Request-ID") == "" {
		t.Errorf("version: %d %s", code, body)
	}

	type result struct {
		code int
		body string
	}
	consumed := make(chan result, 1)
	go func() {
		code, body, _ := get("http://"+srv.Addr()+"/api/ns/q?timeout=60", tok(goodToken))
		consumed <- result{code, body}
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("consume never reached the engine")
	}
	start := time.Now()
	cancel()
	select {
	case r := <-consumed:
		if r.code != 404 || r.body != `{"msg":"no job available"}` {
			t.Errorf("waiting consume got %d %s", r.code, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting consume not answered at shutdown")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := client.Get("http://" + srv.Addr() + "/api/ns/q/size"); err == nil {
		t.Errorf("server still answers after shutdown")
	}
}

// TestServeListensItself checks that Serve binds the listeners when Listen
// was not called, and that Close before Serve's context ends stops it.
func TestServeListensItself(t *testing.T) {
	env := newEnv(t)
	served := make(chan error, 1)
	go func() { served <- env.srv.Serve(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	for env.srv.AdminAddr() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Get("http://" + env.srv.AdminAddr() + "/pools")
	if err != nil {
		t.Fatalf("GET /pools: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/pools: %d", resp.StatusCode)
	}
	if err := env.srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
}

// TestHTTPServerSettings checks the timeouts and limits of both servers.
func TestHTTPServerSettings(t *testing.T) {
	env := newEnv(t)
	for _, s := range []*http.Server{env.srv.apiSrv, env.srv.adminSrv} {
		if s.ReadTimeout != 30*time.Second || s.ReadHeaderTimeout != 10*time.Second ||
			s.WriteTimeout != 630*time.Second || s.IdleTimeout != 120*time.Second || s.MaxHeaderBytes != 1<<20 {
			t.Errorf("server settings: read %v header %v write %v idle %v header bytes %d",
				s.ReadTimeout, s.ReadHeaderTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
		}
	}
}

func TestHTTPErrorLog(t *testing.T) {
	env := newEnv(t)
	env.srv.apiSrv.ErrorLog.Print("http: TLS handshake error from 1.2.3.4: EOF")
	e := env.logs.LastEntry()
	if e == nil || e.Level != logrus.WarnLevel || e.Message != "http: TLS handshake error from 1.2.3.4: EOF" || e.Data["component"] != "http" {
		t.Errorf("last log entry %+v", e)
	}
}
