package app_test

import (
	"bytes"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestE2ELostReply: a write that Redis applies but whose reply is lost
// with its connection (a Redis killed or a network cut just after the
// command) is sent once, not again by go-redis, and the client is told
// that the outcome is unknown: 503 with Retry-After, not the answer of a
// second run. A TCP proxy between the server and a real redis-server
// forwards the command, waits for Redis's reply (so the command ran),
// drops it and closes the connection. On the server's real clients
// (app.New's connect), so the test checks the settings actually used:
// go-redis's own retry would send the ACK again and answer 404 "job not
// found" for the job it had just ACKed, and send the publish again (which
// finds its own job and answers 201 after two runs).
func TestE2ELostReply(t *testing.T) {
	rs := redistest.Start(t)
	p := startTrapProxy(t, rs.Addr)
	k := startKairos(t, redisConfig(p.addr()))
	e := &e2e{kairos: k, NS: "e2e", Token: k.newToken(t, "e2e")}

	t.Run("ack", func(t *testing.T) {
		id := e.publish(t, "q", "", "to ack")
		r := e.do(t, http.MethodGet, "q", "ttr=60&timeout=0", nil, map[string]string{"X-Kairos-Extensions": "1"})
		r.wantStatus(t, http.StatusOK)
		var j struct {
			JobID   string `json:"job_id"`
			Receipt string `json:"receipt"`
		}
		r.decode(t, &j)
		if j.JobID != id || j.Receipt == "" {
			t.Fatalf("consumed %s receipt %q, want %s with a receipt", j.JobID, j.Receipt, id)
		}
		// The ACK of this delivery (its receipt): a second run would find
		// the job gone and answer 404, which the consumer reads as "not
		// ACKed by me".
		p.arm([]byte(id))
		r = e.do(t, http.MethodDelete, "q/job/"+id, "receipt="+j.Receipt, nil, nil)
		wantUnavailable(t, r, rs.Addr)
		if n := p.disarm(); n != 1 {
			t.Fatalf("the ACK reached Redis %d times, want once", n)
		}
		// It was applied: the job is gone, and the consumer's retry (after
		// Retry-After) is told so.
		e.do(t, http.MethodGet, "q/job/"+id, "", nil, nil).wantStatus(t, http.StatusNotFound)
		r = e.do(t, http.MethodDelete, "q/job/"+id, "receipt="+j.Receipt, nil, nil)
		r.wantStatus(t, http.StatusNotFound)
		r.wantBody(t, `{"error":"job not found"}`)
	})

	t.Run("publish", func(t *testing.T) {
		body := "lost reply of a publish"
		p.arm([]byte(body))
		r := e.do(t, http.MethodPut, "p", "", []byte(body), nil)
		wantUnavailable(t, r, rs.Addr)
		if n := p.disarm(); n != 1 {
			t.Fatalf("the publish reached Redis %d times, want once", n)
		}
		// The job exists, once.
		j := e.consume(t, "p", "timeout=0")
		if string(j.Data) != body {
			t.Fatalf("consumed %q, want %q", j.Data, body)
		}
		e.ack(t, "p", j.JobID)
		e.wantNoJob(t, "p", "timeout=0")
	})
}

// trapProxy forwards TCP connections to a Redis. Once armed with a
// pattern, it forwards the first client chunk that holds the pattern,
// waits for the reply, drops it and closes that connection; it counts
// the chunks holding the pattern that it forwarded.
type trapProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	pattern []byte // counted while set
	armed   bool   // the next chunk with pattern loses its reply
	sent    int
}

func startTrapProxy(tb testing.TB, target string) *trapProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &trapProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(up)
			wg.Go(func() { p.pipe(c, up) })
		}
	})
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *trapProxy) addr() string { return p.ln.Addr().String() }

// arm counts the chunks holding pattern from now on and makes the next
// one lose its reply.
func (p *trapProxy) arm(pattern []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.armed, p.sent = pattern, true, 0
}

// disarm stops counting and returns the count.
func (p *trapProxy) disarm() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.sent
	p.pattern, p.armed, p.sent = nil, false, 0
	return n
}

// pipe copies c to up and up to c until either ends, losing a reply when
// the trap fires.
func (p *trapProxy) pipe(c, up net.Conn) {
	var lose sync.Mutex // held while the reply of a trapped chunk is due
	trapped := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				lose.Lock()
				drop := trapped
				lose.Unlock()
				if drop {
					// Redis ran the command and answered: lose the
					// answer with the connection.
					_ = c.Close()
					_ = up.Close()
					return
				}
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hit := p.pattern != nil && bytes.Contains(buf[:n], p.pattern)
			fire := hit && p.armed
			if hit {
				p.sent++
			}
			if fire {
				p.armed = false
			}
			p.mu.Unlock()
			if fire {
				lose.Lock()
				trapped = true
				lose.Unlock()
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = c.Close()
	_ = up.Close()
	<-done
}
