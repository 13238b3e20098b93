package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds every request that does not long-poll; a
	// consume's deadline is its long-poll timeout plus this.
	DefaultTimeout = 30 * time.Second
	// DefaultRetries is how many times a request is retried when retrying
	// cannot create a duplicate.
	DefaultRetries = 3
	// DefaultRetryBackoff is the first pause between two attempts; it
	// doubles (with jitter) up to DefaultMaxRetryBackoff.
	DefaultRetryBackoff = 50 * time.Millisecond
	// DefaultMaxRetryBackoff caps the pause between two attempts.
	DefaultMaxRetryBackoff = 2 * time.Second
	// maxBodyRead caps how much of a response body the client reads
	// (a batch of 100 jobs of 1 MiB, base64-encoded, fits).
	maxBodyRead = 256 << 20
)

// settings collect what Options set; New and NewAdmin read them.
type settings struct {
	namespace  string
	token      string
	user, pass string
	basicAuth  bool
	httpClient *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	userAgent  string
	// tlsConfig is WithTLSConfig's, with caFile's CAs as its RootCAs.
	tlsConfig *tls.Config
	caFile    string
	// publishKeys: every publish without a JobKey gets a generated one.
	publishKeys bool
	// headerHook is WithRequestHeaders's.
	headerHook func(ctx context.Context, h http.Header)
}

// Option configures a Client or an Admin client.
type Option func(*settings) error

// WithNamespace sets the namespace every job call of a Client works in.
func WithNamespace(namespace string) Option {
	return func(s *settings) error {
		if namespace == "" {
			return argError("empty namespace")
		}
		s.namespace = namespace
		return nil
	}
}

// WithToken sets the token sent in X-Token: "secret", or "pool:secret" for
// a namespace that lives in another pool than "default".
func WithToken(token string) Option {
	return func(s *settings) error { s.token = token; return nil }
}

// WithBasicAuth sets the admin API's basic-auth account (used by Admin only;
// needed when the server's [Accounts] is not empty).
func WithBasicAuth(user, password string) Option {
	return func(s *settings) error { s.user, s.pass, s.basicAuth = user, password, true; return nil }
}

// WithHTTPClient makes the client send its requests through hc (its
// Transport, Jar and redirect policy). hc.Timeout is not used as is: every
// request gets its own deadline (see WithTimeout), so that a long-poll is
// never cut short; a non-zero hc.Timeout becomes the default of WithTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(s *settings) error {
		if hc == nil {
			return argError("nil http client")
		}
		s.httpClient = hc
		return nil
	}
}

// WithTLSConfig makes the client use cfg for https:// servers (a client
// certificate, a ServerName, a pool of trusted CAs...). It applies to the
// client's own transport or, with WithHTTPClient, to a copy of that
// client's *http.Transport (its other settings kept); a transport of
// another type cannot take it and New fails.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(s *settings) error {
		if cfg == nil {
			return argError("nil TLS config")
		}
		s.tlsConfig = cfg
		return nil
	}
}

// WithCAFile makes the client trust the certificate authorities of the
// PEM file path, and only them, for https:// servers: the CA of a server
// whose certificate is not signed by a public authority. It combines with
// WithTLSConfig (it sets that config's RootCAs) and, like it, with
// WithHTTPClient. New fails when the file cannot be read or holds no
// certificate.
func WithCAFile(path string) Option {
	return func(s *settings) error {
		if path == "" {
			return argError("empty CA file name")
		}
		s.caFile = path
		return nil
	}
}

// clientTLS returns the TLS configuration of WithTLSConfig and
// WithCAFile, or nil when neither was given.
func (s *settings) clientTLS() (*tls.Config, error) {
	if s.tlsConfig == nil && s.caFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.tlsConfig != nil {
		cfg = s.tlsConfig.Clone()
	}
	if s.caFile != "" {
		pool, err := LoadCAFile(s.caFile)
		if err != nil {
			return nil, argError("%v", err)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// LoadCAFile reads the certificate authorities of a PEM file into a new
// pool: what WithCAFile trusts.
func LoadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// WithTimeout bounds each request that does not long-poll (default
// DefaultTimeout). A consume waits up to its long-poll timeout plus d, so
// the HTTP deadline always exceeds the long-poll timeout.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return argError("timeout must be > 0")
		}
		s.timeout = d
		return nil
	}
}

