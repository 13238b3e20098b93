package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The load generator's HTTP client is a lean keep-alive HTTP/1.1 client
// over net.Conn rather than net/http's: net/http's client costs 40–60 µs of
// CPU per request on a 2-core machine, more than the servers it measures,
// so it capped every figure and skewed the shares of the ceiling. Each
// worker goroutine owns one connection (a conn) and sends one request at a
// time on it: the whole request is one Write from a reused buffer, the
// response is read through the connection's bufio.Reader into a reused
// body buffer, and only what a scenario needs is decoded.

// Limits of the responses the client accepts.
const (
	maxHeaderLine = 64 << 10 // one status or header line
	maxBody       = 64 << 20 // one response body
	// idleSlack is added to a request's expected duration (a long-poll's
	// timeout) to bound how long it may take before it counts as failed.
	idleSlack = time.Minute
)

// errBadResponse marks a response the client cannot parse.
var errBadResponse = errors.New("bench: malformed HTTP response")

// client holds what the connections of one scenario share: where to dial,
// the Host header, the path prefix of the namespace and the token.
type client struct {
	cfg    Config
	dial   string // host:port
	host   string // Host header
	tls    *tls.Config
	prefix string // "/api/<namespace>/" (after the base URL's path)
	token  string
}

// newClient parses the base URL of cfg (http:// or https://, host, an
// optional path prefix).
func newClient(cfg Config) (*client, error) {
	addr := cfg.Addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("bench: server address %q: %w", cfg.Addr, err)
	}
	c := &client{cfg: cfg, host: u.Host, token: cfg.Token}
	port := "80"
	switch u.Scheme {
	case "http":
	case "https":
		port = "443"
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.TLS != nil {
			c.tls = cfg.TLS.Clone()
		}
		if c.tls.ServerName == "" {
			c.tls.ServerName = u.Hostname()
		}
	default:
		return nil, fmt.Errorf("bench: server address %q: scheme %q is neither http nor https", cfg.Addr, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("bench: server address %q has no host", cfg.Addr)
	}
	c.dial = u.Host
	if u.Port() == "" {
		c.dial = net.JoinHostPort(u.Hostname(), port)
	}
	c.prefix = strings.TrimRight(u.EscapedPath(), "/") + "/api/" + url.PathEscape(cfg.Namespace) + "/"
	return c, nil
}

// conn is one keep-alive HTTP/1.1 connection, used by one goroutine at a
// time. It dials on first use and again after any error or a response that
// closes the connection.
type conn struct {
	c    *client
	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte // the request being written
	body []byte // the last response's body; valid until the next request
	line []byte // a header line longer than br's buffer
	// served counts the requests answered on nc: a failure to read the
	// first byte of a response on a reused connection is retried once on a
	// new one (the server closed it while idle).
	served int
	// deadline is nc's current deadline, renewed when less than idleSlack/2
	// remains (setting a deadline per request would cost more).
	deadline time.Time
	// watched is the context whose cancellation aborts nc's current
	// request (it sets a past deadline); stopWatch unregisters it.
	watched   context.Context
	stopWatch func() bool
	scratch   []byte // a scenario's per-connection body buffer
	data      []byte // a consumed job's decoded data
}

func (c *client) conn() *conn {
	return &conn{c: c, wbuf: make([]byte, 0, 512)}
}

// close closes the connection (the conn can still be used: it redials).
func (cn *conn) close() {
	if cn.stopWatch != nil {
		cn.stopWatch()
		cn.stopWatch, cn.watched = nil, nil
	}
	if cn.nc != nil {
		_ = cn.nc.Close()
		cn.nc = nil
	}
}

func (cn *conn) connect(ctx context.Context) error {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: time.Minute}
	nc, err := d.DialContext(ctx, "tcp", cn.c.dial)
	if err != nil {
		return err
	}
	if cn.c.tls != nil {
		tc := tls.Client(nc, cn.c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return err
		}
		nc = tc
	}
	cn.nc, cn.served, cn.deadline = nc, 0, time.Time{}
	if cn.br == nil {
		cn.br = bufio.NewReaderSize(nc, 4096)
	} else {
		cn.br.Reset(nc)
	}
	return nil
}

