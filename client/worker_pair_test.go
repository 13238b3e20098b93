package client_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// pairServer is a loopback server for the Worker's success path: a
// consume (GET) takes the next of n jobs, with a receipt, or answers "no
// job"; an ACK (DELETE) answers ackStatus(i) for the i-th ACK (0 first),
// closing the connection after it when ackClose(i), or closes it without
// an answer when ackDrop(i). An ACK is answered
// only once the next request came on its connection or 300 ms passed:
// paired counts the ACKs whose next request came within that time, sent
// with them (a client that waits for the ACK's answer sends nothing).
type pairServer struct {
	ln                net.Listener
	n                 int
	ackStatus         func(i int) string
	ackClose          func(i int) bool
	ackDrop           func(i int) bool
	consumed, acks    atomic.Int64
	paired, conns     atomic.Int64
	mu                sync.Mutex
	ackedIDs          map[string]int
	wg                sync.WaitGroup
	closing           chan struct{}
	connsMu           sync.Mutex
	open              []net.Conn
	consumesAfterAcks atomic.Int64
}

func newPairServer(t *testing.T, n int) *pairServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &pairServer{ln: ln, n: n, ackedIDs: make(map[string]int), closing: make(chan struct{}),
		ackStatus: func(int) string { return "204 No Content" }, ackClose: func(int) bool { return false }, ackDrop: func(int) bool { return false }}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.connsMu.Lock()
			s.open = append(s.open, c)
			s.connsMu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		close(s.closing)
		ln.Close()
		s.connsMu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.connsMu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *pairServer) url() string { return "http://" + s.ln.Addr().String() }

// serve answers c's requests (heads only: the Worker's have no body).
func (s *pairServer) serve(c net.Conn) {
	buf := make([]byte, 0, 8192)
	tmp := make([]byte, 4096)
	// next returns the next request head, reading up to wait for it (0:
	// as long as it takes); ok false when none came.
	next := func(wait time.Duration) (string, bool) {
		for {
			if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
				h := string(buf[:i])
				buf = buf[:copy(buf, buf[i+4:])]
				return h, true
			}
			if wait > 0 {
				c.SetReadDeadline(time.Now().Add(wait))
			} else {
				c.SetReadDeadline(time.Time{})
			}
			m, err := c.Read(tmp)
			buf = append(buf, tmp[:m]...)
			if err != nil && m == 0 {
				return "", false
			}
		}
	}
	var pending string // a request read ahead
	for {
		h := pending
		pending = ""
		if h == "" {
			var ok bool
			if h, ok = next(0); !ok {
				return
			}
		}
		var out string
		closeAfter := false
		switch {
		case strings.HasPrefix(h, "GET "):
			i := int(s.consumed.Add(1))
			if i > s.n {
				s.consumed.Add(-1)
				body := `{"msg":"no job available"}`
				out = "HTTP/1.1 404 Not Found\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
				break
			}
			body := `{"data":"aGk=","job_id":"j` + strconv.Itoa(i) + `","msg":"new job","namespace":"ns","queue":"q","receipt":"r` + strconv.Itoa(i) + `","remain_tries":0,"ttl":0}`
			out = "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		case strings.HasPrefix(h, "DELETE "):
			i := int(s.acks.Add(1)) - 1
			line := h[:strings.IndexByte(h, '\n')]
			id := line[strings.Index(line, "/job/")+5 : strings.IndexByte(line, '?')]
			s.mu.Lock()
			s.ackedIDs[id]++
			s.mu.Unlock()
			if s.ackDrop(i) {
				return // the connection ends, the ACK unanswered
			}
			if p, ok := next(300 * time.Millisecond); ok {
				s.paired.Add(1)
				pending = p
			}
			out = "HTTP/1.1 " + s.ackStatus(i) + "\r\nContent-Length: 0\r\n"
			if s.ackClose(i) {
				out += "Connection: close\r\n"
				closeAfter = true
			}
			out += "\r\n"
		default:
			return
		}
		if _, err := c.Write([]byte(out)); err != nil || closeAfter {
			return
		}
	}
}