// WithRetry sets how many times a request is retried (0 = never) and the
// backoff: the first pause, doubled with jitter after each attempt up to
// maxBackoff, or the server's Retry-After when longer (at most 30 s). Only
// requests that cannot create duplicates are retried: any request whose
// connection was refused before anything was sent; idempotent ones (peeks,
// sizes, ACK, token and limit reads, publishes with a job key) also after a
// network error or a 5xx but 507 (a full pool: ErrPoolFull, which a retry
// soon after meets again); consumes also after a 503 (Redis unavailable: a
// job a failed consume took comes back after its TTR). Publishes without a
// job key are never re-sent once sent, as a lost answer could publish a job
// twice: see WithPublishKeys.
func WithRetry(retries int, backoff, maxBackoff time.Duration) Option {
	return func(s *settings) error {
		if retries < 0 || backoff < 0 || maxBackoff < backoff {
			return argError("invalid retry settings (retries %d, backoff %v, max %v)", retries, backoff, maxBackoff)
		}
		s.retries, s.backoff, s.maxBackoff = retries, backoff, maxBackoff
		return nil
	}
}

// WithPublishKeys makes every Publish and RePublish that has no JobKey
// carry one the client generates (random, 26 characters), so that a
// publish is safe to retry like any idempotent request: after a network
// error, a 503 (Redis unavailable) or a 503 "the job may exist" (a write
// that the server's WaitReplicas could not confirm), the retry finds the
// key and answers the first job's ID instead of publishing a duplicate (on
// a WaitReplicas pool, once the replicas confirm it; until then the
// retries answer ErrMayExist with that ID).
// The cost is the server's slower path for keyed publishes (no batching);
// use it where duplicates matter, e.g. with pools that set WaitReplicas.
// BatchPublish takes no job key and is never re-sent.
func WithPublishKeys() Option {
	return func(s *settings) error { s.publishKeys = true; return nil }
}

// WithRequestHeaders makes the client call f with the caller's context and
// the headers of every request it sends, just before it sends it: where
// headers that depend on the context go. Package client/otelclient uses it
// to send the caller's W3C trace context (otelclient.Propagate), so that
// this package needs nothing beyond the standard library. f must be safe
// for concurrent use and must not keep h.
func WithRequestHeaders(f func(ctx context.Context, h http.Header)) Option {
	return func(s *settings) error {
		if f == nil {
			return argError("nil request header function")
		}
		s.headerHook = f
		return nil
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(s *settings) error { s.userAgent = ua; return nil }
}

// transport is the HTTP plumbing shared by Client and Admin.
type transport struct {
	base       *url.URL // scheme://host[:port][/prefix], no trailing slash
	hc         *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	header     http.Header // added to every request
	user, pass string
	basicAuth  bool
	headerHook func(ctx context.Context, h http.Header)
	// fast, when set, sends the requests instead of hc (conn.go).
	fast *fastTransport
	// head is header rendered once for the fast transport (headText).
	headOnce sync.Once
	head     string
	headErr  error
}

// newTransport parses addr ("host:port", "http://host:port",
// "https://host/prefix") and applies opts.
func newTransport(addr string, opts []Option) (*transport, *settings, error) {
	s := &settings{retries: DefaultRetries, backoff: DefaultRetryBackoff, maxBackoff: DefaultMaxRetryBackoff}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, nil, err
		}
	}
	base, err := parseAddr(addr)
	if err != nil {
		return nil, nil, err
	}
	t := &transport{
		base: base, retries: s.retries, backoff: s.backoff, maxBackoff: s.maxBackoff,
		header: make(http.Header), user: s.user, pass: s.pass, basicAuth: s.basicAuth,
		headerHook: s.headerHook,
	}
	tlsCfg, err := s.clientTLS()
	if err != nil {
		return nil, nil, err
	}
	if s.httpClient != nil {
		hc := *s.httpClient
		if s.timeout == 0 && hc.Timeout > 0 {
			s.timeout = hc.Timeout
		}
		hc.Timeout = 0
		if tlsCfg != nil {
			// A copy of the caller's transport: theirs stays as it was.
			var tr *http.Transport
			switch rt := hc.Transport.(type) {
			case nil:
				tr = http.DefaultTransport.(*http.Transport).Clone()
			case *http.Transport:
				tr = rt.Clone()
			default:
				return nil, nil, argError("WithTLSConfig or WithCAFile needs an *http.Transport in WithHTTPClient, not %T", rt)
			}
			tr.TLSClientConfig = tlsCfg
			hc.Transport = tr
		}
		t.hc = &hc
	} else {
		tr := newHTTPTransport()
		tr.TLSClientConfig = tlsCfg
		t.hc = &http.Client{Transport: tr}
		t.fast = newFastTransport(base, tlsCfg)
	}
	t.timeout = s.timeout
	if t.timeout == 0 {
		t.timeout = DefaultTimeout
	}
	if s.userAgent != "" {
		t.header.Set("User-Agent", s.userAgent)
	} else {
		t.header.Set("User-Agent", "kairos-go-client")
	}
	return t, s, nil
}

