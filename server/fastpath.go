package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// The fast path serves the three hot requests in their plainest form
// straight from the event loops (loop_linux.go), in batches: one engine
// call per kind for everything a loop read in one pass, and no goroutine
// per request:
//
//   - publish, PUT /api/:namespace/:queue with at most delay, ttl, tries
//     and token in the query, a body announced by Content-Length;
//   - consume, GET /api/:namespace/:queue (one queue) with at most ttr,
//     timeout, count and token;
//   - ACK, DELETE /api/:namespace/:queue/job/:job_id with at most token;
//
// with no extension header. Such a request is admitted by admit, as gin's
// guard admits it, and its refusal (401, 403, 404 pool, 429) answered by
// the fast path; a check that needs the admin Redis runs off the loop
// (loop_admit_linux.go). Every other request (another route, an unusual
// header, a parameter out of range) goes with its connection to net/http
// and gin, which answer it exactly as before. So the fast path renders the
// successes, the refusals of admission and the engine's errors, and
// nothing else.

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

// fastKind is the route of a fast request.
type fastKind uint8

const (
	kindPublish fastKind = iota
	kindConsume
	kindAck
)

// Query parameters of the fast subset.
const (
	pDelay = iota
	pTTL
	pTries
	pTTR
	pTimeout
	pCount
	pToken
	nParams
)

var paramNames = [nParams]string{"delay", "ttl", "tries", "ttr", "timeout", "count", "token"}

// kindParams are the parameters each route takes in the fast subset.
var kindParams = [3]uint16{
	kindPublish: 1<<pDelay | 1<<pTTL | 1<<pTries | 1<<pToken,
	kindConsume: 1<<pTTR | 1<<pTimeout | 1<<pCount | 1<<pToken,
	kindAck:     1 << pToken,
}

// maxFastJobID bounds an ACK's job ID in the fast subset.
const maxFastJobID = 64

// fastRequest is a request of the fast subset: slices of the connection's
// buffer, valid until the buffer is reused.
type fastRequest struct {
	kind      fastKind
	size      int    // bytes of the request, head and body
	namespace []byte // path segments
	queue     []byte
	jobID     []byte // ACK
	query     []byte // raw query, without '?'
	params    [nParams][]byte
	has       uint16 // bit i: params[i] was given
	token     []byte // X-Token, else the token query parameter
	body      []byte
	length    int       // Content-Length
	seen      headFlags // headers met so far
}

func (r *fastRequest) param(i int) ([]byte, bool) { return r.params[i], r.has&(1<<i) != 0 }

