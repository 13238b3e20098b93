package evloop

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/kairos-dev/kairos/engine"
)

// Route is one request shape the loops may serve (server/routes.go lists
// them). A request is the route's when its request line is "Method Path
// HTTP/1.1" with Path's ":name" segments filled, its query holds only
// Params (each at most once, with a plain value: letters, digits and
// "-._~:"), and its body follows Body. Anything else is net/http's.
type Route struct {
	Kind   Kind
	Method string
	// Path is the gin template, e.g. "/api/:namespace/:queue". Its
	// parameters are :namespace (engine.ValidName), :queue
	// (engine.ValidQueueName: one queue) and :job_id (letters and
	// digits, at most MaxJobID).
	Path   string
	Params []string // the query parameters it may have
	// Body is how long its body may be: none (the zero Body), or
	// Content-Length between Min and Max. A chunked body is never the
	// loops'.
	Body Body
}

// Body bounds a Route's body, in bytes.
type Body struct{ Min, Max int }

// Table is what the loops may serve: the routes, and the rules every
// request of them follows.
type Table struct {
	Routes []Route
	// MaxHead bounds the request line and headers; a longer head is
	// net/http's.
	MaxHead int
	// MaxJobID bounds a :job_id path segment.
	MaxJobID int
	// TokenHeader, else the TokenParam query parameter, is the request's
	// token (Request.Token); the header must not be repeated.
	TokenHeader, TokenParam string
	// RefuseHeaders and RefuseHeaderPrefixes: a request with one of
	// these headers is net/http's, whatever its route. Host (once),
	// Content-Length (once, decimal), Connection (only keep-alive) are
	// checked always, and Transfer-Encoding, Expect and Upgrade always
	// send a request to net/http.
	RefuseHeaders        []string
	RefuseHeaderPrefixes []string
	// TraceContext makes the W3C traceparent and tracestate headers the
	// request's (Request.TraceParent, TraceState); a repeated one sends
	// the request to net/http. Without it they are like any header not
	// refused: ignored.
	TraceContext bool
	// ExtHeader, when set, is a header the request may carry once
	// (Request.Ext): the server's opt-in to its extension fields (the
	// receipts of a consume). A repeated one sends the request to
	// net/http.
	ExtHeader string
	// WorkerHeader, when set, is read as the request's worker name
	// (Request.Worker); a repeated one sends the request to net/http.
	WorkerHeader string
}

// Path parameters a Route may have.
const (
	segStatic = iota
	segNamespace
	segQueue
	segJobID
)

// compiledRoute is a Route ready for the parser.
type compiledRoute struct {
	*Route
	prefix string // "PUT /api/": the method and the path up to its first parameter
	segs   []seg  // the path after prefix, split at '/'
}

type seg struct {
	kind int
	text string // segStatic
}

// maxParams bounds a route's query parameters.
const maxParams = 8

// Parser reads requests of a Table. Make it with NewParser.
type Parser struct {
	t       Table
	routes  []compiledRoute
	refused []string
}

// NewParser checks t and compiles it.
func NewParser(t Table) (*Parser, error) {
	p := &Parser{t: t}
	if t.MaxHead <= 0 || t.TokenHeader == "" {
		return nil, fmt.Errorf("evloop: table needs MaxHead and TokenHeader")
	}
	for i := range t.Routes {
		r := &p.t.Routes[i]
		if len(r.Params) > maxParams {
			return nil, fmt.Errorf("evloop: %s %s: more than %d parameters", r.Method, r.Path, maxParams)
		}
		i := strings.IndexByte(r.Path, ':')
		if i <= 0 || r.Path[i-1] != '/' {
			return nil, fmt.Errorf("evloop: %s %s: no path parameter", r.Method, r.Path)
		}
		c := compiledRoute{Route: r, prefix: r.Method + " " + r.Path[:i]}
		for _, s := range strings.Split(r.Path[i:], "/") {
			switch {
			case s == ":namespace":
				c.segs = append(c.segs, seg{kind: segNamespace})
			case s == ":queue":
				c.segs = append(c.segs, seg{kind: segQueue})
			case s == ":job_id":
				c.segs = append(c.segs, seg{kind: segJobID})
			case s == "" || strings.ContainsAny(s, ":*?%"):
				return nil, fmt.Errorf("evloop: %s %s: segment %q", r.Method, r.Path, s)
			default:
				c.segs = append(c.segs, seg{kind: segStatic, text: s})
			}
		}
		p.routes = append(p.routes, c)
	}
	p.refused = append([]string{"transfer-encoding", "expect", "upgrade"}, t.RefuseHeaders...)
	return p, nil
}

