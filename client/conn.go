package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The client's own HTTP/1.1 transport. net/http's client costs 40–50 µs of
// CPU per request on a 2-core machine (its connection goroutines, the
// request and response objects, header maps, the body's reader), four
// times what the server spends on a publish: through it the Go client
// published at 54 % of the rate of a bare keep-alive client and the
// Worker processed at 37 % (issue #34). So a client that was not given
// an *http.Client (WithHTTPClient) and whose server is not reached
// through a proxy (HTTP_PROXY...) sends its requests itself: keep-alive
// connections in a pool, each request rendered into the connection's
// reused buffer and written at once, the response read through the
// connection's bufio.Reader, with net/http's framing (Content-Length,
// chunked, Connection: close) and deadlines instead of goroutines for the
// request's context. The answers (status, headers, body) are what net/http
// would give the rest of the client.

// Limits of the responses the fast transport reads.
const (
	maxHeadBytes = 1 << 20 // status line and headers of one response
	// connIdleTimeout drops a pooled connection unused that long (the
	// server's IdleTimeout is longer by default).
	connIdleTimeout = 60 * time.Second
	maxIdleConns    = 128
	// checkIdle: a connection idle at least that long is checked (open)
	// before it is reused; one back in the pool for less, under load, is
	// not worth a system call per request (a server that closed it that
	// soon is met as by net/http: fastRoundTrip). It is short: net/http's
	// connection goroutine sees a server's close within microseconds and
	// sends the next request, even one that is not replayable (a publish
	// without a key), on a new connection; at 100 ms a publish 50 ms after
	// the server closed failed with EOF (conn_test.go, idle-close-publish).
	checkIdle = time.Millisecond
)

// aLongTimeAgo is a deadline in the past: it unblocks a connection's I/O.
var aLongTimeAgo = time.Unix(1, 0)

// fastTransport is the pool of connections to one server.
type fastTransport struct {
	addr   string // host:port to dial
	host   string // the Host header
	prefix string // the base URL's escaped path
	tls    *tls.Config
	dialer net.Dialer

	mu   sync.Mutex
	idle []*fastConn // most recently used last
}

// fastConn is one keep-alive connection.
type fastConn struct {
	nc   net.Conn
	raw  net.Conn // the TCP connection (under TLS)
	br   *bufio.Reader
	wbuf []byte
	// hbuf collects the values of the response headers the client reads
	// (respHead) while the head is read.
	hbuf []byte
	last time.Time // when it went back to the pool
	// deadline is nc's deadline: the latest request's (the client's
	// timeout, plus its long-poll), kept while the next requests' fall
	// within a slack of it, since setting one costs a system call's worth
	// of CPU per request (exchange).
	deadline time.Time

	// The caller's context is watched per connection, not per request:
	// one context.AfterFunc stays registered while the requests on the
	// connection come with the same context (a Worker's slots, a
	// goroutine's loop), instead of a registration per request. The
	// watcher cuts the connection's I/O only while a request of its
	// context is in flight (active); wmu orders the two.
	wmu       sync.Mutex
	active    <-chan struct{} // Done of the context of the request in flight
	poisoned  bool            // the watcher cut a request: the connection is not reused
	watchDone <-chan struct{} // Done of the context watched
	stopWatch func() bool
}

// newFastTransport returns the fast transport of base, or nil when the
// requests must go through net/http: a proxy applies to base.
func newFastTransport(base *url.URL, tlsCfg *tls.Config) *fastTransport {
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: base}); p != nil || err != nil {
		return nil
	}
	addr := base.Host
	if base.Port() == "" {
		port := "80"
		if base.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(base.Hostname(), port)
	}
	f := &fastTransport{addr: addr, host: base.Host, prefix: base.EscapedPath(),
		dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
	if base.Scheme == "https" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if tlsCfg != nil {
			cfg = tlsCfg.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = base.Hostname()
		}
		cfg.NextProtos = nil // HTTP/1.1 only, as the client's net/http transport
		f.tls = cfg
	}
	return f
}

