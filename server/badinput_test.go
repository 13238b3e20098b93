package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// The bad-input barrage: malformed request lines and headers, invalid
// UTF-8, negative and overflowing numbers on every route of both
// listeners, huge and interrupted bodies, all while valid publishes run.
// Never a 5xx from Kairos, never a panic, never a half-written job, and
// bounded memory.
//
// Go's net/http itself answers two kinds of request with a 5xx before any
// Kairos code runs, as RFC 9110/9112 ask: 505 to a request line whose
// version is not HTTP/1.x, and 501 to a Transfer-Encoding other than
// chunked. These are the only 5xx allowed here (doc/API.md says so).

const (
	badUser, badPass = "ops", "s3cret"
	basicAuthHeader  = "Authorization: Basic b3BzOnMzY3JldA==" // ops:s3cret
)

func startBarrageServer(t *testing.T) *live {
	t.Helper()
	return startLive(t, liveOptions{config: func(c *config.Config) {
		c.Accounts = map[string]string{badUser: badPass}
		c.Kairos.ReadHeaderTimeoutSecond = 1
		c.Kairos.ReadTimeoutSecond = 3
	}})
}

// rawRequest builds one HTTP/1.1 request; extra are header lines.
func rawRequest(method, target, body string, extra ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n", method, target)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	if body != "" || method == "PUT" || method == "POST" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return []byte(b.String())
}