// Result is what Parse found at the start of a buffer.
type Result int

const (
	More  Result = iota // an incomplete request that may still be the loops'
	Done                // a complete request of the table
	Other               // net/http must serve what follows
	// Head is a request of the table whose head is complete and whose
	// body is not all there yet: the loops admit it before they read the
	// body (Request.Body is nil; Size is what the whole request takes).
	Head
)

// Request is a request of the table: slices of the connection's buffer,
// valid until the buffer is reused.
type Request struct {
	route    *compiledRoute
	Size     int // bytes of the request, head and body
	HeadSize int // bytes of the head (request line, headers, blank line)
	// Length is the announced body length (Content-Length), 0 without
	// a body.
	Length    int
	Namespace []byte // path parameters
	Queue     []byte
	JobID     []byte
	Query     []byte // raw query, without '?'
	params    [maxParams][]byte
	has       uint32 // bit i: params[i] (Route.Params[i]) was given
	Token     []byte // TokenHeader, else the TokenParam query parameter
	// TraceParent and TraceState are the W3C trace context headers, as
	// sent (Table.TraceContext), nil when absent.
	TraceParent, TraceState []byte
	// Ext is the value of Table.ExtHeader, as sent, nil when absent.
	Ext []byte
	// Worker is the Table.WorkerHeader header, nil when absent.
	Worker []byte
	// Body is the body when all of it is in the buffer (Done).
	Body []byte
	seen headFlags // headers met so far
}

// Route is the table row r matched.
func (r *Request) Route() *Route { return r.route.Route }

// Param returns the query parameter name (one of its Route's Params) and
// whether it was given.
func (r *Request) Param(name string) ([]byte, bool) {
	for i, n := range r.route.Params {
		if n == name {
			return r.params[i], r.has&(1<<i) != 0
		}
	}
	return nil, false
}

// UintParam is the query parameter name parsed by DecimalParam.
func (r *Request) UintParam(name string, bits int, def uint64) (uint64, bool) {
	v, has := r.Param(name)
	return DecimalParam(v, has, bits, def)
}

// Parse reads the request at the start of buf. It is strict: anything
// outside the table, or that net/http might read differently (bare LF,
// folded or repeated headers, Transfer-Encoding, Expect, Connection other
// than keep-alive, encoded characters…), is Other, so that net/http
// decides. A partial request that cannot yet be told apart is More.
func (p *Parser) Parse(buf []byte, r *Request) Result {
	*r = Request{}
	maxHead := p.t.MaxHead
	head := buf[:min(len(buf), maxHead)]
	end := -1 // index of the blank line that ends the head
	for i := 0; ; {
		j := bytes.IndexByte(head[i:], '\n')
		if j < 0 {
			if len(buf) >= maxHead {
				return Other
			}
			// Everything so far must still look like the table's, and a
			// CR can only be the end of the line.
			if i == 0 && !p.maybeLine(head) {
				return Other
			}
			if k := bytes.IndexByte(head[i:], '\r'); k >= 0 && i+k != len(head)-1 {
				return Other
			}
			return More
		}
		j += i
		if j == 0 || head[j-1] != '\r' {
			return Other
		}
		line := head[i : j-1]
		if i == 0 {
			if !p.parseRequestLine(line, r) {
				return Other
			}
		} else if len(line) == 0 {
			end = j + 1
			break
		} else if !p.parseHeader(line, r) {
			return Other
		}
		i = j + 1
	}
	if r.seen&seenHost == 0 {
		return Other
	}
	if r.seen&seenTokenValue == 0 && p.t.TokenParam != "" {
		if v, ok := r.Param(p.t.TokenParam); ok {
			r.Token = v
		}
	}
	n := r.Length
	body := r.route.Body
	r.HeadSize = end
	switch {
	case body.Max == 0:
		// No body: none announced, or an empty one.
		if n != 0 {
			return Other
		}
		r.Size = end
		return Done
	case r.seen&seenLength == 0 || n < body.Min || n > body.Max:
		return Other
	}
	r.Size = end + n // the head is whole: what the request will take
	if len(buf)-end < n {
		return Head
	}
	r.Body = buf[end : end+n]
	return Done
}

// headFlags record the headers of a head that may appear only once.
type headFlags uint16

const (
	seenHost headFlags = 1 << iota
	seenLength
	seenConnection
	seenToken
	seenTokenValue
	seenTraceParent
	seenTraceState
	seenExt
	seenWorker
)