// newFastConn wraps a dialed connection.
func newFastConn(nc, raw net.Conn) *fastConn {
	return &fastConn{nc: nc, raw: raw, br: bufio.NewReaderSize(nc, 4096), wbuf: make([]byte, 0, 1024)}
}

// watch makes the cancellation of ctx (whose Done is done) cut cn's I/O
// while one of its requests is in flight, reusing the registration of
// the connection's previous request when it came with the same context.
func (cn *fastConn) watch(ctx context.Context, done <-chan struct{}) {
	if cn.watchDone == done {
		return
	}
	if cn.stopWatch != nil {
		// The old watcher may be running: it cuts nothing, as no
		// request of its context is in flight.
		cn.stopWatch()
	}
	cn.watchDone = done
	cn.stopWatch = context.AfterFunc(ctx, func() {
		cn.wmu.Lock()
		if cn.active == done {
			_ = cn.nc.SetDeadline(aLongTimeAgo)
			cn.poisoned = true
		}
		cn.wmu.Unlock()
	})
}

// close closes cn and drops its context's watcher.
func (cn *fastConn) close() {
	if cn.stopWatch != nil {
		cn.stopWatch()
		cn.stopWatch, cn.watchDone = nil, nil
	}
	_ = cn.nc.Close()
}

// get returns a pooled connection that is still open, or a new one
// dialed before due; reused tells which.
func (f *fastTransport) get(ctx context.Context, due time.Time) (cn *fastConn, reused bool, err error) {
	now := time.Now()
	for {
		f.mu.Lock()
		n := len(f.idle)
		if n == 0 {
			f.mu.Unlock()
			break
		}
		cn = f.idle[n-1]
		f.idle[n-1] = nil
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		idle := now.Sub(cn.last)
		if idle < connIdleTimeout && (idle < checkIdle && cn.br.Buffered() == 0 || cn.open()) {
			return cn, true, nil
		}
		cn.close()
	}
	// Dialing and the TLS handshake are bounded by the request's
	// deadline (the client's timeout) as well as by ctx.
	dctx, cancel := context.WithDeadline(ctx, due)
	defer cancel()
	raw, err := f.dialer.DialContext(dctx, "tcp", f.addr)
	if err != nil {
		return nil, false, err
	}
	nc := raw
	if f.tls != nil {
		tc := tls.Client(raw, f.tls)
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = raw.Close()
			return nil, false, err
		}
		nc = tc
	}
	return newFastConn(nc, raw), false, nil
}

// open reports whether an idle connection is still open: the server did
// not close it (nor send anything, which it may not between requests).
func (cn *fastConn) open() bool {
	return cn.br.Buffered() == 0 && peerOpen(cn.raw)
}

// put returns cn to the pool.
func (f *fastTransport) put(cn *fastConn) {
	cn.last = time.Now()
	f.mu.Lock()
	if len(f.idle) < maxIdleConns {
		f.idle = append(f.idle, cn)
		cn = nil
	}
	f.mu.Unlock()
	if cn != nil {
		cn.close()
	}
}

// fastResult is what one exchange gave.
type fastResult struct {
	status int
	head   respHead
	body   []byte
	// keep: the connection may carry another request.
	keep bool
}

// errReusedClosed is a pooled connection that the server closed before it
// answered anything.
var errReusedClosed = errors.New("kairos: the server closed a kept-alive connection")

// fastRoundTrip sends r and reads its answer; due is when the request
// times out (the client's timeout after its long-poll).
func (t *transport) fastRoundTrip(ctx context.Context, r *request, due time.Time) (fastResult, error) {
	f := t.fast
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fastResult{}, err
		}
		cn, reused, err := f.get(ctx, due)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				// A dial or handshake the context ended: net/http
				// answers the context's error, not the dial's timeout.
				err = ctx.Err()
			case !time.Now().Before(due):
				err = context.DeadlineExceeded // the client's timeout
			}
			return fastResult{}, err
		}
		res, err := t.exchange(ctx, cn, r, due)
		if err == nil {
			return res, nil
		}
		cn.close()
		// A kept-alive connection the server closed under the request
		// (its idle timeout, a restart) before answering: net/http
		// retries such a request on a new connection when it is
		// replayable; so does this.
		if reused && errors.Is(err, errReusedClosed) && attempt == 0 && (r.idempotent || r.method == http.MethodGet) && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errReusedClosed) {
			err = io.EOF
		}
		return res, err
	}
}