// runPairWorker runs a Worker of one slot over srv until it handled n
// jobs, and returns it stopped.
func runPairWorker(t *testing.T, srv *pairServer, n int, opts ...client.Option) *client.Worker {
	t.Helper()
	c, err := client.New(srv.url(), append([]client.Option{client.WithNamespace("ns"), client.WithRetry(3, time.Millisecond, time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	var observed atomic.Int64
	w, err := client.NewWorker(c, client.WorkerConfig{
		Queues: []string{"q"}, Concurrency: 1, PollTimeout: 50 * time.Millisecond,
		Observe: func(ctx context.Context, _ *client.Job) (context.Context, func(error)) {
			return ctx, func(error) { observed.Add(1) }
		},
	}, func(context.Context, *client.Job) error { handled.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every job handled and ACKed", func() bool {
		return handled.Load() == int64(n) && w.Stats().Acked+w.Stats().AckErrors == int64(n)
	})
	if err := w.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := observed.Load(); got != int64(n) {
		t.Errorf("Observe's done called %d times, want %d", got, n)
	}
	return w
}

// TestWorkerPairsAckAndConsume: the Worker sends each ACK with its slot's
// next consume, in one write on one connection (issue #34), and the
// outcome is what it was with the two apart: every job ACKed once, by its
// receipt; an ACK the server failed with a 5xx is sent again; a consume
// the server did not serve (it closed the connection after the ACK's
// answer) is sent again on a new connection.
func TestWorkerPairsAckAndConsume(t *testing.T) {
	const n = 6
	t.Run("paired", func(t *testing.T) {
		srv := newPairServer(t, n)
		w := runPairWorker(t, srv, n)
		if st := w.Stats(); st.Acked != n || st.AckErrors != 0 || st.ConsumeErrors != 0 {
			t.Fatalf("stats %+v, want %d ACKed and no error", st, n)
		}
		if got := srv.paired.Load(); got != n {
			t.Errorf("%d of %d ACKs came with the next consume, want all", got, n)
		}
		if c := srv.conns.Load(); c != 1 {
			t.Errorf("%d connections, want 1", c)
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for i := 1; i <= n; i++ {
			if k := srv.ackedIDs["j"+strconv.Itoa(i)]; k != 1 {
				t.Errorf("job j%d ACKed %d times, want 1", i, k)
			}
		}
	})
	t.Run("ack-5xx-sent-again", func(t *testing.T) {
		srv := newPairServer(t, n)
		srv.ackStatus = func(i int) string {
			if i == 1 {
				return "503 Service Unavailable"
			}
			return "204 No Content"
		}
		w := runPairWorker(t, srv, n)
		if st := w.Stats(); st.Acked != n || st.AckErrors != 0 {
			t.Fatalf("stats %+v, want %d ACKed", st, n)
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if k := srv.ackedIDs["j2"]; k != 2 {
			t.Errorf("job j2 (its first ACK failed with 503) ACKed %d times, want 2", k)
		}
	})
	t.Run("close-after-ack", func(t *testing.T) {
		srv := newPairServer(t, n)
		srv.ackClose = func(i int) bool { return i == 2 }
		w := runPairWorker(t, srv, n)
		if st := w.Stats(); st.Acked != n || st.AckErrors != 0 || st.ConsumeErrors != 0 {
			t.Fatalf("stats %+v, want %d ACKed and no error", st, n)
		}
		if c := srv.conns.Load(); c != 2 {
			t.Errorf("%d connections, want 2 (one closed after an ACK)", c)
		}
		if got := srv.consumed.Load(); got != n {
			t.Errorf("%d jobs consumed, want %d", got, n)
		}
	})
	t.Run("ack-unanswered-sent-again", func(t *testing.T) {
		srv := newPairServer(t, n)
		srv.ackDrop = func(i int) bool { return i == 2 }
		w := runPairWorker(t, srv, n)
		if st := w.Stats(); st.Acked != n || st.AckErrors != 0 {
			t.Fatalf("stats %+v, want %d ACKed", st, n)
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if k := srv.ackedIDs["j3"]; k != 2 {
			t.Errorf("job j3 (its first ACK unanswered) ACKed %d times, want 2", k)
		}
		if got := srv.consumed.Load(); got != n {
			t.Errorf("%d jobs consumed, want %d", got, n)
		}
	})
	t.Run("ack-4xx-reported", func(t *testing.T) {
		srv := newPairServer(t, n)
		srv.ackStatus = func(i int) string {
			if i == 0 {
				return "409 Conflict"
			}
			return "204 No Content"
		}
		w := runPairWorker(t, srv, n)
		if st := w.Stats(); st.Acked != n-1 || st.AckErrors != 1 {
			t.Fatalf("stats %+v, want %d ACKed and 1 ACK error", st, n-1)
		}
	})
}
