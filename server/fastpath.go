package server

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

// The fast path serves the plainest publish — PUT /api/:namespace/:queue
// with at most delay, ttl, tries and token in the query, a body announced
// by Content-Length, no extension header — straight from the event loops
// (loop_linux.go), in batches: one engine call for every publish a loop
// read in one pass, and no goroutine per request. It answers only requests
// that will succeed up to the engine call; every other request (another
// route, an unusual header, a parameter out of range, a bad token, a rate
// limit reached) goes with its connection to net/http and gin, which answer
// it exactly as before. So the fast path renders one success and the
// engine's errors, and nothing else.

// fastMaxHead is the largest request head (request line and headers) the
// fast path parses; a longer one goes to net/http.
const fastMaxHead = 8 << 10

// parseResult is what parseFast found at the start of a buffer.
type parseResult int

const (
	parseMore  parseResult = iota // an incomplete request of the fast subset
	parseDone                     // a complete request of the fast subset
	parseOther                    // net/http must serve what follows
)

// fastRequest is a publish of the fast subset: slices of the connection's
// buffer, valid until the buffer is reused.
type fastRequest struct {
	size      int    // bytes of the request, head and body
	namespace []byte // path segments
	queue     []byte
	query     []byte // raw query, without '?'
	delay     []byte // query values; has* says whether present
	ttl       []byte
	tries     []byte
	token     []byte // X-Token, else the token query parameter
	hasDelay  bool
	hasTTL    bool
	hasTries  bool
	hasToken  bool
	body      []byte
	length    int       // Content-Length
	seen      headFlags // headers met so far
}

// parseFast reads the request at the start of buf. It is strict: anything
// outside the subset described above, or that net/http might read
// differently (bare LF, folded or repeated headers, Transfer-Encoding,
// Expect, Connection other than keep-alive, encoded characters…), is
// parseOther, so that net/http decides. A partial request that cannot yet
// be told apart is parseMore.
func parseFast(buf []byte, r *fastRequest) parseResult {
	*r = fastRequest{}
	head := buf[:min(len(buf), fastMaxHead)]
	end := -1 // index of the blank line that ends the head
	for p := 0; ; {
		j := bytes.IndexByte(head[p:], '\n')
		if j < 0 {
			if len(buf) >= fastMaxHead {
				return parseOther
			}
			// Everything so far must still look like the subset.
			if p == 0 && !maybeFastLine(head) {
				return parseOther
			}
			return parseMore
		}
		j += p
		if j == 0 || head[j-1] != '\r' {
			return parseOther
		}
		line := head[p : j-1]
		if p == 0 {
			if !parseRequestLine(line, r) {
				return parseOther
			}
		} else if len(line) == 0 {
			end = j + 1
			break
		} else if !parseHeader(line, r) {
			return parseOther
		}
		p = j + 1
	}
	if r.seen&seenHost == 0 || r.seen&seenLength == 0 {
		return parseOther
	}
	n := r.length
	if n < 1 || n > engine.MaxBodySize {
		return parseOther
	}
	if len(buf)-end < n {
		r.size = end + n // the head is whole: what the request will take
		return parseMore
	}
	r.body = buf[end : end+n]
	r.size = end + n
	return parseDone
}

// headFlags record the headers of a head that may appear only once.
type headFlags uint8

const (
	seenHost headFlags = 1 << iota
	seenLength
	seenConnection
	seenXToken
)

// maybeFastLine reports whether an incomplete first line may still become
// a fast request line.
func maybeFastLine(b []byte) bool {
	const prefix = "PUT /api/"
	if len(b) < len(prefix) {
		return string(b) == prefix[:len(b)]
	}
	return string(b[:len(prefix)]) == prefix
}