// exchange is one request and its answer on cn; cn goes back to the pool
// when it can carry the next one (on an error the caller closes it).
//
// The request's deadline is not a context.WithTimeout of its own, whose
// timer and cancellation cost more CPU than the rest of a publish: the
// connection's deadline is due (the client's timeout), or up to 1/16 of
// the request's time bound later when the previous request on the
// connection set it there, and the caller's context is watched by the
// connection (fastConn.watch). What the caller sees is net/http's:
// ctx.Err() when ctx ended, context.DeadlineExceeded when the client's
// timeout passed.
func (t *transport) exchange(ctx context.Context, cn *fastConn, r *request, due time.Time) (res fastResult, err error) {
	if err := cn.setDue(r.wait+t.timeout, due); err != nil {
		return res, err
	}
	done := cn.begin(ctx)
	defer func() { err = t.end(ctx, cn, done, &res, err, due) }()
	if err := ctx.Err(); err != nil {
		return res, err // ended before the watcher was in place
	}
	b, err := t.appendRequest(cn.wbuf[:0], ctx, r)
	if err != nil {
		return res, err
	}
	bodyApart := len(r.body) > 16<<10
	if !bodyApart {
		b = append(b, r.body...)
	}
	cn.wbuf = b[:0]
	if cap(b) > 64<<10 {
		cn.wbuf = nil // a large buffer is not kept
	}
	if _, err := cn.nc.Write(b); err != nil {
		if isReset(err) {
			err = errReusedClosed // the server closed it first
		}
		return res, err
	}
	if bodyApart {
		if _, err := cn.nc.Write(r.body); err != nil {
			return res, err
		}
	}
	return cn.readResponse(r.method)
}

// setDue moves cn's deadline to due (a request's time bound, bound, after
// now), unless it already lies within 1/16 of bound after due.
func (cn *fastConn) setDue(bound time.Duration, due time.Time) error {
	if slack := bound >> 4; cn.deadline.Before(due) || cn.deadline.Sub(due) > slack {
		cn.deadline = due.Add(slack)
		return cn.nc.SetDeadline(cn.deadline)
	}
	return nil
}

// begin makes ctx's end cut cn's I/O from now on (after the deadline is
// set, so that the watcher's cut is never undone by it) and returns its
// Done.
func (cn *fastConn) begin(ctx context.Context) <-chan struct{} {
	done := ctx.Done()
	if done != nil {
		cn.watch(ctx, done)
		cn.wmu.Lock()
		cn.active = done
		cn.wmu.Unlock()
	}
	return done
}

// end ends an exchange on cn that began (begin) with done: it returns
// the exchange's error as net/http would report it, and cn to the pool
// when it can carry another request; on an error the caller closes cn.
func (t *transport) end(ctx context.Context, cn *fastConn, done <-chan struct{}, res *fastResult, err error, due time.Time) error {
	keep := err == nil
	if done != nil {
		cn.wmu.Lock()
		cn.active = nil
		keep = keep && !cn.poisoned
		cn.wmu.Unlock()
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = ctx.Err() // as net/http reports it
	case isTimeout(err) && !time.Now().Before(due):
		err = context.DeadlineExceeded // as net/http reports the client's timeout
	}
	if err != nil {
		return err // the caller closes cn
	}
	if keep && res.keep {
		t.fast.put(cn)
	} else {
		cn.close()
	}
	return nil
}

// errPairUnsent is the second request of a pair (fastPair) that the
// server did not serve: it closed the connection after the first answer.
var errPairUnsent = errors.New("kairos: the server closed the connection after the first request of a pair")