// watch makes ctx's cancellation abort requests on nc. A connection keeps
// one registration while its goroutine uses the same context; a connection
// whose watcher may have fired is closed, never reused.
func (cn *conn) watch(ctx context.Context) {
	if ctx == cn.watched {
		return
	}
	if cn.stopWatch != nil {
		if !cn.stopWatch() {
			// The old context was cancelled: its deadline may land on nc.
			cn.stopWatch, cn.watched = nil, nil
			cn.close()
			return
		}
		cn.stopWatch, cn.watched = nil, nil
	}
	if ctx.Done() == nil || cn.nc == nil {
		return
	}
	nc := cn.nc
	cn.watched = ctx
	cn.stopWatch = context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
}

// do sends one request and reads its response: the status is returned, the
// body is in cn.body until the next request. path is appended to the
// namespace's prefix as is (the caller escapes it), then elem escaped (a
// job ID); query has no '?'. wait is how long the server may legitimately
// hold the request (a long-poll's timeout).
func (cn *conn) do(ctx context.Context, method, path string, elem []byte, query string, body []byte, wait time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cn.wbuf = cn.request(cn.wbuf[:0], method, path, elem, query, body)
	for attempt := 0; ; attempt++ {
		if cn.nc == nil {
			if err := cn.connect(ctx); err != nil {
				return 0, err
			}
		}
		cn.watch(ctx)
		if cn.nc == nil { // watch closed a connection a cancelled context may have poisoned
			continue
		}
		reused := cn.served > 0
		st, started, err := cn.roundTrip(wait)
		if err == nil {
			return st, nil
		}
		cn.close()
		if cerr := ctx.Err(); cerr != nil {
			return 0, fmt.Errorf("%w (%v)", cerr, err)
		}
		// A reused connection that fails before any byte of the response
		// was closed by the server while idle: retry once on a new one.
		if !reused || started || attempt > 0 || !retryable(err) {
			return 0, err
		}
	}
}

// retryable reports whether err is how a connection the server closed
// while idle fails.
func retryable(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// request appends an HTTP/1.1 request to b.
func (cn *conn) request(b []byte, method, path string, elem []byte, query string, body []byte) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, cn.c.prefix...)
	b = append(b, path...)
	b = appendPathEscaped(b, elem)
	if query != "" {
		b = append(b, '?')
		b = append(b, query...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, cn.c.host...)
	if cn.c.token != "" {
		b = append(b, "\r\nX-Token: "...)
		b = append(b, cn.c.token...)
	}
	if body != nil || method == "PUT" || method == "POST" {
		b = append(b, "\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
	}
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// roundTrip writes cn.wbuf and reads the response. started reports whether
// any byte of the response arrived.
func (cn *conn) roundTrip(wait time.Duration) (status int, started bool, err error) {
	if now := time.Now(); cn.deadline.Sub(now) < idleSlack/2+wait {
		cn.deadline = now.Add(idleSlack + wait)
		if err := cn.nc.SetDeadline(cn.deadline); err != nil {
			return 0, false, err
		}
	}
	if _, err := cn.nc.Write(cn.wbuf); err != nil {
		return 0, false, err
	}
	for {
		st, keep, started, err := cn.readResponse()
		if err != nil {
			return 0, started, err
		}
		if st >= 100 && st < 200 { // 100 Continue and other interim responses
			continue
		}
		cn.served++
		if !keep {
			cn.close()
		}
		return st, true, nil
	}
}

// readLine returns one line without its CRLF; the slice is valid until the
// next read.
func (cn *conn) readLine() ([]byte, error) {
	line, err := cn.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		cn.line = append(cn.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(cn.line) > maxHeaderLine {
				return nil, fmt.Errorf("%w: header line longer than %d bytes", errBadResponse, maxHeaderLine)
			}
			line, err = cn.br.ReadSlice('\n')
			cn.line = append(cn.line, line...)
		}
		line = cn.line
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readResponse reads one response into cn.body. keep reports whether the
// connection stays open.
func (cn *conn) readResponse() (status int, keep, started bool, err error) {
	line, err := cn.readLine()
	if err != nil {
		// Part of a line came (ErrUnexpectedEOF) or none at all.
		return 0, false, errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errBadResponse), err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, true, fmt.Errorf("%w: status line %q", errBadResponse, line)
	}
	keep = line[7] == '1' // HTTP/1.0 closes unless it says keep-alive
	status = 0
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return 0, false, true, fmt.Errorf("%w: status line %q", errBadResponse, line)
		}
		status = status*10 + int(d-'0')
	}
	length, chunked := int64(-1), false
	for {
		h, err := cn.readLine()
		if err != nil {
			return 0, false, true, err
		}
		if len(h) == 0 {
			break
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return 0, false, true, fmt.Errorf("%w: header %q", errBadResponse, h)
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case asciiEqualFold(name, "content-length"):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || (length >= 0 && n != length) {
				return 0, false, true, fmt.Errorf("%w: Content-Length %q", errBadResponse, value)
			}
			length = n
		case asciiEqualFold(name, "transfer-encoding"):
			if !hasToken(value, "chunked") {
				return 0, false, true, fmt.Errorf("%w: Transfer-Encoding %q", errBadResponse, value)
			}
			chunked = true
		case asciiEqualFold(name, "connection"):
			if hasToken(value, "close") {
				keep = false
			} else if hasToken(value, "keep-alive") {
				keep = true
			}
		}
	}
	cn.body = cn.body[:0]
	switch {
	case status < 200 || status == 204 || status == 304:
		// no body
	case chunked:
		if err := cn.readChunked(); err != nil {
			return 0, false, true, err
		}
	case length >= 0:
		if length > maxBody {
			return 0, false, true, fmt.Errorf("%w: body of %d bytes", errBadResponse, length)
		}
		cn.body = grow(cn.body, int(length))
		if _, err := io.ReadFull(cn.br, cn.body); err != nil {
			return 0, false, true, fmt.Errorf("reading body: %w", noEOF(err))
		}
	default: // the body ends when the server closes the connection
		keep = false
		if err := cn.readAll(); err != nil {
			return 0, false, true, err
		}
	}
	return status, keep, true, nil
}