// parseRequestLine accepts "PUT /api/<ns>/<q>[?query] HTTP/1.1".
func parseRequestLine(line []byte, r *fastRequest) bool {
	const prefix, suffix = "PUT /api/", " HTTP/1.1"
	if len(line) < len(prefix)+len(suffix) || string(line[:len(prefix)]) != prefix ||
		string(line[len(line)-len(suffix):]) != suffix {
		return false
	}
	target := line[len(prefix) : len(line)-len(suffix)]
	path, query, _ := bytes.Cut(target, []byte("?"))
	ns, q, ok := bytes.Cut(path, []byte("/"))
	if !ok || !engine.ValidName(string(ns)) || !engine.ValidQueueName(string(q)) {
		return false
	}
	r.namespace, r.queue, r.query = ns, q, query
	for more := len(query) > 0; more; {
		var pair []byte
		pair, query, more = bytes.Cut(query, []byte("&"))
		k, v, ok := bytes.Cut(pair, []byte("="))
		if !ok || !plainValue(v) {
			return false
		}
		var dst *[]byte
		var seen *bool
		switch string(k) {
		case "delay":
			dst, seen = &r.delay, &r.hasDelay
		case "ttl":
			dst, seen = &r.ttl, &r.hasTTL
		case "tries":
			dst, seen = &r.tries, &r.hasTries
		case "token":
			dst, seen = &r.token, &r.hasToken
		default:
			return false
		}
		if *seen {
			return false
		}
		*dst, *seen = v, true
	}
	return true
}

// plainValue reports whether a query value needs no decoding and means the
// same to every query parser: letters, digits and "-._~:".
func plainValue(v []byte) bool {
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' || c == ':') {
			return false
		}
	}
	return true
}

// parseHeader accepts one header line of the subset.
func parseHeader(line []byte, r *fastRequest) bool {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(name) == 0 {
		return false
	}
	for _, c := range name {
		if !isTokenChar(c) {
			return false
		}
	}
	value = bytes.Trim(value, " \t")
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	f := &r.seen
	switch {
	case asciiEqualFold(name, "host"):
		if *f&seenHost != 0 || !plainHost(value) {
			return false
		}
		*f |= seenHost
	case asciiEqualFold(name, "content-length"):
		if *f&seenLength != 0 || len(value) == 0 || len(value) > 7 {
			return false
		}
		n := 0
		for _, c := range value {
			if c < '0' || c > '9' {
				return false
			}
			n = n*10 + int(c-'0')
		}
		*f |= seenLength
		r.length = n
	case asciiEqualFold(name, "connection"):
		if *f&seenConnection != 0 || !asciiEqualFold(value, "keep-alive") {
			return false
		}
		*f |= seenConnection
	case asciiEqualFold(name, "x-token"):
		if *f&seenXToken != 0 {
			return false
		}
		*f |= seenXToken
		if len(value) > 0 {
			// X-Token wins over the query parameter, as in guard.
			r.token, r.hasToken = value, true
		}
	case asciiEqualFold(name, "transfer-encoding"), asciiEqualFold(name, "expect"),
		asciiEqualFold(name, "upgrade"), asciiEqualFold(name, "idempotency-key"),
		asciiEqualFold(name, "enable-job-version"),
		len(name) >= len(attributePrefix) && asciiEqualFold(name[:len(attributePrefix)], attributePrefix):
		return false
	}
	return true
}

// isTokenChar reports whether c may appear in a header name (RFC 9110
// tchar).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
}

// plainHost reports whether a Host value is a plain name or address with
// an optional port, which net/http accepts too.
func plainHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == ':' || c == '[' || c == ']' || c == '_') {
			return false
		}
	}
	return true
}

// asciiEqualFold compares b with the lower-case ASCII s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		t := s[i]
		if t >= 'A' && t <= 'Z' {
			t += 'a' - 'A'
		}
		if c != t {
			return false
		}
	}
	return true
}