// uintParam is parameter i parsed by decimalParam.
func (r *fastRequest) uintParam(i, bits int, def uint64) (uint64, bool) {
	v, has := r.param(i)
	return decimalParam(v, has, bits, def)
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
			// Everything so far must still look like the subset, and a
			// CR can only be the end of the line.
			if p == 0 && !maybeFastLine(head) {
				return parseOther
			}
			if i := bytes.IndexByte(head[p:], '\r'); i >= 0 && p+i != len(head)-1 {
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
	if r.seen&seenHost == 0 {
		return parseOther
	}
	if v, ok := r.param(pToken); ok && r.seen&seenXTokenValue == 0 {
		r.token = v
	}
	n := r.length
	switch {
	case r.kind != kindPublish:
		// No body: none announced, or an empty one.
		if n != 0 {
			return parseOther
		}
		r.size = end
		return parseDone
	case r.seen&seenLength == 0 || n < 1 || n > engine.MaxBodySize:
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
	seenXTokenValue
)

// fastMethods are the request-line prefixes of the fast subset.
var fastMethods = [...]struct {
	prefix string
	kind   fastKind
}{{"PUT /api/", kindPublish}, {"GET /api/", kindConsume}, {"DELETE /api/", kindAck}}

// maybeFastLine reports whether an incomplete first line may still become
// a fast request line.
func maybeFastLine(b []byte) bool {
	for _, m := range fastMethods {
		n := min(len(b), len(m.prefix))
		if string(b[:n]) == m.prefix[:n] {
			return true
		}
	}
	return false
}

// parseRequestLine accepts "PUT|GET /api/<ns>/<q>[?query] HTTP/1.1" and
// "DELETE /api/<ns>/<q>/job/<id>[?query] HTTP/1.1".
func parseRequestLine(line []byte, r *fastRequest) bool {
	const suffix = " HTTP/1.1"
	if len(line) < len(suffix) || string(line[len(line)-len(suffix):]) != suffix {
		return false
	}
	line = line[:len(line)-len(suffix)]
	var target []byte
	for _, m := range fastMethods {
		if len(line) > len(m.prefix) && string(line[:len(m.prefix)]) == m.prefix {
			r.kind, target = m.kind, line[len(m.prefix):]
			break
		}
	}
	if target == nil {
		return false
	}
	path, query, _ := bytes.Cut(target, []byte("?"))
	ns, q, ok := bytes.Cut(path, []byte("/"))
	if !ok {
		return false
	}
	if r.kind == kindAck {
		var rest []byte
		if q, rest, ok = bytes.Cut(q, []byte("/job/")); !ok || len(rest) == 0 || len(rest) > maxFastJobID {
			return false
		}
		for _, c := range rest {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
		r.jobID = rest
	}
	if !engine.ValidName(string(ns)) || !engine.ValidQueueName(string(q)) {
		return false
	}
	r.namespace, r.queue, r.query = ns, q, query
	allowed := kindParams[r.kind]
	for more := len(query) > 0; more; {
		var pair []byte
		pair, query, more = bytes.Cut(query, []byte("&"))
		k, v, ok := bytes.Cut(pair, []byte("="))
		if !ok || !plainValue(v) {
			return false
		}
		i := 0
		for i < nParams && paramNames[i] != string(k) {
			i++
		}
		if i == nParams || allowed&(1<<i) == 0 || r.has&(1<<i) != 0 {
			return false
		}
		r.params[i], r.has = v, r.has|1<<i
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
			*f |= seenXTokenValue
			r.token = value
		}
	case asciiEqualFold(name, "transfer-encoding"), asciiEqualFold(name, "expect"),
		asciiEqualFold(name, "upgrade"), asciiEqualFold(name, "idempotency-key"),
		asciiEqualFold(name, "enable-job-version"), asciiEqualFold(name, "x-kairos-extensions"),
		len(name) >= len(attributePrefix) && asciiEqualFold(name[:len(attributePrefix)], attributePrefix):
		return false
	}
	return true
}

// isTokenChar reports whether c may appear in a header name (RFC 9110
// tchar).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
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

// asciiEqualFold compares b with the ASCII s, ignoring case.
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

// fastConn is the connection a fast request came on (an event loop's).
type fastConn interface {
	// output is where the request's answer goes.
	output() *[]byte
	// wait parks it, a consume that found nothing and may wait: the
	// connection reads nothing more until it is answered (answerFast again,
	// after a new look or at its deadline) before its next requests.
	wait(it *fastItem)
	// done tells the connection that it is answered (before it is
	// recycled).
	done(it *fastItem)
}

// fastItem is one request the fast path took: what the engine needs and
// what the answer, the metrics and the logs need.
type fastItem struct {
	kind    fastKind
	eng     engine.Engine
	pool    string
	ns, q   string
	token   string
	adm     admission
	later   bool // admission needs the admin Redis: admit again off the loop
	refused bool // admission refused it: err is the answer
	start   time.Time
	ip      string
	query   string // raw query, kept only for the access log
	conn    fastConn
	ran     bool // the engine call is done (or refused: none to make)
	// after marks a consume behind requests of its own connection in the
	// same batch: it runs once their engine calls are done.
	after bool

	pub      engine.PublishRequest
	con      engine.ConsumeRequest
	deadline time.Time // a consume that may wait: until when
	stop     func()    // the engine's watch of a parked consume
	timer    *time.Timer
	cancel   context.CancelFunc // the goroutine wait of a parked consume
	jobID    string             // ACK

	id   string        // publish
	jobs []*engine.Job // consume
	err  error
}

// fastPool recycles fastItems between batches.
var fastPool = sync.Pool{New: func() any { return new(fastItem) }}

// Route templates of the fast requests, for the metrics.
const (
	routeQueue = "/api/:namespace/:queue"
	routeJob   = "/api/:namespace/:queue/job/:job_id"
)

// takeFast checks a parsed request's parameters as the handler would and
// admits it (admit, inline: no I/O), and returns it: ready for the engine,
// refused (it.refused: answer it.err), or to admit again off the loop
// (it.later). It returns false when net/http must answer the request (a
// parameter it does not take); nothing has happened then.
func (s *Server) takeFast(ctx context.Context, r *fastRequest, ip string, conn fastConn, now time.Time) (*fastItem, bool) {
	ns, q := string(r.namespace), string(r.queue)
	it := fastPool.Get().(*fastItem)
	*it = fastItem{kind: r.kind, ns: ns, q: q, start: now, ip: ip, conn: conn}
	fail := func() (*fastItem, bool) {
		putFast(it)
		return nil, false
	}
	opts := optsPublish
	switch r.kind {
	case kindPublish:
		delay, ok := r.uintParam(pDelay, 32, s.def.delay)
		if !ok {
			return fail()
		}
		ttl, ok := r.uintParam(pTTL, 32, s.def.ttl)
		if !ok || ttl > 0 && ttl < delay {
			return fail()
		}
		tries, ok := r.uintParam(pTries, 16, s.def.tries)
		if !ok || tries == 0 {
			return fail()
		}
		it.pub = engine.PublishRequest{
			Namespace: ns, Queue: q, Body: bytes.Clone(r.body),
			TTL: secs(ttl), Delay: secs(delay), Tries: uint16(tries),
		}
	case kindConsume:
		opts = optsConsume
		ttr, ok := r.uintParam(pTTR, 32, s.def.ttr)
		if !ok {
			return fail()
		}
		timeout, ok := r.uintParam(pTimeout, 32, s.def.timeout)
		if !ok {
			return fail()
		}
		count, ok := r.uintParam(pCount, 32, 1)
		if !ok || count == 0 || count > engine.MaxBatchConsume {
			return fail()
		}
		// The batch only takes what is ready now; a consume that finds
		// nothing and may wait then waits on its own (fastConn.wait).
		wait := secs(min(timeout, s.def.maxTimeout))
		it.con = engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: secs(ttr), Count: int(count), Timeout: wait}
		if wait > 0 {
			it.deadline = now.Add(wait)
		}
	case kindAck:
		opts = optsAck
		it.jobID = string(r.jobID)
	}
	if s.accessLog.Load() {
		it.query = string(r.query)
	}
	it.adm = admission{ns: ns, queue: q, rawToken: string(r.token), opts: opts}
	s.admitted(it, s.admit(ctx, &it.adm, true))
	return it, true
}

// admitted records admit's answer for it.
func (s *Server) admitted(it *fastItem, err error) {
	a := &it.adm
	it.pool, it.token, it.later = a.pool, a.token, false
	it.eng = a.eng
	switch {
	case errors.Is(err, errAdmitLater):
		it.later = true
	case err != nil:
		it.err, it.refused, it.ran = err, true, true
	}
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

// runFast runs a loop's batch — one engine call per kind and engine: ACKs,
// then publishes, then consumes — and appends each answer to its
// connection's output in the order the requests came.
func (s *Server) runFast(items []*fastItem, date []byte) {
	if len(items) == 0 {
		return
	}
	ctx := context.Background()
	s.runBatch(ctx, items)
	for _, it := range items {
		if s.answerFast(ctx, it, date) {
			it.conn.done(it)
			putFast(it)
		}
	}
}

// runBatch makes the engine calls of a batch. The kinds run in the order
// ACKs, publishes, consumes; with one engine that can, their calls share
// round trips (engine.Pipeliner). A step of a Pipeliner may make several
// calls, and a consume's call may then run before an ACK or a publish made
// by a later call of an earlier step: so the consumes that follow requests
// of their own connection (after) run once the rest of the batch is done,
// so that they see what their connection did before them.
func (s *Server) runBatch(ctx context.Context, items []*fastItem) {
	var after []*fastItem
	for _, it := range items {
		if it.after && !it.ran { // ran: refused, no engine call
			it.ran = true // not yet: runKind skips it
			after = append(after, it)
		}
	}
	var present [kindAck + 1]bool
	var eng engine.Engine
	oneEngine := true
	for _, it := range items {
		if it.ran {
			continue
		}
		if eng == nil {
			eng = it.eng
		}
		present[it.kind] = true
		if eng == nil {
			eng = it.eng
		}
		oneEngine = oneEngine && it.eng == eng
	}
	var kinds []fastKind
	for _, kind := range [...]fastKind{kindAck, kindPublish, kindConsume} {
		if present[kind] {
			kinds = append(kinds, kind)
		}
	}
	if oneEngine && len(kinds) > 1 {
		steps := make([]func(context.Context), len(kinds))
		for i, kind := range kinds {
			steps[i] = func(ctx context.Context) { s.runKind(ctx, items, kind) }
		}
		eng.Together(ctx, steps...)
	} else {
		for _, kind := range kinds {
			s.runKind(ctx, items, kind)
		}
	}
	if len(after) > 0 {
		for _, it := range after {
			it.ran = false
		}
		s.runKind(ctx, after, kindConsume)
	}
}

// putFast recycles an answered item.
func putFast(it *fastItem) {
	*it = fastItem{}
	fastPool.Put(it)
}

// runKind makes the engine calls for the items of one kind.
func (s *Server) runKind(ctx context.Context, items []*fastItem, kind fastKind) {
	for {
		var eng engine.Engine
		var mine []*fastItem
		for _, it := range items {
			if it.kind != kind || it.ran {
				continue
			}
			if eng == nil {
				eng = it.eng
			}
			if it.eng == eng {
				mine = append(mine, it)
				it.ran = true
			}
		}
		if eng == nil {
			return
		}
		errs := make([]error, len(mine))
		switch kind {
		case kindPublish:
			reqs, ids := make([]*engine.PublishRequest, len(mine)), make([]string, len(mine))
			for i, it := range mine {
				reqs[i] = &it.pub
			}
			eng.PublishEach(ctx, reqs, ids, errs)
			for i, it := range mine {
				it.id, it.err = ids[i], errs[i]
				if it.id == "" && it.err == nil {
					it.err = errInternal // an engine that set neither
				}
			}
		case kindConsume:
			reqs, jobs := make([]*engine.ConsumeRequest, len(mine)), make([][]*engine.Job, len(mine))
			for i, it := range mine {
				reqs[i] = &it.con
			}
			eng.ConsumeEach(ctx, reqs, jobs, errs)
			for i, it := range mine {
				it.jobs, it.err = jobs[i], errs[i]
			}
		case kindAck:
			refs := make([]engine.JobRef, len(mine))
			for i, it := range mine {
				refs[i] = engine.JobRef{Namespace: it.ns, Queue: it.q, ID: it.jobID}
			}
			eng.DeleteEach(ctx, refs, errs)
			for i, it := range mine {
				it.err = errs[i]
			}
		}
	}
}

// answerFast renders one request's outcome as its handler and failAPI
// would, and records it as the middleware would (metrics, access log, debug
// log), and reports whether it is answered: a consume that found nothing
// and may wait is parked on its connection instead (fastConn.wait).
func (s *Server) answerFast(ctx context.Context, it *fastItem, date []byte) bool {
	var reqID [26]byte
	_ = ulid.Make().MarshalTextTo(reqID[:])
	var ae *apiError
	var body []byte
	var scratch [96]byte
	code, route, method := 0, routeQueue, http.MethodPut
	switch it.kind {
	case kindConsume:
		method = http.MethodGet
	case kindAck:
		route, method = routeJob, http.MethodDelete
	}
	switch {
	case it.refused:
		ae = mapAPIError(ctx, it.err)
	case it.kind == kindPublish:
		if it.err != nil {
			ae = mapAPIError(ctx, publishFailure(it.err, it.id))
			break
		}
		code = http.StatusCreated
		body = append(append(append(scratch[:0], `{"job_id":"`...), it.id...), `","msg":"published"}`...)
		if s.debug {
			s.fastLogger(it, reqID[:]).WithFields(logrus.Fields{
				"new_job_id": it.id, "delay": uint64(it.pub.Delay / time.Second),
				"ttl": uint64(it.pub.TTL / time.Second), "tries": it.pub.Tries,
			}).Debug("job published")
		}
	case it.kind == kindConsume:
		if len(it.jobs) == 0 {
			if it.err == nil || errors.Is(it.err, engine.ErrClosed) {
				if !it.deadline.IsZero() && time.Now().Before(it.deadline) {
					// The consumer waits; its throttle token is held
					// meanwhile, as the gin path holds it.
					it.conn.wait(it)
					return false
				}
				ae = errNoJob
			} else {
				ae = mapAPIError(ctx, it.err)
			}
			break
		}
		if it.err != nil {
			s.fastLogger(it, reqID[:]).WithError(it.err).Warn("consume returned jobs and an error")
		}
		var err error
		if body, err = json.Marshal(consumedBody(it.jobs, it.ns, it.con.Queues, it.con.Count, false, s.now())); err != nil {
			ae, it.err = errInternal, err
			break
		}
		code = http.StatusOK
	case it.kind == kindAck:
		if it.err != nil {
			ae = mapAPIError(ctx, it.err)
			break
		}
		code = http.StatusNoContent
	}
	retryAfter := 0
	if ae != nil {
		code, body, retryAfter = ae.status, ae.body, ae.retryAfter
		if code >= http.StatusInternalServerError {
			s.fastLogger(it, reqID[:]).WithError(it.err).Error("request failed")
		}
		s.refund(ctx, it, reqID[:])
	}
	out := it.conn.output()
	*out = appendFastResponse(*out, code, retryAfter, reqID[:], date, body)

	nsLabel := it.ns
	if !it.adm.authenticated {
		nsLabel = "" // a refused token does not choose metric labels
	}
	r := s.metrics.route(routeLabels{it.pool, nsLabel, route, method, code})
	if r.latency != nil {
		r.latency.Observe(float64(time.Since(it.start)) / float64(time.Millisecond))
	}
	r.code.Inc()
	if s.accessLog.Load() {
		path := "/api/" + it.ns + "/" + it.q
		if it.kind == kindAck {
			path += "/job/" + it.jobID
		}
		s.logAccess(it.pool, path, it.query, it.start, it.ip, method, code, string(reqID[:]))
	}
	return true
}

// refund gives back the throttle token of a request that did not deliver;
// off the loop when that needs the admin Redis.
func (s *Server) refund(ctx context.Context, it *fastItem, reqID []byte) {
	if !it.adm.throttled {
		return
	}
	a := it.adm
	it.adm.throttled = false
	if s.refundNeedsIO(&a) {
		log := s.fastLogger(it, reqID)
		go func() {
			if err := s.refundAdmission(context.WithoutCancel(ctx), &a); err != nil {
				log.WithError(err).Warn("throttle refund failed")
			}
		}()
		return
	}
	if err := s.refundAdmission(ctx, &a); err != nil {
		s.fastLogger(it, reqID).WithError(err).Warn("throttle refund failed")
	}
}

// fastLogger is reqLogger for a fast request.
func (s *Server) fastLogger(it *fastItem, reqID []byte) logrus.FieldLogger {
	f := logrus.Fields{"req_id": string(reqID), "namespace": it.ns, "queue": it.q}
	if it.kind == kindAck {
		f["job_id"] = it.jobID
	}
	return s.log.WithFields(f)
}

// appendFastResponse appends a whole HTTP/1.1 response as net/http writes
// gin's: a JSON body, or none for a 204; retryAfter > 0 adds Retry-After
// (seconds), as render does.
func appendFastResponse(b []byte, code, retryAfter int, reqID, date, body []byte) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	// net/http writes the handler's headers sorted by name.
	if code != http.StatusNoContent {
		b = append(b, "\r\nContent-Type: "+jsonContentType...)
	}
	if retryAfter > 0 {
		b = append(b, "\r\nRetry-After: "...)
		b = strconv.AppendInt(b, int64(retryAfter), 10)
	}
	b = append(b, "\r\nX-Request-Id: "...)
	b = append(b, reqID...)
	b = append(b, "\r\nDate: "...)
	b = append(b, date...)
	if code == http.StatusNoContent {
		return append(b, "\r\n\r\n"...)
	}
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}
