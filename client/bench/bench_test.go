package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestScenariosOnCeiling runs every timed scenario briefly against the
// do-nothing server: the load generator itself must work and count.
func TestScenariosOnCeiling(t *testing.T) {
	srv := httptest.NewServer(&Ceiling{})
	t.Cleanup(srv.Close)
	cfg := Config{Addr: srv.URL, Concurrency: 4, Duration: 300 * time.Millisecond, Jobs: 200}
	for name, run := range map[string]func(context.Context, Config) (Result, error){
		"publish": Publish, "bulk": BulkPublish, "consume": ConsumeAck,
	} {
		r, err := run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Ops == 0 || r.Errors != 0 || r.PerSec <= 0 || r.P99MS < r.P50MS {
			t.Fatalf("%s: %+v", name, r)
		}
	}
}

// TestFloodOnCeiling runs the flood scenario briefly against the
// do-nothing server, which accepts any token: the valid publishers count,
// and every flood request is reported as not refused.
func TestFloodOnCeiling(t *testing.T) {
	srv := httptest.NewServer(&Ceiling{})
	t.Cleanup(srv.Close)
	r, err := Flood(context.Background(), Config{Addr: srv.URL, Concurrency: 2, Publishers: 2, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops == 0 || r.Errors != 0 || r.P99MS < r.P50MS || !strings.Contains(r.Note, " 0 answered 401") {
		t.Fatalf("%+v", r)
	}
}

// TestFloodBody: with FloodBody, each flood request announces that many
// bytes and sends one less; a server that refuses the token from the head
// (net/http answers at once, without reading the body) answers them all
// 401 while the valid publishers go on.
func TestFloodBody(t *testing.T) {
	const token = "valid"
	var unfinished atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != token {
			if r.ContentLength == 1<<20 {
				unfinished.Add(1)
			}
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"job_id":"x","msg":"published"}`)
	}))
	t.Cleanup(srv.Close)
	r, err := Flood(context.Background(), Config{Addr: srv.URL, Token: token, Concurrency: 2, Publishers: 1,
		FloodBody: 1 << 20, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Flood connections may also fail to dial on a loaded machine (the
	// note counts them "otherwise"): what matters is that refusals came.
	if r.Ops == 0 || r.Errors != 0 || unfinished.Load() == 0 || strings.Contains(r.Note, "), 0 answered 401") ||
		!strings.Contains(r.Note, "1048575 of the 1048576 body bytes") {
		t.Fatalf("%+v (%d unfinished requests seen)", r, unfinished.Load())
	}
}

// TestDelayProxy: bytes go through unchanged both ways, each way at least
// the delay later, and pipelined writes are not serialised by it.
func TestDelayProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const delay = 20 * time.Millisecond
	p, err := StartDelayProxy("127.0.0.1:0", ln.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	for i := range 10 { // pipelined: 10 writes, 1 ms apart
		fmt.Fprintf(c, "ping %d\n", i)
		time.Sleep(time.Millisecond)
	}
	br := bufio.NewReader(c)
	for i := range 10 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("line %d: %q %v", i, line, err)
		}
		if i == 0 && time.Since(start) < 2*delay {
			t.Fatalf("first echo after %v, want >= %v", time.Since(start), 2*delay)
		}
	}
	if d := time.Since(start); d > 2*delay+200*time.Millisecond {
		t.Errorf("10 pipelined echoes took %v: the proxy serialises", d)
	}
}

// TestConsumeGroups: with Groups set, the consume scenario's fill puts
// each bulk publish in a group, the groups in turn; without, no group.
func TestConsumeGroups(t *testing.T) {
	for _, groups := range []int{0, 3} {
		var mu sync.Mutex
		seen := map[string]int{}
		ceiling := &Ceiling{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/bulk") {
				mu.Lock()
				seen[r.URL.Query().Get("group")]++
				mu.Unlock()
			}
			ceiling.ServeHTTP(w, r)
		}))
		cfg := Config{Addr: srv.URL, Concurrency: 2, Duration: 200 * time.Millisecond, Jobs: 64 * 6, BulkSize: 64, Groups: groups}
		if _, err := ConsumeAck(context.Background(), cfg); err != nil {
			srv.Close()
			t.Fatalf("groups %d: %v", groups, err)
		}
		srv.Close()
		want := map[string]int{"": 6}
		if groups == 3 {
			want = map[string]int{"g0": 2, "g1": 2, "g2": 2}
		}
		mu.Lock()
		if !maps.Equal(seen, want) {
			t.Errorf("groups %d: bulk publishes by group %v, want %v", groups, seen, want)
		}
		mu.Unlock()
	}
}