// maybeLine reports whether an incomplete first line may still become a
// request line of the table.
func (p *Parser) maybeLine(b []byte) bool {
	for i := range p.routes {
		prefix := p.routes[i].prefix
		n := min(len(b), len(prefix))
		if string(b[:n]) == prefix[:n] {
			return true
		}
	}
	return false
}

// parseRequestLine accepts "<Method> <Path>[?query] HTTP/1.1" of one of
// the routes.
func (p *Parser) parseRequestLine(line []byte, r *Request) bool {
	const suffix = " HTTP/1.1"
	if len(line) < len(suffix) || string(line[len(line)-len(suffix):]) != suffix {
		return false
	}
	line = line[:len(line)-len(suffix)]
	for i := range p.routes {
		c := &p.routes[i]
		if len(line) > len(c.prefix) && string(line[:len(c.prefix)]) == c.prefix {
			if p.matchTarget(c, line[len(c.prefix):], r) {
				return true
			}
		}
	}
	return false
}

// matchTarget reports whether target (the request target after c's
// prefix) is c's, and fills r.
func (p *Parser) matchTarget(c *compiledRoute, target []byte, r *Request) bool {
	path, query, _ := bytes.Cut(target, []byte("?"))
	*r = Request{route: c}
	for k, s := range c.segs {
		var part []byte
		if k == len(c.segs)-1 {
			part, path = path, nil
		} else {
			var ok bool
			if part, path, ok = bytes.Cut(path, []byte("/")); !ok {
				return false
			}
		}
		switch s.kind {
		case segStatic:
			if string(part) != s.text {
				return false
			}
		case segNamespace:
			if !engine.ValidName(string(part)) {
				return false
			}
			r.Namespace = part
		case segQueue:
			if !engine.ValidQueueName(string(part)) {
				return false
			}
			r.Queue = part
		case segJobID:
			if len(part) == 0 || len(part) > p.t.MaxJobID {
				return false
			}
			for _, ch := range part {
				if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
					return false
				}
			}
			r.JobID = part
		}
	}
	r.Query = query
	names := c.Params
	for more := len(query) > 0; more; {
		var pair []byte
		pair, query, more = bytes.Cut(query, []byte("&"))
		k, v, ok := bytes.Cut(pair, []byte("="))
		if !ok || !plainValue(v) {
			return false
		}
		i := 0
		for i < len(names) && names[i] != string(k) {
			i++
		}
		if i == len(names) || r.has&(1<<i) != 0 {
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

// parseHeader accepts one header line of the table's requests.
func (p *Parser) parseHeader(line []byte, r *Request) bool {
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
		if *f&seenLength != 0 || len(value) == 0 || len(value) > 9 {
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
		r.Length = n
	case asciiEqualFold(name, "connection"):
		if *f&seenConnection != 0 || !asciiEqualFold(value, "keep-alive") {
			return false
		}
		*f |= seenConnection
	case asciiEqualFold(name, p.t.TokenHeader):
		if *f&seenToken != 0 {
			return false
		}
		*f |= seenToken
		if len(value) > 0 {
			// The header wins over the query parameter.
			*f |= seenTokenValue
			r.Token = value
		}
	case p.t.TraceContext && asciiEqualFold(name, "traceparent"):
		if *f&seenTraceParent != 0 {
			return false
		}
		*f |= seenTraceParent
		r.TraceParent = value
	case p.t.TraceContext && asciiEqualFold(name, "tracestate"):
		if *f&seenTraceState != 0 {
			return false // several are one list: net/http joins them
		}
		*f |= seenTraceState
		r.TraceState = value
	case p.t.ExtHeader != "" && asciiEqualFold(name, p.t.ExtHeader):
		if *f&seenExt != 0 {
			return false
		}
		*f |= seenExt
		r.Ext = value
	case p.t.WorkerHeader != "" && asciiEqualFold(name, p.t.WorkerHeader):
		if *f&seenWorker != 0 {
			return false
		}
		*f |= seenWorker
		r.Worker = value
	default:
		for _, h := range p.refused {
			if asciiEqualFold(name, h) {
				return false
			}
		}
		for _, h := range p.t.RefuseHeaderPrefixes {
			if len(name) >= len(h) && asciiEqualFold(name[:len(h)], h) {
				return false
			}
		}
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

// DecimalParam parses an optional query parameter as strconv.ParseUint(v,
// 10, bits) does, without allocating: def when absent, false when not an
// unsigned decimal of that size.
func DecimalParam(v []byte, present bool, bits int, def uint64) (uint64, bool) {
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