// checkAnswer fails unless the server answered without a 5xx (or with one
// of the allowed net/http statuses), and with JSON when Kairos answered an
// error on the public listener.
func checkAnswer(t *testing.T, what string, res rawResult, allowed ...int) {
	t.Helper()
	switch {
	case res.status == 0:
		t.Errorf("%s: no answer (%v)", what, res.err)
	case res.status >= 500 && !containsInt(allowed, res.status):
		t.Errorf("%s: %d %s", what, res.status, res.body)
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestBadInputMalformedRequests: malformed request lines and headers at
// both listeners get a 4xx (or net/http's 505/501), never anything else.
func TestBadInputMalformedRequests(t *testing.T) {
	l := startBarrageServer(t)
	tok := l.token(t, "ns", auth.Scope{})
	xtoken := "X-Token: " + tok
	cases := []struct {
		name  string
		raw   string
		allow []int // allowed 5xx
	}{
		{"garbage", "GARBAGE\r\n\r\n", nil},
		{"method only", "GET\r\n\r\n", nil},
		{"invalid method", "G@T /api/ns/q HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"lower-case method", "get /api/ns/q/size HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"10 KB method", strings.Repeat("A", 10000) + " /api/ns/q HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"NUL method", "GET\x00 /api/ns/q HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"no Host", "GET /api/ns/q/size HTTP/1.1\r\n\r\n", nil},
		{"two Hosts", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", nil},
		{"bad Host", "GET /api/ns/q/size HTTP/1.1\r\nHost: a b\r\n\r\n", nil},
		{"HTTP/2.0 line", "GET /api/ns/q/size HTTP/2.0\r\nHost: x\r\n\r\n", []int{505}},
		{"HTTP/9.9 line", "GET /api/ns/q/size HTTP/9.9\r\nHost: x\r\n\r\n", []int{505}},
		{"HTTP/0.9 line", "GET /api/ns/q/size HTTP/0.9\r\nHost: x\r\n\r\n", []int{505}},
		{"bad version", "GET /api/ns/q/size HTTP/1.1.1\r\nHost: x\r\n\r\n", nil},
		{"no version", "GET /api/ns/q/size\r\n\r\n", nil},
		{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil},
		{"TLS hello", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", nil},
		{"header without colon", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", nil},
		{"NUL in header", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\nX-A: \x00\r\n\r\n", nil},
		{"folded header", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\n X-Folded: y\r\n\r\n", nil},
		{"invalid header name", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\nJob-Attr-\xff: v\r\n\r\n", nil},
		{"bare CR", "GET /api/ns/q/size HTTP/1.1\rHost: x\r\r", nil},
		{"2 MiB header", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("h", 2<<20) + "\r\n\r\n", nil},
		{"20k headers", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", 20000) + "\r\n", nil},
		{"2 MiB URL", "GET /api/ns/q/size?" + strings.Repeat("a", 2<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"bad escape in path", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"relative target", "GET api HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"asterisk target", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"CONNECT", "CONNECT kairos:80 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"bogus Expect", "GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\n\r\n", nil},
		{"negative Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nContent-Length: -1\r\n\r\n", nil},
		{"overflowing Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nContent-Length: 99999999999999999999\r\n\r\n", nil},
		{"two Content-Lengths", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", nil},
		{"gzip transfer coding", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nTransfer-Encoding: gzip\r\n\r\n", []int{501}},
		{"chunked twice", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", []int{501}},
		{"bad chunk size", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n", nil},
		{"overflowing chunk size", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n", nil},
		{"short body", "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n" + xtoken + "\r\nContent-Length: 10\r\n\r\nabc", nil},
	}
	var wg sync.WaitGroup
	for _, listener := range []struct{ name, addr string }{{"api", l.srv.Addr()}, {"admin", l.srv.AdminAddr()}} {
		for _, tc := range cases {
			wg.Add(1)
			go func() { // some cases wait for the read timeouts
				defer wg.Done()
				res := rawExchange(listener.addr, []byte(tc.raw), 6*time.Second)
				checkAnswer(t, listener.name+": "+tc.name, res, tc.allow...)
				if res.status >= 200 && res.status < 300 && strings.HasPrefix(tc.raw, "PUT") {
					t.Errorf("%s: %s was accepted: %d %s", listener.name, tc.name, res.status, res.body)
				}
			}()
		}
	}
	wg.Wait()
	// A request with both Content-Length and chunked coding is read as
	// chunked (RFC 9112 §6.3): its job is whole.
	res := rawExchange(l.srv.Addr(), []byte("PUT /api/ns/te HTTP/1.1\r\nHost: x\r\n"+xtoken+
		"\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), 5*time.Second)
	if res.status != 201 {
		t.Errorf("Content-Length and chunked: %d %s", res.status, res.body)
	}
	if r := liveDo(t, "GET", l.api+"/api/ns/te/peek", nil, map[string]string{"X-Token": tok}); !strings.Contains(r.body, `"data":"YWJj"`) {
		t.Errorf("the chunked job: %d %s", r.status, r.body)
	}
	checkStore(t, l.client, true)
}

// barrageRoutes are every route of both listeners; {ns}, {q}, {id} and
// {tok} are replaced by good or bad path segments.
var barrageRoutes = []struct {
	admin        bool
	method, path string
}{
	{false, "PUT", "/api/{ns}/{q}"},
	{false, "PUT", "/api/{ns}/{q}/bulk"},
	{false, "PUT", "/api/{ns}/{q}/job/{id}"},
	{false, "GET", "/api/{ns}/{q}"},
	{false, "GET", "/api/{ns}/{q}/peek"},
	{false, "GET", "/api/{ns}/{q}/job/{id}"},
	{false, "DELETE", "/api/{ns}/{q}/job/{id}"},
	{false, "DELETE", "/api/{ns}/{q}"},
	{false, "GET", "/api/{ns}/{q}/deadletter"},
	{false, "PUT", "/api/{ns}/{q}/deadletter"},
	{false, "DELETE", "/api/{ns}/{q}/deadletter"},
	{false, "GET", "/api/{ns}/{q}/size"},
	{false, "GET", "/api/{ns}/{q}/deadletter/size"},
	{false, "PUT", "/api/{ns}/{q}/job/{id}/release"},
	{false, "PUT", "/api/{ns}/{q}/job/{id}/touch"},
	{false, "DELETE", "/api/{ns}/{q}/job_key/{id}"},
	{false, "PUT", "/api/{ns}/{q}/pause"},
	{false, "PUT", "/api/{ns}/{q}/resume"},
	{false, "GET", "/api/{ns}/{q}/deadletter/jobs"},
	{false, "PUT", "/api/{ns}/{q}/deadletter/job/{id}"},
	{false, "DELETE", "/api/{ns}/{q}/deadletter/job/{id}"},
	{false, "GET", "/api/{ns}/{q}/schedule"},
	{false, "PUT", "/api/{ns}/{q}/schedule/{id}"},
	{false, "GET", "/api/{ns}/{q}/schedule/{id}"},
	{false, "DELETE", "/api/{ns}/{q}/schedule/{id}"},
	{false, "PUT", "/api/{ns}/{q}/schedule/{id}/pause"},
	{false, "PUT", "/api/{ns}/{q}/schedule/{id}/resume"},
	{true, "GET", "/pools"},
	{true, "GET", "/version"},
	{true, "GET", "/info"},
	{true, "GET", "/metrics"},
	{true, "GET", "/debug/pprof/"},
	{true, "GET", "/debug/pprof/{q}"},
	{true, "GET", "/debug/pprof/cmdline"},
	{true, "POST", "/debug/pprof/symbol"},
	{true, "GET", "/accesslog"},
	{true, "POST", "/accesslog"},
	{true, "GET", "/limits"},
	{true, "GET", "/token/{ns}"},
	{true, "POST", "/token/{ns}"},
	{true, "DELETE", "/token/{ns}/{tok}"},
	{true, "GET", "/token/{ns}/{tok}/limit"},
	{true, "POST", "/token/{ns}/{tok}/limit"},
	{true, "PUT", "/token/{ns}/{tok}/limit"},
	{true, "DELETE", "/token/{ns}/{tok}/limit"},
	{true, "GET", "/queue/{ns}/{q}/config"},
	{true, "PUT", "/queue/{ns}/{q}/config"},
	{true, "GET", "/webhooks"},
	{true, "GET", "/webhook/{ns}/{q}"},
	{true, "PUT", "/webhook/{ns}/{q}"},
	{true, "DELETE", "/webhook/{ns}/{q}"},
}

// badNumbers are values no numeric parameter accepts.
var badNumbers = []string{
	"-1", "-0", "+1", "18446744073709551616", "99999999999999999999999999", "-9223372036854775809",
	"9223372036854775808", "4294967296", "65536", "1e3", "0x10", "1.5", "NaN", "%20", "", "%ff", "\xff\xfe",
	"%c0%af", "%00", "%2d1", "١",
}

// badSegments are path segments with invalid UTF-8, encodings and sizes.
var badSegments = []string{
	"\xff\xfe", "%ff%fe", "%c0%af", "%00", "%2e%2e", "a%2fb", "..", strings.Repeat("n", 300), "-1",
	"99999999999999999999", "_q", "q,,", ",", "%e2%80%ae", "sha256-0123456789ab",
}

// fill replaces the placeholders of a route path.
func fill(path, ns, q, id, tok string) string {
	return strings.NewReplacer("{ns}", ns, "{q}", q, "{id}", id, "{tok}", tok).Replace(path)
}

// TestBadInputEveryRoute: every route of both listeners with bad numbers
// in every parameter, bad path segments, bad headers and bad bodies,
// authenticated (token and basic auth) so that each request reaches the
// route's own parsing, while valid publishes run concurrently. Then no job
// is half-written and the server still works.
func TestBadInputEveryRoute(t *testing.T) {
	l := startBarrageServer(t)
	tok := l.token(t, "ns", auth.Scope{})
	victim := l.token(t, "ns", auth.Scope{}) // what the admin routes act on
	id := "01J5Z8R6Q1X0V3M2B7K9C4D000"
	params := []string{"delay", "ttl", "tries", "ttr", "timeout", "count", "limit", "pool", "status",
		"force_update", "description", "queues", "roles", "token", "seconds", "debug", "gc",
		"delay_ms", "ttl_ms", "ttr_ms", "timeout_ms", "due_at", "priority", "job_key", "keep_try", "receipt", "offset", "cursor", "cron", "tz", "missed"}

	ctx, cancel := context.WithCancel(context.Background())
	valid := startValidPublishes(ctx, t, l, tok)

	type route = struct {
		admin        bool
		method, path string
	}
	work := make(chan func())
	var workers sync.WaitGroup
	for range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for f := range work {
				f()
			}
		}()
	}
	var seenMu sync.Mutex
	seen := map[string]bool{} // answers, to check that requests got deep
	send := func(r route, target, body string, extra ...string) {
		work <- func() {
			answer := sendBad(t, l, tok, r.admin, r.method, target, body, extra...)
			seenMu.Lock()
			seen[answer] = true
			seenMu.Unlock()
		}
	}
	for _, r := range barrageRoutes {
		good := fill(r.path, "ns", "q", id, victim)
		for i, v := range badNumbers {
			var q []string
			for _, p := range params {
				q = append(q, p+"="+v)
			}
			send(r, good+"?"+strings.Join(q, "&"), "")
			if !r.admin {
				send(r, good+"?"+strings.Join(q, "&"), "", "X-Kairos-Extensions: 1")
			}
			if i < 3 {
				send(r, good+"?"+strings.Join(q, ";"), "")
			}
		}
		for _, seg := range badSegments {
			send(r, fill(r.path, seg, "q", id, victim), "")
			send(r, fill(r.path, "ns", seg, id, victim), "")
			send(r, fill(r.path, "ns", "q", seg, seg), "")
		}
		for _, h := range [][]string{
			{"X-Token: \xff\xfe"},
			{"Enable-Job-Version: YES", "Job-Attr-Key: \xff\xfe", "Job-Attr-" + strings.Repeat("K", 200) + ": v"},
			append([]string{"Enable-Job-Version: yes"}, attrLines(40)...),
			{"Content-Type: application/x-www-form-urlencoded; charset=\xff"},
			{"Content-Type: multipart/form-data; boundary=x"},
		} {
			send(r, good, "", h...)
		}
		for _, body := range []string{
			"\xff\xfe\xfd", "[", "[]", "null", `["\xff"]`, "[" + strings.Repeat("[", 100000) + "]",
			`{"read":1e400,"write":-9223372036854775809,"interval":18446744073709551616}`,
			`{"read":-1,"write":-1,"interval":-1}`, `{"read":"1"}`, "description=%zz&token=%ff&queues=\xff&roles=-1",
			"description=d&queues=" + strings.Repeat("q,", 5000), "--x\r\nContent-Disposition: form-data; name=\"description\"\r\n\r\n\xff\r\n--x--",
		} {
			send(r, good, body, "Content-Type: application/x-www-form-urlencoded")
		}
	}
	close(work)
	workers.Wait()
	cancel()
	for _, want := range []string{
		`400 {"error":"invalid delay"}`, `400 {"error":"invalid ttr"}`, `400 {"error":"invalid limit"}`,
		`400 {"error":"request body should be an array of objects"}`, `400 {"error":"invalid status"}`,
		`400 {"error":"namespace name contains forbidden characters"}`, `400 {"error":"invalid queue name(s)"}`,
		`400 {"error":"invalid description"}`, `413 {"error":"body too large"}`, `400 {"error":"invalid job_key"}`,
		`400 {"error":"invalid receipt"}`,
	} {
		if !seen[want] {
			t.Errorf("no request was answered %s: did the barrage reach the routes' own checks?", want)
		}
	}
	if n := valid.Wait(); n == 0 {
		t.Error("no valid publish succeeded during the barrage")
	}
	checkStore(t, l.client, true)
	checkNo5xxLogged(t, l)
	// The server still works.
	hdr := map[string]string{"X-Token": tok}
	if r := liveDo(t, "PUT", l.api+"/api/ns/after?tries=2", strings.NewReader("ok"), hdr); r.status != 201 {
		t.Fatalf("publish after the barrage: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "GET", l.api+"/api/ns/after", nil, hdr); r.status != 200 || !strings.Contains(r.body, `"data":"b2s="`) {
		t.Fatalf("consume after the barrage: %d %s", r.status, r.body)
	}
}

// sendBad sends one bad request, authenticated, checks the answer and
// returns it as "status body".
func sendBad(t *testing.T, l *live, tok string, admin bool, method, target, body string, extra ...string) string {
	addr := l.srv.Addr()
	extra = slices.Clip(extra) // shared between workers: never append in place
	if admin {
		addr = l.srv.AdminAddr()
		extra = append(extra, basicAuthHeader)
	} else {
		extra = append(extra, "X-Token: "+tok)
	}
	res := rawExchange(addr, rawRequest(method, target, body, extra...), 5*time.Second)
	what := fmt.Sprintf("%s %q (body %.30q, headers %.60q)", method, target, body, extra)
	checkAnswer(t, what, res)
	if !admin && res.status >= 400 && !json.Valid([]byte(res.body)) {
		t.Errorf("%s: %d with a non-JSON body %q", what, res.status, res.body)
	}
	return fmt.Sprintf("%d %s", res.status, res.body)
}

func attrLines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("Job-Attr-A%d: \xff%d", i, i)
	}
	return out
}

// validPublishes counts the valid publishes a background loop made.
type validPublishes struct {
	wg sync.WaitGroup
	mu sync.Mutex
	n  int
}

func (v *validPublishes) Wait() int {
	v.wg.Wait()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}

// startValidPublishes publishes, bulk publishes and re-publishes with
// delays until ctx is done, some of them abandoned halfway through the
// body.
func startValidPublishes(ctx context.Context, t *testing.T, l *live, tok string) *validPublishes {
	v := &validPublishes{}
	tok = l.token(t, "valid", auth.Scope{})
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		hdr := map[string]string{"X-Token": tok}
		for i := 0; ctx.Err() == nil; i++ {
			var r liveResponse
			switch i % 4 {
			case 0:
				r = liveDo(t, "PUT", l.api+"/api/valid/q", strings.NewReader("job"), hdr)
				if i%8 == 0 { // chunked, over several reads
					r = liveDo(t, "PUT", l.api+"/api/valid/q", io.MultiReader(strings.NewReader(strings.Repeat("j", 5000)), strings.NewReader("ob")), hdr)
				}
			case 1:
				r = liveDo(t, "PUT", l.api+"/api/valid/q/bulk?delay=30", strings.NewReader(`["a",{"b":1},[2]]`), hdr)
			case 2:
				r = liveDo(t, "PUT", l.api+"/api/valid/q/job/01J5Z8R6Q1X0V3M2B7K9C4D000?delay=1", strings.NewReader("re"), hdr)
			case 3:
				abandonPublish(l.srv.Addr(), tok)
				continue
			}
			if r.status != 201 {
				t.Errorf("valid publish %d: %d %s", i, r.status, r.body)
				return
			}
			v.mu.Lock()
			v.n++
			v.mu.Unlock()
		}
	}()
	return v
}

// abandonPublish starts a publish and hangs up in the middle of its body.
func abandonPublish(addr, tok string) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	fmt.Fprintf(conn, "PUT /api/valid/abandoned HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\nContent-Length: 1000\r\n\r\nhalf a body", tok)
	_ = conn.Close()
}

// reporter is what checkStore needs from a *testing.T.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatal(args ...any)
}

// checkStore checks that no job is half-written: every job value's
// header state (engine/rdb: byte 1 is the version 1, byte 2 the state) has
// the matching entry (ready: the ready list or the priority set; delayed:
// the timer, or the ready list once due; in flight: the timer; dead: the
// dead letter), exactly one, and every entry has its job
// (the tests using it neither ACK nor let jobs expire, which leave stale
// entries by design). With wantJobs, an empty store is an error (the check
// would check nothing).
func checkStore(t reporter, c redis.UniversalClient, wantJobs bool) {
	t.Helper()
	ctx := context.Background()
	// One script reads everything, so that the pump, which keeps moving
	// due jobs, cannot move one between two reads.
	flat, err := c.Eval(ctx, snapshotScript, nil).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]byte{}      // "ns/q/id" → state
	entries := map[string]string{} // "ns/q/id" → its entries: r ready list or priority set, t timer, x dead letter
	for i := 0; i+2 < len(flat); i += 3 {
		kind, k, v := flat[i], flat[i+1], flat[i+2]
		queue := k[strings.IndexByte(k, '}')+1:] // X/{T}ns/q (engine/rdb/keys.go)
		switch kind {
		case "j": // j/{T}ns/q/ID → the first two bytes of the value
			job := queue
			if len(v) < 2 || v[0] != 1 {
				t.Errorf("job %s has a malformed value %q", job, v)
				continue
			}
			jobs[job] = v[1]
		case "t": // timers hold bare IDs
			entries[queue+"/"+v] += "t"
		default: // packed entries
			if len(v) < 4 || len(v) != 4+int(v[2])+int(v[3])<<8 {
				t.Errorf("%s holds a malformed entry %q", k, v)
				continue
			}
			entries[queue+"/"+v[4:]] += map[string]string{"q": "r", "p": "r", "d": "x"}[kind]
		}
	}
	// A delayed job keeps state d when the pump makes it ready.
	want := map[byte][]string{'r': {"r"}, 'd': {"t", "r"}, 'f': {"t"}, 'x': {"x"}}
	for job, state := range jobs {
		if !slices.Contains(want[state], entries[job]) {
			t.Errorf("job %s in state %q has entries %q, want one of %q", job, state, entries[job], want[state])
		}
	}
	for e := range entries {
		if _, ok := jobs[e]; !ok {
			t.Errorf("job %s has an entry but no value", e)
		}
	}
	if len(jobs) == 0 && wantJobs {
		t.Errorf("no job at all: the check checked nothing")
	}
	if n, _ := c.Exists(ctx, rdb.ReadyKey("valid", "abandoned"), rdb.TimerKey("valid", "abandoned")).Result(); n != 0 {
		t.Errorf("abandoned publishes were written")
	}
}

// snapshotScript returns kind, key, value triples for every job value
// (its first two bytes), timer member, ready-list, priority-set and
// dead-letter entry of the pool.
const snapshotScript = `
local out = {}
local function add(kind, k, v) out[#out + 1] = kind; out[#out + 1] = k; out[#out + 1] = v end
for _, k in ipairs(redis.call('KEYS', 'j/*')) do add('j', k, redis.call('GETRANGE', k, 0, 1)) end
for _, k in ipairs(redis.call('KEYS', 't/*')) do
  for _, m in ipairs(redis.call('ZRANGE', k, 0, -1)) do add('t', k, m) end
end
for _, k in ipairs(redis.call('KEYS', 'p/*')) do
  for _, m in ipairs(redis.call('ZRANGE', k, 0, -1)) do add('p', k, m) end
end
for _, kind in ipairs({'q', 'd'}) do
  for _, k in ipairs(redis.call('KEYS', kind .. '/*')) do
    for _, m in ipairs(redis.call('LRANGE', k, 0, -1)) do add(kind, k, m) end
  end
end
return out
`

var code5xx = regexp.MustCompile(`\bcode=5\d\d\b`)

// checkNo5xxLogged fails when the access log recorded a 5xx.
func checkNo5xxLogged(t *testing.T, l *live) {
	t.Helper()
	for _, line := range strings.Split(l.logs.String(), "\n") {
		if code5xx.MatchString(line) {
			t.Errorf("5xx logged: %s", line)
		}
	}
}

// TestBadInputHugeBodies: bodies over their limits are refused with 413
// while being read, without the server buffering them: sending 50 MiB to
// publish grows the heap by a few MiB at most.
func TestBadInputHugeBodies(t *testing.T) {
	l := startBarrageServer(t)
	tok := l.token(t, "ns", auth.Scope{})
	cases := []struct {
		name, method, path string
		admin              bool
		prefix             string // the body starts with this, then spaces
		send               int64  // bytes to stream, chunked
		announce           int64  // Content-Length to announce instead (no body sent)
		maxAlloc           uint64
		wantBody           string
	}{
		{name: "publish, 50 MiB chunked", method: "PUT", path: "/api/ns/q", send: 50 << 20, maxAlloc: 16 << 20, wantBody: `{"error":"body too large"}`},
		{name: "re-publish, 50 MiB chunked", method: "PUT", path: "/api/ns/q/job/01J5Z8R6Q1X0V3M2B7K9C4D000", send: 50 << 20, maxAlloc: 16 << 20, wantBody: `{"error":"body too large"}`},
		{name: "publish, 50 MiB announced", method: "PUT", path: "/api/ns/q", announce: 50 << 20, maxAlloc: 4 << 20, wantBody: `{"error":"body too large"}`},
		{name: "bulk, 1 TiB announced", method: "PUT", path: "/api/ns/q/bulk", announce: 1 << 40, maxAlloc: 4 << 20, wantBody: `{"error":"body too large"}`},
		{name: "admin token form, 20 MiB chunked", method: "POST", path: "/token/ns", admin: true, send: 20 << 20, maxAlloc: 8 << 20},
		{name: "admin limit, 20 MiB chunked", method: "POST", path: "/token/ns/" + tok + "/limit", admin: true, prefix: `{"read":`, send: 20 << 20, maxAlloc: 8 << 20},
		{name: "bulk, 64 KiB over its cap", method: "PUT", path: "/api/ns/q/bulk", prefix: "[", send: maxBulkBody + 64<<10, maxAlloc: maxBulkBody + maxBulkBody/2, wantBody: `{"error":"body too large"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, auth := l.srv.Addr(), "X-Token: "+tok
			if tc.admin {
				addr, auth = l.srv.AdminAddr(), basicAuthHeader
			}
			head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: localhost\r\n%s\r\nContent-Type: application/x-www-form-urlencoded\r\n", tc.method, tc.path, auth)
			if tc.announce > 0 {
				head += fmt.Sprintf("Content-Length: %d\r\n\r\n", tc.announce)
			} else {
				head += "Transfer-Encoding: chunked\r\n\r\n"
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			status, body, sent := streamBody(t, addr, head, tc.prefix, tc.send)
			runtime.ReadMemStats(&after)
			if status != 413 || tc.wantBody != "" && body != tc.wantBody {
				t.Errorf("%d %q, want 413 %s", status, body, tc.wantBody)
			}
			if grown := after.TotalAlloc - before.TotalAlloc; grown > tc.maxAlloc {
				t.Errorf("the process allocated %d MiB for a refused body (%d MiB sent), want < %d MiB",
					grown>>20, sent>>20, tc.maxAlloc>>20)
			}
		})
	}
	checkNo5xxLogged(t, l)
	// The token, the registry, the layout and usage markers and the audit
	// log of the token's creation; no job.
	keys, _ := l.client.Keys(context.Background(), "*").Result()
	var left []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "tk/") && !strings.HasPrefix(k, "m/") && k != "kairos/layout" && k != "kairos/usage" && !strings.HasPrefix(k, "{kairos:audit}:") {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Errorf("refused bodies left keys: %q", left)
	}
}

// streamBody sends head, then up to n bytes (prefix, then spaces) as
// 64 KiB chunks while reading the answer; it returns the answer and how
// much was sent before the server stopped reading.
func streamBody(t *testing.T, addr, head, prefix string, n int64) (status int, body string, sent int64) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n == 0 {
			return
		}
		spaces := []byte(strings.Repeat(" ", 64<<10))
		chunk := []byte(prefix + string(spaces[len(prefix):]))
		size := []byte(fmt.Sprintf("%x\r\n", len(chunk)))
		for sent < n {
			if sent > 0 {
				chunk = spaces
			}
			if _, err := conn.Write(size); err != nil {
				return
			}
			if _, err := conn.Write(chunk); err != nil {
				return
			}
			if _, err := conn.Write([]byte("\r\n")); err != nil {
				return
			}
			sent += int64(len(chunk))
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = conn.Close()
	<-done
	return resp.StatusCode, string(b), sent
}

// fakeT collects what checkStore reports.
type fakeT struct{ errors []string }

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatal(args ...any) { f.errors = append(f.errors, fmt.Sprint(args...)) }

// TestBadInputCheckStoreFindsOrphans guards checkStore itself: a body
// without an entry and an entry without a body are both reported.
func TestBadInputCheckStoreFindsOrphans(t *testing.T) {
	l := startLive(t, liveOptions{})
	ctx := context.Background()
	header := "\x01r" + strings.Repeat("\x00", 20)
	if err := l.client.Set(ctx, rdb.JobKey("ns", "q", "01J5Z8R6Q1X0V3M2B7K9C4D000"), header+"orphan", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.client.LPush(ctx, rdb.ReadyKey("ns", "q2"), "\x01\x00\x02\x00ab").Err(); err != nil {
		t.Fatal(err)
	}
	ft := &fakeT{}
	checkStore(ft, l.client, true)
	if len(ft.errors) != 2 {
		t.Errorf("checkStore reported %q, want the orphan body and the orphan entry", ft.errors)
	}
}