// readChunked reads a chunked body (RFC 9112 §7.1) into cn.body.
func (cn *conn) readChunked() error {
	for {
		line, err := cn.readLine()
		if err != nil {
			return fmt.Errorf("reading chunk size: %w", noEOF(err))
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 32)
		if err != nil {
			return fmt.Errorf("%w: chunk size %q", errBadResponse, line)
		}
		if n == 0 {
			break
		}
		if len(cn.body)+int(n) > maxBody {
			return fmt.Errorf("%w: body over %d bytes", errBadResponse, maxBody)
		}
		off := len(cn.body)
		cn.body = grow(cn.body, off+int(n))
		if _, err := io.ReadFull(cn.br, cn.body[off:]); err != nil {
			return fmt.Errorf("reading chunk: %w", noEOF(err))
		}
		if crlf, err := cn.readLine(); err != nil || len(crlf) != 0 {
			return fmt.Errorf("%w: chunk not followed by CRLF", errBadResponse)
		}
	}
	for { // trailers, up to the empty line
		line, err := cn.readLine()
		if err != nil {
			return fmt.Errorf("reading trailers: %w", noEOF(err))
		}
		if len(line) == 0 {
			return nil
		}
	}
}

// readAll reads the body up to EOF into cn.body.
func (cn *conn) readAll() error {
	for {
		if len(cn.body) == cap(cn.body) {
			if len(cn.body) >= maxBody {
				return fmt.Errorf("%w: body over %d bytes", errBadResponse, maxBody)
			}
			cn.body = append(cn.body, 0)[:len(cn.body)]
		}
		n, err := cn.br.Read(cn.body[len(cn.body):cap(cn.body)])
		cn.body = cn.body[:len(cn.body)+n]
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// appendPathEscaped appends s to b as one path segment: bytes other than
// unreserved ones (RFC 3986) are percent-encoded.
func appendPathEscaped(b, s []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, c := range s {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return b
}

// grow returns b resized to n bytes, reusing its array when it is large
// enough.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n, max(n, 2*cap(b)))
}

// noEOF turns a premature EOF into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
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

// hasToken reports whether the comma-separated header value v holds the
// lower-case token tok, ignoring case.
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var part []byte
		part, v, _ = bytes.Cut(v, []byte(","))
		if asciiEqualFold(bytes.TrimSpace(part), tok) {
			return true
		}
	}
	return false
}