// newHTTPTransport is a transport sized for many concurrent long-polls.
func newHTTPTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

func parseAddr(addr string) (*url.URL, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return nil, argError("empty server address")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, argError("server address %q: %v", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, argError("server address %q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return nil, argError("server address %q has no host", addr)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, argError("server address %q: no query, fragment or user info allowed", addr)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// request is one API call.
type request struct {
	method string
	// path, then tail's parts, is the escaped path from the base URL's
	// path on: /api/ns/q (fullPath). The hot calls leave the parts apart
	// so that the fast transport writes them without joining them.
	path string
	tail [3]string
	// query, then params, are the query parameters: params for the hot
	// calls (no map, no sorting, no allocation), query for the others.
	query  url.Values
	params params
	body   []byte
	header http.Header
	// headText, when set, is header rendered for the fast transport
	// ("Name: value\r\n" lines), once for many requests.
	headText string
	// form sends body as application/x-www-form-urlencoded.
	form bool
	// wait is how long the server may legitimately hold the request
	// (a long-poll); the deadline is wait + the client's timeout.
	wait time.Duration
	// idempotent requests are also retried after a network error or a 5xx.
	idempotent bool
	// unavailableRetry requests are also retried after a 503 without a
	// job ID: the server did not do the work, or doing it again cannot
	// duplicate it (a consume's job taken in a half-done call comes back
	// after its TTR, as after any lost answer).
	unavailableRetry bool
	// want lists the success statuses.
	want []int
}

// fullPath is r's path and tail joined.
func (r *request) fullPath() string {
	return r.path + r.tail[0] + r.tail[1] + r.tail[2]
}

// appendQuery appends r's query string (without '?').
func (r *request) appendQuery(b []byte) []byte {
	n := len(b)
	if len(r.query) > 0 {
		b = append(b, r.query.Encode()...)
	}
	if r.params.n > 0 && len(b) > n {
		b = append(b, '&')
	}
	return r.params.appendTo(b)
}

// params are query parameters in the order they were added, rendered
// without url.Values' map, sorting and strings: a publish has at most 9,
// a consume 5, an ACK 1.
type params struct {
	n    int
	kv   [10]param
	more []param // past len(kv)
}

// param is one parameter: val, or num when isNum.
type param struct {
	key   string
	val   string
	num   int64
	isNum bool
}

func (p *params) push(x param) {
	if p.n < len(p.kv) {
		p.kv[p.n] = x
	} else {
		p.more = append(p.more, x)
	}
	p.n++
}

// setIn sets p's parameters in q (a later value of a key replaces an
// earlier one, as url.Values.Set).
func (p *params) setIn(q url.Values) {
	for i := range p.n {
		x := p.at(i)
		if x.isNum {
			q.Set(x.key, strconv.FormatInt(x.num, 10))
		} else {
			q.Set(x.key, x.val)
		}
	}
}

// at is the i-th parameter.
func (p *params) at(i int) *param {
	if i < len(p.kv) {
		return &p.kv[i]
	}
	return &p.more[i-len(p.kv)]
}

// add adds key=val.
func (p *params) add(key, val string) { p.push(param{key: key, val: val}) }

// addInt adds key=n.
func (p *params) addInt(key string, n int64) { p.push(param{key: key, num: n, isNum: true}) }

// appendTo appends "k=v&k=v", escaped as url.Values.Encode escapes.
func (p *params) appendTo(b []byte) []byte {
	for i := range p.n {
		x := p.at(i)
		if i > 0 {
			b = append(b, '&')
		}
		b = appendQueryEscaped(b, x.key)
		b = append(b, '=')
		if x.isNum {
			b = strconv.AppendInt(b, x.num, 10)
		} else {
			b = appendQueryEscaped(b, x.val)
		}
	}
	return b
}

// appendQueryEscaped appends s escaped as url.QueryEscape does.
func appendQueryEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~':
			b = append(b, c)
		case c == ' ':
			b = append(b, '+')
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return b
}

// response is a successful answer.
type response struct {
	status int
	head   respHead
	body   []byte
}

// requestID is the answer's X-Request-ID ("" without one).
func (r *response) requestID() string { return string(r.head.requestID) }

// do sends r, retrying as WithRetry describes, and returns the response when
// its status is one of r.want, else an *APIError.
func (t *transport) do(ctx context.Context, r request) (*response, error) {
	if ctx == nil {
		return nil, argError("nil context")
	}
	pause := t.backoff
	for attempt := 0; ; attempt++ {
		resp, retry, err := t.once(ctx, &r)
		if err == nil {
			return resp, nil
		}
		if !retry || attempt >= t.retries || ctx.Err() != nil {
			return nil, err
		}
		wait := jitter(pause)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.RetryAfter > wait {
			wait = apiErr.RetryAfter // the server knows better
		}
		if sleep(ctx, wait) != nil {
			return nil, err
		}
		pause = min(2*pause, t.maxBackoff)
	}
}

// once sends r once; retry reports whether sending it again is safe and
// may help.
func (t *transport) once(parent context.Context, r *request) (*response, bool, error) {
	if t.fast != nil {
		res, err := t.fastRoundTrip(parent, r, time.Now().Add(r.wait+t.timeout))
		if err != nil {
			if errors.Is(err, ErrBadRequest) {
				return nil, false, err // a header net/http would refuse too
			}
			return t.failed(parent, r, err)
		}
		return t.answer(r, res.status, res.head, res.body)
	}
	ctx, cancel := context.WithTimeout(parent, r.wait+t.timeout)
	defer cancel()
	u := t.base.String() + r.fullPath()
	if len(r.query) > 0 || r.params.n > 0 {
		u += "?" + string(r.appendQuery(nil))
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, false, argError("build request: %v", err)
	}
	for k, vs := range t.header {
		req.Header[k] = slices.Clone(vs)
	}
	for k, vs := range r.header {
		req.Header[k] = slices.Clone(vs)
	}
	if t.headerHook != nil {
		// E.g. the caller's trace context (otelclient.Propagate): a
		// publish stores it with the job, and the server's spans of the
		// other requests join the caller's trace.
		t.headerHook(parent, req.Header)
	}
	if r.form {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if t.basicAuth {
		req.SetBasicAuth(t.user, t.pass)
	}
	res, err := t.hc.Do(req)
	if err != nil {
		return t.failed(parent, r, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxBodyRead))
	if err != nil {
		err = fmt.Errorf("kairos: %s %s: read response: %w", r.method, r.fullPath(), err)
		return nil, r.idempotent && !isCtxErr(parent, err), err
	}
	return t.answer(r, res.StatusCode, headOf(res.Header), data)
}

// failed is once's outcome when the exchange failed (no answer).
func (t *transport) failed(parent context.Context, r *request, err error) (*response, bool, error) {
	err = fmt.Errorf("kairos: %s %s: %w", r.method, r.fullPath(), err)
	// A server certificate that does not verify will not verify on
	// the next attempt either.
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return nil, false, err
	}
	return nil, neverSent(err) || (r.idempotent && !isCtxErr(parent, err)), err
}

// answer is once's outcome for an answer: a response when its status is
// one of r.want, else an *APIError.
func (t *transport) answer(r *request, status int, head respHead, data []byte) (*response, bool, error) {
	for _, s := range r.want {
		if status == s {
			return &response{status: status, head: head, body: data}, false, nil
		}
	}
	apiErr := newAPIErrorHead(r.method, r.fullPath(), status, head, data)
	retry := r.idempotent && status >= 500 && status != http.StatusInsufficientStorage ||
		r.unavailableRetry && status == http.StatusServiceUnavailable && !apiErr.mayExist()
	return nil, retry, apiErr
}

// neverSent reports whether err proves that no byte of the request reached
// a server: the connection could not be established.
func neverSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// isCtxErr reports whether err comes from the caller's context rather than
// from the network (then retrying is pointless).
func isCtxErr(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// jitter spreads d over [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Client calls the public job API of one namespace. It is safe for
// concurrent use; create one per namespace and reuse it.
type Client struct {
	t           *transport
	namespace   string
	token       string
	publishKeys bool
	// nsPath is "/api/<namespace>/", escaped: the start of every job
	// call's path.
	nsPath string
}

// New returns a client of the public API at addr ("127.0.0.1:7777",
// "http://host:7777", "https://kairos.example.com/prefix"). Set the
// namespace and the token with WithNamespace and WithToken; the size
// routes work without a token.
func New(addr string, opts ...Option) (*Client, error) {
	t, s, err := newTransport(addr, opts)
	if err != nil {
		return nil, err
	}
	if s.namespace == "" {
		return nil, argError("no namespace: use WithNamespace")
	}
	if s.token != "" {
		t.header.Set("X-Token", s.token)
	}
	return &Client{t: t, namespace: s.namespace, token: s.token, publishKeys: s.publishKeys,
		nsPath: "/api/" + url.PathEscape(s.namespace) + "/"}, nil
}

// Namespace returns the namespace the client works in.
func (c *Client) Namespace() string { return c.namespace }

// apiPath is /api/<namespace>/<queue>[/<part>…], every segment escaped
// (queue already is), from the base URL's path on (the transports add
// that path).
func (c *Client) apiPath(queue string, parts ...string) string {
	var b strings.Builder
	b.WriteString(c.nsPath)
	b.WriteString(queue)
	for _, p := range parts {
		b.WriteString("/")
		b.WriteString(url.PathEscape(p))
	}
	return b.String()
}

// queueSegment checks and escapes one queue name.
func queueSegment(queue string) (string, error) {
	if strings.TrimSpace(queue) == "" {
		return "", argError("empty queue name")
	}
	return url.PathEscape(queue), nil
}

// queuesSegment checks and escapes a priority list of queues, joined by
// commas.
func queuesSegment(queues []string) (string, error) {
	if len(queues) == 0 {
		return "", argError("no queue")
	}
	parts := make([]string, len(queues))
	for i, q := range queues {
		if strings.Contains(q, ",") {
			return "", argError("queue name %q contains a comma", q)
		}
		s, err := queueSegment(q)
		if err != nil {
			return "", err
		}
		parts[i] = s
	}
	return strings.Join(parts, ","), nil
}

// extHeader asks Kairos for its extension fields (receipts in consumes,
// state and times in peeks); lmstfy ignores it. extHeaderText is it
// rendered (request.headText).
var (
	extHeader     = http.Header{"X-Kairos-Extensions": {"1"}}
	extHeaderText = "X-Kairos-Extensions: 1\r\n"
)