// fastPublish is one publish the fast path took: what the engine needs and
// what the answer, the metrics and the logs need.
type fastPublish struct {
	req       engine.PublishRequest
	eng       engine.EachPublisher
	pool      string
	token     string
	throttled bool // a throttle token was taken: refund it if the publish fails
	start     time.Time
	ip        string
	query     string  // raw query, kept only for the access log
	out       *[]byte // the connection's output buffer
	id        string
	err       error
}

// fastPool recycles fastPublish values between batches.
var fastPool = sync.Pool{New: func() any { return new(fastPublish) }}

// fastRoute is the route template of the fast path, for the metrics.
const fastRoute = "/api/:namespace/:queue"

// takeFast checks a parsed publish as guard and publish would (names,
// pool, token, scope, throttle, parameters) and returns it ready for the
// engine, or false when net/http must answer it (any of those checks
// fails, or the pool's engine cannot publish in batches). Nothing has
// happened when it returns false.
func (s *Server) takeFast(ctx context.Context, r *fastRequest, ip string, out *[]byte, now time.Time) (*fastPublish, bool) {
	delay, ok := decimalParam(r.delay, r.hasDelay, 32, s.def.delay)
	if !ok {
		return nil, false
	}
	ttl, ok := decimalParam(r.ttl, r.hasTTL, 32, s.def.ttl)
	if !ok || ttl > 0 && ttl < delay {
		return nil, false
	}
	tries, ok := decimalParam(r.tries, r.hasTries, 16, s.def.tries)
	if !ok || tries == 0 {
		return nil, false
	}
	pool, token := auth.ParseToken(string(r.token))
	eng, ok := s.engines[pool]
	if !ok {
		return nil, false
	}
	ep, ok := eng.(engine.EachPublisher)
	if !ok {
		return nil, false
	}
	ns, q := string(r.namespace), string(r.queue)
	if !s.skipVerify {
		if token == "" {
			return nil, false
		}
		scope, err := s.tokens.Verify(ctx, pool, ns, token)
		if err != nil || !scope.Allows(q, auth.RolePublish) {
			return nil, false
		}
	}
	throttled := false
	if s.throttler != nil {
		allowed, err := s.throttler.Allow(ctx, pool, ns, token, true)
		if err != nil || !allowed {
			return nil, false
		}
		throttled = true
	}
	p := fastPool.Get().(*fastPublish)
	*p = fastPublish{
		req: engine.PublishRequest{
			Namespace: ns,
			Queue:     q,
			Body:      bytes.Clone(r.body),
			TTL:       secs(ttl),
			Delay:     secs(delay),
			Tries:     uint16(tries),
		},
		eng: ep, pool: pool, token: token, throttled: throttled,
		start: now, ip: ip, out: out,
	}
	if s.accessLog.Load() {
		p.query = string(r.query)
	}
	return p, true
}

