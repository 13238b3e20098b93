package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// closedWithin reads from conn until the server closes it and returns how
// long that took (or fails after limit).
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", limit)
	}
	return time.Since(start)
}

// TestSlowlorisHeaders: a client sending one header byte per 100 ms is cut
// off by ReadHeaderTimeoutSecond on both listeners, without an answer.
func TestSlowlorisHeaders(t *testing.T) {
	t.Parallel()
	l := startLive(t, liveOptions{config: func(c *config.Config) { c.Kairos.ReadHeaderTimeoutSecond = 1 }})
	for name, addr := range map[string]string{"api": l.srv.Addr(), "admin": l.srv.AdminAddr()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				msg := "GET /api/ns/q/size HTTP/1.1\r\nHost: kairos\r\nX-Slow: " + strings.Repeat("a", 200)
				for i := 0; i < len(msg); i++ {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if _, err := conn.Write([]byte{msg[i]}); err != nil {
						return
					}
				}
			}()
			d := closedWithin(t, conn, 5*time.Second)
			if d < 800*time.Millisecond || d > 2500*time.Millisecond {
				t.Errorf("slow headers cut off after %v, want about 1 s", d)
			}
		})
	}
}

// TestSlowBody: a body trickling in is cut off by ReadTimeoutSecond; the
// publish fails cleanly (a 4xx or a closed connection) and writes no job.
func TestSlowBody(t *testing.T) {
	t.Parallel()
	l := startLive(t, liveOptions{config: func(c *config.Config) {
		c.Kairos.ReadHeaderTimeoutSecond, c.Kairos.ReadTimeoutSecond = 1, 2
	}})
	tok := l.token(t, "ns", auth.Scope{})
	conn, err := net.Dial("tcp", l.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /api/ns/slow HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\nContent-Length: 100\r\n\r\n", tok)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 100 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(6 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || string(b) != `{"error":"failed to read body"}` {
			t.Errorf("slow body: %d %s", resp.StatusCode, b)
		}
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server waited for the slow body beyond ReadTimeout")
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 3500*time.Millisecond {
		t.Errorf("slow body cut off after %v, want about 2 s", d)
	}
	if r := liveDo(t, "GET", l.api+"/api/ns/slow/size", nil, nil); r.body != `{"namespace":"ns","queue":"slow","size":0}` {
		t.Errorf("after the cut-off: %s", r.body)
	}
}

// TestLongPollCap: a consume asking for a 2^32-1 s long poll waits
// MaxTimeoutSecond.
func TestLongPollCap(t *testing.T) {
	t.Parallel()
	l := startLive(t, liveOptions{config: func(c *config.Config) { c.Kairos.MaxTimeoutSecond = 1 }})
	tok := l.token(t, "ns", auth.Scope{})
	start := time.Now()
	r := liveDo(t, "GET", l.api+"/api/ns/q?timeout=4294967295", nil, map[string]string{"X-Token": tok})
	d := time.Since(start)
	if r.status != 404 || r.body != `{"msg":"no job available"}` || d < 900*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("capped long poll: %d %s after %v, want 404 after about 1 s", r.status, r.body, d)
	}
}

// TestLongPollOutlivesReadAndWriteTimeouts: a long poll is not cut off by
// the read timeout (which covers reading the request) nor by the write
// timeout (extended by MaxTimeoutSecond).
func TestLongPollOutlivesReadAndWriteTimeouts(t *testing.T) {
	t.Parallel()
	l := startLive(t, liveOptions{config: func(c *config.Config) {
		k := &c.Kairos
		k.ReadHeaderTimeoutSecond, k.ReadTimeoutSecond, k.WriteTimeoutSecond, k.MaxTimeoutSecond = 1, 1, 1, 4
	}})
	tok := l.token(t, "ns", auth.Scope{})
	go func() {
		time.Sleep(2500 * time.Millisecond)
		_ = liveDo(t, "PUT", l.api+"/api/ns/q", strings.NewReader("late"), map[string]string{"X-Token": tok})
	}()
	start := time.Now()
	r := liveDo(t, "GET", l.api+"/api/ns/q?timeout=4", nil, map[string]string{"X-Token": tok})
	if d := time.Since(start); r.status != 200 || !strings.Contains(r.body, `"data":"bGF0ZQ=="`) || d < 2*time.Second {
		t.Errorf("long poll: %d %s after %v, want the job published after 2.5 s", r.status, r.body, d)
	}
}

// TestIdleTimeout: an idle keep-alive connection is closed after
// IdleTimeoutSecond.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	l := startLive(t, liveOptions{config: func(c *config.Config) { c.Kairos.IdleTimeoutSecond = 1 }})
	conn, err := net.Dial("tcp", l.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /api/ns/q/size HTTP/1.1\r\nHost: kairos\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if d := closedWithin(t, conn, 5*time.Second); d < 800*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("idle connection closed after %v, want about 1 s", d)
	}
}
