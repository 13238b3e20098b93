//go:build linux

package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// Tokens of the off-loop admission tests: slowToken is valid but not
// cached, and verifying it hangs until the test lets it go; heldToken has
// a rate limit whose bucket hangs likewise.
const (
	slowToken = "slow-token-0123456789"
	heldToken = "held-token-0123456789"
)

// putWith is a publish of the fast subset with the given token.
func putWith(token, body string) string {
	return fmt.Sprintf("PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n%s", token, len(body), body)
}

// TestLoopAdmissionNeverBlocksTheLoop: with one event loop, requests whose
// admission needs the admin Redis (a token not in the cache, a rate-limited
// token), while Redis hangs, delay no other connection of the loop, and
// are answered in order on their own connection once Redis answers.
func TestLoopAdmissionNeverBlocksTheLoop(t *testing.T) {
	env, fake, addr := serveLoops(t, withConfig(func(c *config.Config) { c.Kairos.EventLoops = 1 }))
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the server stops
	var verifying, allowing atomic.Int32
	env.tokens.mu.Lock()
	env.tokens.tokens["default/ns/"+slowToken] = auth.Scope{}
	env.tokens.uncached = map[string]bool{slowToken: true}
	env.tokens.hold = func(token string) {
		if token == slowToken {
			verifying.Add(1)
			<-release
		}
	}
	env.tokens.mu.Unlock()
	env.tokens.tokens["default/ns/"+heldToken] = auth.Scope{}
	env.throttler.mu.Lock()
	env.throttler.budget[heldToken] = 100
	env.throttler.hold = func(token string) {
		if token == heldToken {
			allowing.Add(1)
			<-release
		}
	}
	env.throttler.mu.Unlock()

	waitFor := func(what string, n *atomic.Int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); n.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never began", what)
			}
		}
	}
	// a: an uncached token, then a cached one, pipelined: the second waits
	// for the first.
	a := dialLoop(t, addr, 10*time.Second)
	if _, err := io.WriteString(a, putWith(slowToken, "a1")+putWith(goodToken, "a2")); err != nil {
		t.Fatal(err)
	}
	waitFor("verifying the uncached token", &verifying)
	// c: a rate-limited token, whose bucket hangs.
	c := dialLoop(t, addr, 10*time.Second)
	if _, err := io.WriteString(c, putWith(heldToken, "c1")); err != nil {
		t.Fatal(err)
	}
	waitFor("taking from the bucket", &allowing)

	// b, on the same loop, is served meanwhile, again and again.
	b := dialLoop(t, addr, 10*time.Second)
	bbr := bufio.NewReader(b)
	for i := range 3 {
		start := time.Now()
		if _, err := io.WriteString(b, putWith(goodToken, fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
		got := readAnswers(t, bbr, 1)
		if got[0].status != 201 {
			t.Fatalf("b%d: %d %s", i, got[0].status, got[0].body)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("b%d answered after %v while the admin Redis hung", i, d)
		}
	}
	if p := fake.published(); strings.Join(p, ",") != "b0,b1,b2" {
		t.Errorf("published %q before the admin Redis answered, want b0,b1,b2", p)
	}

	letGo()
	for _, x := range []struct {
		conn net.Conn
		n    int
	}{{a, 2}, {c, 1}} {
		for _, r := range readAnswers(t, bufio.NewReader(x.conn), x.n) {
			if r.status != 201 {
				t.Errorf("%d %s, want 201", r.status, r.body)
			}
		}
	}
	p := strings.Join(fake.published(), ",")
	if i, j := strings.Index(p, "a1"), strings.Index(p, "a2"); i < 0 || j < i {
		t.Errorf("published %q: want a1, then a2", p)
	}
	if !strings.Contains(p, "c1") {
		t.Errorf("published %q: want c1", p)
	}
}

// TestLoopAdmissionRefusedOffLoop: a refusal decided off the loop (an
// unknown token, a rate limit reached) is answered as gin answers it, on
// the loop, and the connection goes on serving.
func TestLoopAdmissionRefusedOffLoop(t *testing.T) {
	env, fake, addr := serveLoops(t, withConfig(func(c *config.Config) { c.Kairos.EventLoops = 1 }))
	env.tokens.mu.Lock()
	env.tokens.uncached = map[string]bool{"unknown-token-0123456789": true, heldToken: true}
	env.tokens.tokens["default/ns/"+heldToken] = auth.Scope{}
	env.tokens.mu.Unlock()
	env.throttler.mu.Lock()
	env.throttler.budget[heldToken] = 1
	env.throttler.mu.Unlock()

	conn := dialLoop(t, addr, 10*time.Second)
	br := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, putWith("unknown-token-0123456789", "x")+putWith(heldToken, "h1")+
		putWith(heldToken, "h2")+putWith(goodToken, "g")); err != nil {
		t.Fatal(err)
	}
	got := readAnswers(t, br, 4)
	want := []liveResponse{
		{status: 401, body: `{"error":"invalid token"}`},
		{status: 201},
		{status: 429, body: `{"msg":"token(` + heldToken + `) produce reach the limit rate, please retry later"}`},
		{status: 201},
	}
	for i, w := range want {
		if got[i].status != w.status || w.body != "" && got[i].body != w.body {
			t.Errorf("answer %d: %d %s, want %d %s", i, got[i].status, got[i].body, w.status, w.body)
		}
	}
	if p := strings.Join(fake.published(), ","); p != "h1,g" {
		t.Errorf("published %q, want h1,g", p)
	}
}

// TestLoopAdmissionEndsAtShutdown: a request whose admission waits on a
// hung admin Redis does not hold the server's shutdown: the admission is
// cancelled with the server's long-polls, and Serve returns. (Whether the
// request is then served depends on when the loop sees the answer.)
func TestLoopAdmissionEndsAtShutdown(t *testing.T) {
	fake := &eachFake{fakeEngine: &fakeEngine{}}
	env := newEnv(t, func(c *config.Config, d *Deps) {
		c.Kairos.EventLoops = 1
		d.Engines["default"] = fake
	})
	var verifying atomic.Int32
	env.tokens.mu.Lock()
	env.tokens.tokens["default/ns/"+slowToken] = auth.Scope{}
	env.tokens.uncached = map[string]bool{slowToken: true}
	env.tokens.hold = func(string) {
		verifying.Add(1)
		<-env.srv.pollCtx.Done() // a hung Redis, up to the request's cancellation
	}
	env.tokens.mu.Unlock()
	if err := env.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.srv.Serve(ctx) }()
	waitLoops(t, env.srv)
	conn := dialLoop(t, env.srv.Addr(), 10*time.Second)
	if _, err := io.WriteString(conn, putWith(slowToken, "x")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); verifying.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the admission never began")
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return with an admission pending")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown took %v", d)
	}
}