// decimalParam parses an optional query parameter as strconv.ParseUint(v,
// 10, bits) does, without allocating: def when absent, false when not an
// unsigned decimal of that size.
func decimalParam(v []byte, present bool, bits int, def uint64) (uint64, bool) {
	if !present {
		return def, true
	}
	if len(v) == 0 || len(v) > 20 {
		return 0, false
	}
	max := uint64(1)<<bits - 1
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (max-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// runFast publishes a loop's batch, engine by engine, and appends each
// answer to its connection's output in the order the requests came.
func (s *Server) runFast(items []*fastPublish, date []byte) {
	ctx := context.Background()
	var reqs []*engine.PublishRequest
	var ids []string
	var errs []error
	done := 0
	for done < len(items) {
		// One engine per pass; nearly always every item shares it.
		eng := items[done].eng
		var mine []*fastPublish
		for _, it := range items[done:] {
			if it.eng == eng && it.id == "" && it.err == nil {
				mine = append(mine, it)
			}
		}
		reqs, ids, errs = reqs[:0], ids[:0], errs[:0]
		for _, it := range mine {
			reqs = append(reqs, &it.req)
			ids, errs = append(ids, ""), append(errs, nil)
		}
		eng.PublishEach(ctx, reqs, ids, errs)
		for i, it := range mine {
			it.id, it.err = ids[i], errs[i]
			if it.id == "" && it.err == nil {
				it.err = errInternal // an engine that set neither
			}
		}
		for done < len(items) && (items[done].id != "" || items[done].err != nil) {
			done++
		}
	}
	for _, it := range items {
		s.answerFast(ctx, it, date)
		*it = fastPublish{}
		fastPool.Put(it)
	}
}

// answerFast renders one publish's outcome as publish and failAPI would,
// and records it as the middleware would (metrics, access log, debug log).
func (s *Server) answerFast(ctx context.Context, it *fastPublish, date []byte) {
	var reqID [26]byte
	_ = ulid.Make().MarshalTextTo(reqID[:])
	code := http.StatusCreated
	var body []byte
	if it.err != nil {
		ae := mapAPIError(ctx, it.err)
		code, body = ae.status, ae.body
		if code >= http.StatusInternalServerError {
			s.fastLogger(it, reqID[:]).WithError(it.err).Error("request failed")
		}
		if it.throttled {
			if err := s.throttler.Refund(ctx, it.pool, it.req.Namespace, it.token, true); err != nil {
				s.fastLogger(it, reqID[:]).WithError(err).Warn("throttle refund failed")
			}
		}
	} else if s.debug {
		s.fastLogger(it, reqID[:]).WithFields(logrus.Fields{
			"new_job_id": it.id, "delay": uint64(it.req.Delay / time.Second),
			"ttl": uint64(it.req.TTL / time.Second), "tries": it.req.Tries,
		}).Debug("job published")
	}
	*it.out = appendFastResponse(*it.out, code, reqID[:], date, body, it.id)

	r := s.metrics.route(routeLabels{it.pool, it.req.Namespace, fastRoute, http.MethodPut, code})
	if r.latency != nil {
		r.latency.Observe(float64(time.Since(it.start)) / float64(time.Millisecond))
	}
	r.code.Inc()
	if s.accessLog.Load() {
		e := s.log.WithFields(logrus.Fields{
			"pool":    it.pool,
			"path":    "/api/" + it.req.Namespace + "/" + it.req.Queue,
			"query":   redactQuery(it.query),
			"latency": time.Since(it.start),
			"ip":      it.ip,
			"method":  http.MethodPut,
			"code":    code,
			"req_id":  string(reqID[:]),
		})
		switch {
		case code >= 500:
			e.Error("access")
		case code >= 400 && code != http.StatusNotFound:
			e.Warn("access")
		default:
			e.Info("access")
		}
	}
}

// fastLogger is reqLogger for a fast publish.
func (s *Server) fastLogger(it *fastPublish, reqID []byte) logrus.FieldLogger {
	return s.log.WithFields(logrus.Fields{
		"req_id": string(reqID), "namespace": it.req.Namespace, "queue": it.req.Queue,
	})
}

// appendFastResponse appends a whole HTTP/1.1 response: body, or for a
// 201 lmstfy's {"job_id":…,"msg":"published"} (what encoding/json makes of
// publishResponse: a job ID needs no escaping).
func appendFastResponse(b []byte, code int, reqID, date, body []byte, jobID string) []byte {
	const (
		created  = `{"job_id":"`
		finished = `","msg":"published"}`
	)
	n := len(body)
	if code == http.StatusCreated {
		n = len(created) + len(jobID) + len(finished)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	b = append(b, "\r\nContent-Type: "+jsonContentType+"\r\nX-Request-Id: "...)
	b = append(b, reqID...)
	b = append(b, "\r\nDate: "...)
	b = append(b, date...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "\r\n\r\n"...)
	if code == http.StatusCreated {
		b = append(b, created...)
		b = append(b, jobID...)
		return append(b, finished...)
	}
	return append(b, body...)
}
