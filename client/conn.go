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
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
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
	last time.Time // when it went back to the pool
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

// get returns a pooled connection that is still open, or a new one;
// reused tells which.
func (f *fastTransport) get(ctx context.Context) (cn *fastConn, reused bool, err error) {
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
		_ = cn.nc.Close()
	}
	raw, err := f.dialer.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, false, err
	}
	nc := raw
	if f.tls != nil {
		tc := tls.Client(raw, f.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, false, err
		}
		nc = tc
	}
	return &fastConn{nc: nc, raw: raw, br: bufio.NewReaderSize(nc, 4096), wbuf: make([]byte, 0, 1024)}, false, nil
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
		_ = cn.nc.Close()
	}
}

// fastResult is what one exchange gave.
type fastResult struct {
	status int
	header http.Header
	body   []byte
}

// errReusedClosed is a pooled connection that the server closed before it
// answered anything.
var errReusedClosed = errors.New("kairos: the server closed a kept-alive connection")

// fastRoundTrip sends r and reads its answer; ctx is parent with the
// request's deadline.
func (t *transport) fastRoundTrip(parent, ctx context.Context, r request) (fastResult, error) {
	f := t.fast
	for attempt := 0; ; attempt++ {
		cn, reused, err := f.get(ctx)
		if err != nil {
			if ctx.Err() != nil {
				// A dial or handshake the context ended: net/http
				// answers the context's error, not the dial's timeout.
				err = ctx.Err()
			}
			return fastResult{}, err
		}
		res, err := t.exchange(parent, ctx, cn, r)
		if err == nil {
			return res, nil
		}
		_ = cn.nc.Close()
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
// when it can carry the next one.
func (t *transport) exchange(parent, ctx context.Context, cn *fastConn, r request) (res fastResult, err error) {
	deadline, _ := ctx.Deadline()
	_ = cn.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		stop()
		var ne net.Error
		switch {
		case err == nil:
		case ctx.Err() != nil:
			err = ctx.Err() // as net/http reports it
		case errors.As(err, &ne) && ne.Timeout() && !deadline.IsZero() && !time.Now().Before(deadline):
			// The connection's deadline passed a moment before ctx's
			// timer fires: answer as net/http does, once ctx is done.
			<-ctx.Done()
			err = ctx.Err()
		}
	}()
	b, err := t.appendRequest(cn.wbuf[:0], parent, r)
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
	res, keep, err := readResponse(cn.br, r.method)
	if err != nil {
		return res, err
	}
	// stop false: the context ended as the answer came, and its deadline
	// may be set on cn: not reused.
	if stop() && keep {
		t.fast.put(cn)
	} else {
		_ = cn.nc.Close()
	}
	return res, nil
}

// isReset reports whether err is the server resetting the connection.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// appendRequest renders r's head (request line and headers) as net/http
// would send it.
func (t *transport) appendRequest(b []byte, parent context.Context, r request) ([]byte, error) {
	f := t.fast
	b = append(b, r.method...)
	b = append(b, ' ')
	b = append(b, f.prefix...)
	b = append(b, r.path...)
	if len(r.query) > 0 {
		b = append(b, '?')
		b = append(b, r.query.Encode()...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, f.host...)
	b = append(b, "\r\n"...)
	var err error
	add := func(h http.Header) {
		for k, vs := range h {
			for _, v := range vs {
				if !validHeader(k, v) {
					err = argError("invalid header %s: %q", k, v)
					return
				}
				b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
			}
		}
	}
	add(t.header)
	add(r.header)
	if t.headerHook != nil {
		h := make(http.Header)
		t.headerHook(parent, h)
		add(h)
	}
	if err != nil {
		return nil, err
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

// readResponse reads one response to a request of method: its status,
// headers and body, and whether the connection may carry another request.
// A connection that ends before the first byte of the answer is
// errReusedClosed.
func readResponse(br *bufio.Reader, method string) (res fastResult, keep bool, err error) {
	for {
		line, err := readLine(br)
		if err != nil {
			if len(line) == 0 && (errors.Is(err, io.EOF) || isReset(err)) {
				return res, false, errReusedClosed
			}
			return res, false, err
		}
		// "HTTP/1.1 200 OK"
		if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
			return res, false, fmt.Errorf("kairos: malformed status line %q", line)
		}
		code, err := strconv.Atoi(string(line[9:12]))
		if err != nil || code < 100 || len(line) > 12 && line[12] != ' ' {
			return res, false, fmt.Errorf("kairos: malformed status line %q", line)
		}
		keep = line[7] == '1'
		res.status = code
		res.header = make(http.Header, 8)
		size := len(line)
		for {
			line, err := readLine(br)
			if err != nil {
				return res, false, err
			}
			if len(line) == 0 {
				break
			}
			if size += len(line); size > maxHeadBytes {
				return res, false, errors.New("kairos: response head too large")
			}
			k, v, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				return res, false, fmt.Errorf("kairos: malformed header line %q", line)
			}
			key := textproto.CanonicalMIMEHeaderKey(string(k))
			res.header[key] = append(res.header[key], string(bytes.TrimSpace(v)))
		}
		if code >= 200 || code == http.StatusSwitchingProtocols {
			break
		}
		// 1xx: the answer follows.
	}
	h := res.header
	// As net/http (shouldClose): "close" among the Connection header's
	// tokens, in any case, ends the connection; an HTTP/1.0 answer keeps
	// it only with "keep-alive".
	if hasToken(h["Connection"], "close") {
		keep = false
	} else if !keep && hasToken(h["Connection"], "keep-alive") {
		keep = true
	}
	switch {
	case method == http.MethodHead || res.status == http.StatusNoContent || res.status == http.StatusNotModified || res.status < 200:
		return res, keep, nil
	case len(h["Transfer-Encoding"]) > 0:
		if len(h["Transfer-Encoding"]) != 1 || !strings.EqualFold(h.Get("Transfer-Encoding"), "chunked") {
			return res, false, fmt.Errorf("kairos: unsupported Transfer-Encoding %q", h["Transfer-Encoding"])
		}
		res.body, err = io.ReadAll(io.LimitReader(httputil.NewChunkedReader(br), maxBodyRead))
		if err != nil {
			return res, false, err
		}
		if len(res.body) >= maxBodyRead {
			keep = false
		}
		delete(h, "Transfer-Encoding")
		return res, keep, nil
	case len(h["Content-Length"]) > 0:
		n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
		if err != nil || n < 0 {
			return res, false, fmt.Errorf("kairos: malformed Content-Length %q", h.Get("Content-Length"))
		}
		if n > maxBodyRead {
			res.body, err = io.ReadAll(io.LimitReader(br, maxBodyRead))
			return res, false, err
		}
		res.body = make([]byte, n)
		if _, err := io.ReadFull(br, res.body); err != nil {
			return res, false, err
		}
		return res, keep, nil
	default:
		// The body ends with the connection.
		res.body, err = io.ReadAll(io.LimitReader(br, maxBodyRead))
		return res, false, err
	}
}

// hasToken reports whether the comma-separated lists vs hold token, in
// any case.
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for {
			t, rest, more := strings.Cut(v, ",")
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
			if !more {
				break
			}
			v = rest
		}
	}
	return false
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
