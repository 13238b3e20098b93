package client_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// The differential test of the client's own transport (conn.go): each
// case is a server behaviour and a client call; the call goes once through
// a client built without WithHTTPClient (the fast transport) and once
// through one built with WithHTTPClient (net/http's client), each against
// a server of its own, and what the caller sees must be the same: the
// value, the class of the error (the client's sentinels, context errors,
// *APIError fields, certificate errors) and how many requests the server
// read (a request sent twice shows there).
//
// Bodies and header values of the hand-made answers are random, from a
// seed: KAIROS_CONN_SEED sets it (default: the time) to replay a failure:
//
//	KAIROS_CONN_SEED=1234 go test -count=1 -run ConnDifferential -v ./client

// rawServer is a TCP listener on loopback whose connections are served by
// serve: it reads each request (head and body) and calls answer with the
// request's number on its connection (0 first) and in all (0 first);
// answer writes to w what it likes and reports whether to read the next
// request on this connection.
type rawServer struct {
	ln     net.Listener
	reqs   atomic.Int64
	conns  atomic.Int64
	answer func(w *bufio.Writer, c net.Conn, onConn, all int) bool
	// got, when set, is told of each request as it is read.
	got chan int
	// stop is closed to unblock answers that wait.
	stop chan struct{}
	wg   sync.WaitGroup
}