// fastPair sends a, then b, on one connection with one write (HTTP/1.1
// pipelining, which the server's event loops serve in one pass) and reads
// their answers in turn: first gets a's as soon as it is read, then
// fastPair returns b's. When a's answer was not read, first is not
// called and the error is returned (b's fate is unknown); errPairUnsent
// when the server closed the connection after a's answer (b was not
// served). ctx is b's, watched for the pair (a's, actx, must not end
// sooner: an ACK's, without cancellation); bodies are sent with their
// heads, so a and b must have small ones (ACKs and consumes have none).
func (t *transport) fastPair(actx, ctx context.Context, a, b *request, first func(fastResult)) (fastResult, error) {
	f := t.fast
	now := time.Now()
	dueA, dueB := now.Add(a.wait+t.timeout), now.Add(b.wait+t.timeout)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fastResult{}, err
		}
		cn, reused, err := f.get(ctx, dueA)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fastResult{}, err
		}
		read := false
		res, err := t.exchangePair(actx, ctx, cn, a, b, dueA, dueB, func(r fastResult) { read = true; first(r) })
		if err == nil {
			return res, nil
		}
		cn.close()
		// A kept-alive connection the server closed before it
		// answered anything: both go again on a new one, as net/http
		// sends a replayable request again (an ACK is idempotent, a
		// consume a GET).
		if !read && reused && errors.Is(err, errReusedClosed) && attempt == 0 && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errReusedClosed) {
			err = io.EOF
		}
		return res, err
	}
}

// exchangePair is fastPair's exchange of a and b on cn.
func (t *transport) exchangePair(actx, ctx context.Context, cn *fastConn, a, b *request, dueA, dueB time.Time, first func(fastResult)) (res fastResult, err error) {
	if err := cn.setDue(a.wait+t.timeout, dueA); err != nil {
		return res, err
	}
	due := dueA
	done := cn.begin(ctx)
	defer func() { err = t.end(ctx, cn, done, &res, err, due) }()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	w, err := t.appendRequest(cn.wbuf[:0], actx, a)
	if err != nil {
		return res, err
	}
	w = append(w, a.body...)
	if w, err = t.appendRequest(w, ctx, b); err != nil {
		return res, err
	}
	w = append(w, b.body...)
	cn.wbuf = w[:0]
	if cap(w) > 64<<10 {
		cn.wbuf = nil
	}
	if _, err := cn.nc.Write(w); err != nil {
		if isReset(err) {
			err = errReusedClosed
		}
		return res, err
	}
	ra, err := cn.readResponse(a.method)
	if err != nil {
		return res, err
	}
	first(ra)
	if !ra.keep {
		return res, errPairUnsent
	}
	due = dueB
	if err := cn.setDue(b.wait+t.timeout, dueB); err != nil {
		return res, err
	}
	res, err = cn.readResponse(b.method)
	if errors.Is(err, errReusedClosed) {
		// The server closed the connection after a's answer: as
		// net/http, b counts as not served.
		err = errPairUnsent
	}
	return res, err
}

// isTimeout reports whether err is a connection's deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isReset reports whether err is the server resetting the connection.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// appendRequest renders r's head (request line and headers) as net/http
// would send it.
func (t *transport) appendRequest(b []byte, ctx context.Context, r *request) ([]byte, error) {
	f := t.fast
	b = append(b, r.method...)
	b = append(b, ' ')
	b = append(b, f.prefix...)
	b = append(b, r.path...)
	for _, p := range r.tail {
		b = append(b, p...)
	}
	if len(r.query) > 0 || r.params.n > 0 {
		b = append(b, '?')
		b = r.appendQuery(b)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, f.host...)
	b = append(b, "\r\n"...)
	head, err := t.headText()
	if err != nil {
		return nil, err
	}
	b = append(b, head...)
	if r.headText != "" {
		b = append(b, r.headText...)
	} else if b, err = appendHeader(b, r.header); err != nil {
		return nil, err
	}
	if t.headerHook != nil {
		h := make(http.Header)
		t.headerHook(ctx, h)
		if b, err = appendHeader(b, h); err != nil {
			return nil, err
		}
	}
	if r.form {
		b = append(b, "Content-Type: application/x-www-form-urlencoded\r\n"...)
	}
	if t.basicAuth {
		b = append(b, "Authorization: Basic "...)
		b = base64.StdEncoding.AppendEncode(b, []byte(t.user+":"+t.pass))
		b = append(b, "\r\n"...)
	}
	if r.body != nil {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(r.body)), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...), nil
}