func newRawServer(t *testing.T, answer func(w *bufio.Writer, c net.Conn, onConn, all int) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, answer: answer, got: make(chan int, 64), stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				go func() { <-s.stop; c.Close() }()
				br := bufio.NewReader(c)
				w := bufio.NewWriter(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if _, err := io.Copy(io.Discard, req.Body); err != nil {
						return
					}
					all := int(s.reqs.Add(1)) - 1
					select {
					case s.got <- all:
					default:
					}
					if !s.answer(w, c, i, all) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		close(s.stop)
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

// send writes parts to w and flushes; false when the client went away.
func send(w *bufio.Writer, parts ...string) bool {
	for _, p := range parts {
		w.WriteString(p)
	}
	return w.Flush() == nil
}

// outcome is what a caller sees of one call.
type outcome struct {
	value string
	class string
	reqs  int64
}

// errClass names what a caller can test of err.
func errClass(err error) string {
	if err == nil {
		return "nil"
	}
	var cls []string
	for _, s := range []struct {
		name string
		err  error
	}{
		{"NoJob", client.ErrNoJob}, {"NotFound", client.ErrNotFound}, {"Unauthorized", client.ErrUnauthorized},
		{"Forbidden", client.ErrForbidden}, {"RateLimited", client.ErrRateLimited}, {"BadRequest", client.ErrBadRequest},
		{"Conflict", client.ErrConflict}, {"Server", client.ErrServer}, {"Unavailable", client.ErrUnavailable},
		{"MayExist", client.ErrMayExist}, {"PoolFull", client.ErrPoolFull},
		{"Canceled", context.Canceled}, {"DeadlineExceeded", context.DeadlineExceeded},
	} {
		if errors.Is(err, s.err) {
			cls = append(cls, s.name)
		}
	}
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		cls = append(cls, fmt.Sprintf("API{%d %q %q %s %s %v}", apiErr.Status, apiErr.Message, apiErr.RequestID,
			apiErr.Method, apiErr.RetryAfter, apiErr.JobIDs))
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		cls = append(cls, "Certificate")
	}
	if len(cls) == 0 {
		return "other"
	}
	return strings.Join(cls, ",")
}

// connCase is one server behaviour and the calls made against it.
type connCase struct {
	name string
	// raw answers on a raw listener; else http serves through httptest
	// (tls: NewTLSServer).
	raw  func(w *bufio.Writer, c net.Conn, onConn, all int) bool
	http http.HandlerFunc
	tls  bool
	// opts are added to both clients (after the test's defaults).
	opts func(srvURL string, cert *x509.Certificate) []client.Option
	// call is the caller's calls; srv is the raw server (nil for httptest).
	call func(ctx context.Context, c *client.Client, srv *rawServer) (string, error)
	// differs, for a difference the client wants, says why; the fast
	// transport's outcome must then be fastWant (doc/client.md).
	differs  string
	fastWant func(std outcome) outcome
}

func TestConnDifferential(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KAIROS_CONN_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KAIROS_CONN_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("KAIROS_CONN_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 34))
	word := func() string {
		const abc = "abcdefghijklmnopqrstuvwxyz0123456789-_"
		b := make([]byte, 1+rng.IntN(40))
		for i := range b {
			b[i] = abc[rng.IntN(len(abc))]
		}
		return string(b)
	}
	// sizeBody is a QueueSize answer padded to a random length.
	sizeBody := func() string {
		return fmt.Sprintf(`{"namespace":"ns","queue":"q","size":%d,"pad":%q}`, rng.IntN(1000), strings.Repeat("x", rng.IntN(9000)))
	}
	// chunk splits body into random chunks.
	chunk := func(body string) string {
		var b strings.Builder
		for body != "" {
			n := min(len(body), 1+rng.IntN(3000))
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		return b.String() + "0\r\n"
	}
	size := func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
		n, err := c.QueueSize(ctx, "q")
		return strconv.Itoa(n), err
	}
	publish := func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
		return c.Publish(ctx, "q", []byte("body"), client.TTL(0))
	}
	// twice: the call, then the same call on what the pool holds.
	twice := func(call func(context.Context, *client.Client, *rawServer) (string, error)) func(context.Context, *client.Client, *rawServer) (string, error) {
		return func(ctx context.Context, c *client.Client, s *rawServer) (string, error) {
			v1, err := call(ctx, c, s)
			if err != nil {
				return v1, fmt.Errorf("first: %w", err)
			}
			v2, err := call(ctx, c, s)
			return v1 + "|" + v2, err
		}
	}
	// idle: the call, a pause for the server to close the connection
	// and for the client to see it (net/http's connection goroutine
	// reads the EOF), then the call again.
	idle := func(call func(context.Context, *client.Client, *rawServer) (string, error)) func(context.Context, *client.Client, *rawServer) (string, error) {
		return func(ctx context.Context, c *client.Client, s *rawServer) (string, error) {
			v1, err := call(ctx, c, s)
			if err != nil {
				return v1, fmt.Errorf("first: %w", err)
			}
			time.Sleep(50 * time.Millisecond)
			v2, err := call(ctx, c, s)
			return v1 + "|" + v2, err
		}
	}
	ok := func(head, body string) func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
		return func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, head, "Content-Length: ", strconv.Itoa(len(body)), "\r\n\r\n", body)
		}
	}
	// odd gives s in random case.
	odd := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if rng.IntN(2) == 0 {
				b[i] = strings.ToUpper(string(c))[0]
			} else {
				b[i] = strings.ToLower(string(c))[0]
			}
		}
		return string(b)
	}
	published := `{"msg":"published","job_id":"` + word() + `"}`
	b1, b2, b3 := sizeBody(), sizeBody(), sizeBody()
	rid, rid2 := word(), word()
	// The chunkings of b2 and b3: made here, as all that is random, so
	// that both clients meet the same answers (and rng is not shared
	// with the servers' goroutines).
	ch2, ch3 := chunk(b2), chunk(b3)
	body := `{"error":"` + word() + `"}`
	sum := word()

	cases := []connCase{
		{name: "content-length", raw: ok("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", b1), call: twice(size)},
		{name: "content-length-publish", raw: ok("HTTP/1.1 201 Created\r\n", published), call: twice(publish)},
		{name: "chunked", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ch2, "\r\n")
		}, call: twice(size)},
		{name: "chunked-trailers", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n", ch3, "X-Sum: ", sum, "\r\nX-Other: 1\r\n\r\n")
		}, call: twice(size)},
		{name: "odd-case-chunked", raw: func() func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			head := "HTTP/1.1 200 OK\r\n" + odd("Transfer-Encoding") + ": " + odd("chunked") + "\r\n\r\n"
			body := chunk(b2)
			return func(w *bufio.Writer, c net.Conn, onConn, all int) bool { return send(w, head, body, "\r\n") }
		}(), call: twice(size)},
		{name: "odd-case-length-close", raw: func() func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			head := "HTTP/1.1 200 OK\r\n" + odd("Content-Length") + ":" + strings.Repeat(" ", rng.IntN(3)) + strconv.Itoa(len(b1)) +
				"\r\n" + odd("Connection") + ": " + odd("close") + "\r\n\r\n"
			return func(w *bufio.Writer, c net.Conn, onConn, all int) bool { send(w, head, b1); return false }
		}(), call: twice(size)},
		{name: "chunked-and-length", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", ch2, "\r\n")
		}, call: twice(size)},
		{name: "duplicate-length", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			n := strconv.Itoa(len(b1))
			return send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", n, "\r\nContent-Length: ", n, "\r\n\r\n", b1)
		}, call: twice(size)},
		{name: "100-continue", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
		}, call: twice(publish)},
		{name: "103-early-hints", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </b>\r\n\r\n",
				"HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b1)), "\r\n\r\n", b1)
		}, call: twice(size)},
		{name: "connection-close", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
			return false
		}, call: twice(publish)},
		{name: "connection-close-odd-case", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 201 Created\r\nconnection:  Upgrade, CLOSE\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
			return false
		}, call: twice(publish)},
		{name: "http10-until-eof", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.0 200 OK\r\n\r\n", b2)
			return false
		}, call: twice(size)},
		{name: "http10-content-length", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.0 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
			return false
		}, call: twice(publish)},
		{name: "http10-keep-alive", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: ", strconv.Itoa(len(b1)), "\r\n\r\n", b1)
		}, call: twice(size)},
		// The server closes a kept-alive connection while it is idle
		// (after its answer, without saying so): the next request goes
		// on a new connection.
		{name: "idle-close-get", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b1)), "\r\n\r\n", b1)
			return false
		}, call: idle(size)},
		{name: "idle-close-publish", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
			return false
		}, call: idle(publish)},
		// The server closes a kept-alive connection as the next request
		// arrives, before answering: a replayable request is sent again
		// on a new connection, a publish without a key fails.
		{name: "close-before-answer-get", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			if onConn > 0 {
				return false
			}
			return send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b1)), "\r\n\r\n", b1)
		}, call: twice(size)},
		{name: "close-before-answer-publish", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			if onConn > 0 {
				return false
			}
			return send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
		}, call: twice(publish)},
		{name: "close-before-answer-publish-key", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			if onConn > 0 {
				return false
			}
			return send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
		}, call: twice(func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
			return c.Publish(ctx, "q", []byte("body"), client.JobKey("k"))
		})},
		// The one difference: a publish with a job key is replayable
		// (the key makes a second send answer the first job), so the
		// fast transport sends it again on a new connection when the
		// server closed a kept-alive one under it, as net/http does a
		// GET; net/http replays only GET, HEAD, OPTIONS, TRACE and
		// requests with an Idempotency-Key header. Seen only with
		// WithRetry(0): else the client's own retry sends it again.
		{name: "close-before-answer-publish-key-no-retry", differs: "a keyed publish is replayable: sent again on a new connection",
			fastWant: func(std outcome) outcome {
				v, _, _ := strings.Cut(std.value, "|")
				return outcome{value: v + "|" + v, class: "nil", reqs: std.reqs + 1}
			}, raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
				if onConn > 0 {
					return false
				}
				return send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
			}, opts: func(string, *x509.Certificate) []client.Option {
				return []client.Option{client.WithRetry(0, 0, 0)}
			}, call: twice(func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
				return c.Publish(ctx, "q", []byte("body"), client.JobKey("k"))
			})},
		// The connection ends in the middle of the body.
		{name: "mid-body-close-get", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b1)+10), "\r\n\r\n", b1)
			return false
		}, call: size},
		{name: "mid-body-close-publish", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)+10), "\r\n\r\n", published)
			return false
		}, call: publish},
		{name: "mid-chunk-close", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ch2[:len(ch2)/2])
			return false
		}, call: size},
		{name: "mid-head-close", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 200 OK\r\nContent-Le")
			return false
		}, call: publish},
		// Errors, headers in odd casing and with several values.
		{name: "odd-headers-429", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 429 Too Many Requests\r\nx-REQUEST-id:   ", rid, "  \r\nretry-after: 7\r\nRETRY-AFTER: 9\r\nX-Request-Id: ", rid2,
				"\r\ncontent-length: ", strconv.Itoa(len(body)), "\r\n\r\n", body)
		}, call: publish},
		{name: "503-retried-get", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			if all < 2 {
				return send(w, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 15\r\n\r\n{\"error\":\"no\"}\n")
			}
			return send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b3)), "\r\n\r\n", b3)
		}, call: size},
		{name: "404-no-body", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
		}, call: twice(size)},
		{name: "204-ack", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			return send(w, "HTTP/1.1 204 No Content\r\n\r\n")
		}, call: twice(func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
			return "", c.Ack(ctx, "q", "01J")
		})},
		// Consumes: a long poll answered late, a job, no job.
		{name: "consume-slow-job", raw: func() func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			job := `{"attributes":null,"data":"aGVsbG8=","elapsed_ms":3,"job_id":"` + word() + `","msg":"new job","namespace":"ns","queue":"q","receipt":"0123456789abcdef","remain_tries":0,"ttl":86400}`
			return func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
				time.Sleep(30 * time.Millisecond)
				return send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(job)), "\r\n\r\n", job)
			}
		}(), call: twice(func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
			j, err := c.Consume(ctx, "q", 30*time.Second, time.Second)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %s %q %s", j.ID, j.Receipt, j.Body, j.TTL), nil
		})},
		{name: "consume-no-job", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			const body = `{"msg":"no job available","data":null}`
			return send(w, "HTTP/1.1 404 Not Found\r\nContent-Length: ", strconv.Itoa(len(body)), "\r\n\r\n", body)
		}, call: twice(func(ctx context.Context, c *client.Client, _ *rawServer) (string, error) {
			_, err := c.Consume(ctx, "q", 0, 0)
			return "", err
		})},
		// Slow servers: the caller's deadline, the client's timeout
		// (WithTimeout: a GET is tried again), cancellation.
		{name: "deadline", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			io.Copy(io.Discard, c) // never answers
			return false
		}, call: func(ctx context.Context, c *client.Client, s *rawServer) (string, error) {
			ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			return size(ctx, c, s)
		}},
		{name: "client-timeout-get", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			if all < 2 {
				io.Copy(io.Discard, c)
				return false
			}
			return send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b1)), "\r\n\r\n", b1)
		}, opts: func(string, *x509.Certificate) []client.Option {
			return []client.Option{client.WithTimeout(300 * time.Millisecond)}
		}, call: size},
		{name: "client-timeout-publish", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			io.Copy(io.Discard, c)
			return false
		}, opts: func(string, *x509.Certificate) []client.Option {
			return []client.Option{client.WithTimeout(300 * time.Millisecond)}
		}, call: publish},
		{name: "cancel", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			if all == 0 {
				return send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
			}
			io.Copy(io.Discard, c)
			return false
		}, call: func(ctx context.Context, c *client.Client, s *rawServer) (string, error) {
			if _, err := publish(ctx, c, s); err != nil {
				return "", err
			}
			<-s.got // the first
			ctx, cancel := context.WithCancel(ctx)
			go func() { <-s.got; cancel() }() // once the server read the second
			return publish(ctx, c, s)
		}},
		{name: "cancel-mid-body", raw: func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
			send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(b1)), "\r\n\r\n", b1[:len(b1)/2])
			io.Copy(io.Discard, c)
			return false
		}, call: func(ctx context.Context, c *client.Client, s *rawServer) (string, error) {
			ctx, cancel := context.WithCancel(ctx)
			go func() { <-s.got; time.Sleep(20 * time.Millisecond); cancel() }()
			return size(ctx, c, s)
		}},
		// httptest servers: net/http's own answers.
		{name: "httptest-json", http: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, b1)
		}, call: twice(size)},
		{name: "httptest-flushed", http: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("X-Request-ID", rid)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, published[:5])
			w.(http.Flusher).Flush()
			io.WriteString(w, published[5:])
		}, call: twice(publish)},
		{name: "httptest-big", http: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"size":5,"pad":"`+strings.Repeat("y", 3<<20)+`"}`)
		}, call: twice(size)},
		{name: "httptest-hijack-close", http: func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		}, call: publish},
		{name: "tls", tls: true, http: func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil {
				w.WriteHeader(http.StatusBadRequest)
			}
			io.WriteString(w, b2)
		}, opts: func(_ string, cert *x509.Certificate) []client.Option {
			pool := x509.NewCertPool()
			pool.AddCert(cert)
			return []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: pool})}
		}, call: twice(size)},
		{name: "tls-untrusted", tls: true, http: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, b2)
		}, call: size},
	}
	// The defaults of both clients: retries quick enough for a test.
	base := []client.Option{client.WithNamespace("ns"), client.WithToken("t"), client.WithRetry(2, time.Millisecond, 2*time.Millisecond)}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := func(std bool) outcome {
				var (
					url  string
					reqs func() int64
					rs   *rawServer
					cert *x509.Certificate
				)
				if tc.raw != nil {
					rs = newRawServer(t, tc.raw)
					url, reqs = rs.url(), rs.reqs.Load
				} else {
					var n atomic.Int64
					h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); tc.http(w, r) })
					var srv *httptest.Server
					if tc.tls {
						srv = httptest.NewTLSServer(h)
						cert = srv.Certificate()
					} else {
						srv = httptest.NewServer(h)
					}
					srv.Config.ErrorLog = nil
					t.Cleanup(srv.Close)
					url, reqs = srv.URL, n.Load
				}
				opts := append([]client.Option(nil), base...)
				if tc.opts != nil {
					opts = append(opts, tc.opts(url, cert)...)
				}
				if std {
					opts = append(opts, client.WithHTTPClient(&http.Client{}))
				}
				c, err := client.New(url, opts...)
				if err != nil {
					t.Fatalf("client.New: %v", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				v, err := tc.call(ctx, c, rs)
				o := outcome{value: v, class: errClass(err), reqs: reqs()}
				t.Logf("std=%v: %+v (%v)", std, o, err)
				return o
			}
			fast, std := run(false), run(true)
			if tc.differs != "" {
				if want := tc.fastWant(std); fast != want {
					t.Errorf("fast transport: %+v\nwant (%s): %+v\nnet/http: %+v", fast, tc.differs, want, std)
				}
				return
			}
			if fast != std {
				t.Errorf("fast transport: %+v\nnet/http:       %+v", fast, std)
			}
		})
	}
}

// TestBasePathPrefix: a server behind a path prefix ("https://host/kairos")
// gets each request's path once under it, through either transport (the
// prefix was sent twice, /kairos/kairos/api/…, until issue #34's work).
func TestBasePathPrefix(t *testing.T) {
	var paths []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.StripPrefix("/kairos", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/api/ns/q":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"job_id":"j1","msg":"published"}`)
		case r.Method == http.MethodDelete && r.URL.Path == "/api/ns/q/job/j1":
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	})))
	defer srv.Close()
	for _, std := range []bool{false, true} {
		opts := []client.Option{client.WithNamespace("ns"), client.WithToken("t")}
		if std {
			opts = append(opts, client.WithHTTPClient(&http.Client{}))
		}
		c, err := client.New(srv.URL+"/kairos/", opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		if id, err := c.Publish(ctx, "q", []byte("x")); err != nil || id != "j1" {
			t.Fatalf("std=%v: Publish: %q, %v (paths %q)", std, id, err, paths)
		}
		if err := c.Ack(ctx, "q", "j1"); err != nil {
			t.Fatalf("std=%v: Ack: %v (paths %q)", std, err, paths)
		}
	}
}

// TestConnContextWatch: the fast transport watches the caller's context
// per connection, not per request (exchange): a context cancelled while
// its connection is idle, or while the connection carries another
// context's request, cuts nothing; the cancellation of the request's own
// context still does (TestConnDifferential, "cancel"); and the client's
// timeout of a short request holds on a connection whose deadline a long
// poll set.
func TestConnContextWatch(t *testing.T) {
	const published = `{"job_id":"j","msg":"published"}`
	const job = `{"data":"aGk=","job_id":"j","msg":"new job","namespace":"ns","queue":"q","receipt":"0123456789abcdef","remain_tries":0,"ttl":0}`
	release := make(chan struct{})
	srv := newRawServer(t, func(w *bufio.Writer, c net.Conn, onConn, all int) bool {
		switch all {
		case 3: // held until the test releases it
			<-release
		case 4: // a consume
			return send(w, "HTTP/1.1 200 OK\r\nContent-Length: ", strconv.Itoa(len(job)), "\r\n\r\n", job)
		case 5: // never answered
			io.Copy(io.Discard, c)
			return false
		}
		return send(w, "HTTP/1.1 201 Created\r\nContent-Length: ", strconv.Itoa(len(published)), "\r\n\r\n", published)
	})
	c, err := client.New(srv.url(), client.WithNamespace("ns"), client.WithRetry(0, 0, 0), client.WithTimeout(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pub := func(ctx context.Context, what string) {
		t.Helper()
		if _, err := c.Publish(ctx, "q", []byte("x")); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// 0: a publish with A; A ends while the connection is idle; 1: the
	// next request on it, with another context, goes through.
	ctxA, cancelA := context.WithCancel(context.Background())
	pub(ctxA, "publish with A")
	cancelA()
	pub(context.Background(), "publish after A ended")
	// 2: a publish with B; 3: a publish without a context is in flight
	// on the same connection when B ends: it goes through.
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	pub(ctxB, "publish with B")
	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(context.Background(), "q", []byte("x"))
		done <- err
	}()
	for n := <-srv.got; n != 3; n = <-srv.got {
	}
	cancelB()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("a publish in flight when another context ended: %v", err)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1: a connection was dropped", n)
	}
	// 4: a consume polling 3 s sets the connection's deadline 3.4 s
	// ahead; 5: a publish on it still times out after the client's
	// 400 ms (its deadline moved back), not 3.4 s.
	if _, err := c.Consume(context.Background(), "q", 0, 3*time.Second); err != nil {
		t.Fatalf("consume: %v", err)
	}
	start := time.Now()
	_, err = c.Publish(context.Background(), "q", []byte("x"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish to a silent server: %v, want the client's timeout", err)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Fatalf("the client's 400 ms timeout took %v: the long poll's deadline stayed", d)
	}
}