// appendHeader appends h's lines, or fails on one net/http would refuse.
func appendHeader(b []byte, h http.Header) ([]byte, error) {
	for k, vs := range h {
		for _, v := range vs {
			if !validHeader(k, v) {
				return nil, argError("invalid header %s: %q", k, v)
			}
			b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
		}
	}
	return b, nil
}

// headText is the client's own headers (User-Agent, X-Token), rendered
// once: they do not change after New.
func (t *transport) headText() (string, error) {
	t.headOnce.Do(func() {
		b, err := appendHeader(nil, t.header)
		t.head, t.headErr = string(b), err
	})
	return t.head, t.headErr
}

// validHeader reports whether a header can be written as is (net/http
// refuses the others).
func validHeader(k, v string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c == ':' || c >= 0x7f {
			return false
		}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// respHead holds what the client reads of a response's headers: the
// first value of each (trimmed, as net/http does), or nil.
type respHead struct {
	requestID, retryAfter, traceParent, traceState []byte
}

// wantedHeaders are the headers of respHead, lower-case.
var wantedHeaders = [...]string{"x-request-id", "retry-after", "traceparent", "tracestate"}

// field returns the value of wantedHeaders[i].
func (h *respHead) field(i int) *[]byte {
	switch i {
	case 0:
		return &h.requestID
	case 1:
		return &h.retryAfter
	case 2:
		return &h.traceParent
	default:
		return &h.traceState
	}
}

// headOf is the respHead of a net/http response's headers.
func headOf(h http.Header) respHead {
	var rh respHead
	for i, k := range wantedHeaders {
		if vs := h.Values(k); len(vs) > 0 {
			*rh.field(i) = []byte(vs[0])
		}
	}
	return rh
}

// readResponse reads one response to a request of method: its status,
// the headers of respHead and its body, and whether the connection may
// carry another request (res.keep). A connection that ends before the
// first byte of the answer is errReusedClosed. The wanted headers' values
// share the body's allocation: a 204 without them allocates nothing.
func (cn *fastConn) readResponse(method string) (res fastResult, err error) {
	br := cn.br
	var (
		found                                      [len(wantedHeaders)]struct{ off, end int }
		length                                     int64
		lengths, encodings                         int
		chunked, sawClose, sawKeepAlive, badLength bool
	)
	for {
		line, err := readLine(br)
		if err != nil {
			if len(line) == 0 && (errors.Is(err, io.EOF) || isReset(err)) {
				return res, errReusedClosed
			}
			return res, err
		}
		// "HTTP/1.1 200 OK"
		if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
			return res, fmt.Errorf("kairos: malformed status line %q", line)
		}
		code := 0
		for _, d := range line[9:12] {
			if d < '0' || d > '9' {
				return res, fmt.Errorf("kairos: malformed status line %q", line)
			}
			code = code*10 + int(d-'0')
		}
		if code < 100 || len(line) > 12 && line[12] != ' ' {
			return res, fmt.Errorf("kairos: malformed status line %q", line)
		}
		res.keep = line[7] == '1'
		res.status = code
		cn.hbuf = cn.hbuf[:0]
		found = [len(wantedHeaders)]struct{ off, end int }{}
		lengths, encodings, chunked, sawClose, sawKeepAlive, badLength = 0, 0, false, false, false, false
		size := len(line)
		for {
			line, err := readLine(br)
			if err != nil {
				return res, err
			}
			if len(line) == 0 {
				break
			}
			if size += len(line); size > maxHeadBytes {
				return res, errors.New("kairos: response head too large")
			}
			k, v, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				return res, fmt.Errorf("kairos: malformed header line %q", line)
			}
			v = trimHeaderSpace(v)
			switch {
			case asciiEqualFold(k, "content-length"):
				n, err := strconv.ParseInt(string(v), 10, 64)
				if lengths == 0 {
					length, badLength = n, err != nil || n < 0
				}
				lengths++
			case asciiEqualFold(k, "transfer-encoding"):
				encodings++
				chunked = asciiEqualFold(v, "chunked")
			case asciiEqualFold(k, "connection"):
				sawClose = sawClose || hasToken(v, "close")
				sawKeepAlive = sawKeepAlive || hasToken(v, "keep-alive")
			default:
				for i, name := range wantedHeaders {
					if found[i].end == 0 && asciiEqualFold(k, name) {
						found[i].off = len(cn.hbuf)
						cn.hbuf = append(cn.hbuf, v...)
						found[i].end = len(cn.hbuf) + 1 // +1: found, even empty
						break
					}
				}
			}
		}
		if code >= 200 || code == http.StatusSwitchingProtocols {
			break
		}
		// 1xx: the answer follows.
	}
	// As net/http (shouldClose): "close" among the Connection header's
	// tokens, in any case, ends the connection; an HTTP/1.0 answer keeps
	// it only with "keep-alive".
	if sawClose {
		res.keep = false
	} else if !res.keep && sawKeepAlive {
		res.keep = true
	}
	// meta gives the wanted headers' values their place in buf, after
	// the body.
	meta := func(buf []byte) {
		copy(buf, cn.hbuf)
		for i, f := range found {
			if f.end != 0 {
				*res.head.field(i) = buf[f.off : f.end-1 : f.end-1]
			}
		}
		if cap(cn.hbuf) > 4<<10 {
			cn.hbuf = nil
		}
	}
	switch {
	case method == http.MethodHead || res.status == http.StatusNoContent || res.status == http.StatusNotModified || res.status < 200:
		if len(cn.hbuf) > 0 {
			meta(make([]byte, len(cn.hbuf)))
		}
		return res, nil
	case encodings > 0:
		if encodings != 1 || !chunked {
			return res, fmt.Errorf("kairos: unsupported Transfer-Encoding")
		}
		body, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(br), maxBodyRead))
		if err != nil {
			return res, err
		}
		if len(body) >= maxBodyRead {
			res.keep = false
		}
		res.body = body
		meta(make([]byte, len(cn.hbuf)))
		return res, nil
	case lengths > 0:
		if badLength {
			return res, fmt.Errorf("kairos: malformed Content-Length")
		}
		n := length
		if n > maxBodyRead {
			res.body, err = io.ReadAll(io.LimitReader(br, maxBodyRead))
			res.keep = false
			meta(make([]byte, len(cn.hbuf)))
			return res, err
		}
		buf := make([]byte, int(n)+len(cn.hbuf))
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return res, err
		}
		res.body = buf[:n:n]
		meta(buf[n:])
		return res, nil
	default:
		// The body ends with the connection.
		res.body, err = io.ReadAll(io.LimitReader(br, maxBodyRead))
		res.keep = false
		meta(make([]byte, len(cn.hbuf)))
		return res, err
	}
}

// trimHeaderSpace trims a header value as net/textproto does.
func trimHeaderSpace(v []byte) []byte {
	for len(v) > 0 && isHeaderSpace(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isHeaderSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	return v
}

func isHeaderSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// asciiEqualFold reports whether b equals the lower-case ASCII s, in any
// case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds the
// lower-case token, in any case.
func hasToken(v []byte, token string) bool {
	for {
		t, rest, more := bytes.Cut(v, []byte(","))
		if asciiEqualFold(trimHeaderSpace(t), token) {
			return true
		}
		if !more {
			return false
		}
		v = rest
	}
}

// readLine reads one CRLF- (or LF-) terminated line, without it.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return line, errors.New("kairos: response line too long")
	}
	if err != nil {
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}
