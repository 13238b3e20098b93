package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

// Fuzz targets for every parser of the HTTP layer: query parameters
// (publish, consume, dead letter), the attribute headers, bulk bodies,
// and whole requests on both listeners. They run against a server with
// fake engines; their seeds run with every `go test`, and scripts/fuzz.sh
// fuzzes each for a few seconds.

// fuzzEnv is a server whose default engine records the last request.
type fuzzEnv struct {
	*testEnv
	publish *engine.PublishRequest
	batch   []*engine.PublishRequest
	consume *engine.ConsumeRequest
	limit   int64
	ttl     time.Duration
}

func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	fe := &fuzzEnv{testEnv: newEnv(tb)}
	okEngine(fe.eng)
	okEngine(fe.engB)
	fe.eng.publish = func(_ context.Context, r *engine.PublishRequest) (string, error) {
		fe.publish = r
		return "ID", nil
	}
	fe.eng.publishBatch = func(_ context.Context, r []*engine.PublishRequest) ([]string, error) {
		fe.batch = r
		return repeat("ID", len(r)), nil
	}
	fe.eng.consume = func(_ context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		fe.consume = r
		return []*engine.Job{{Namespace: r.Namespace, Queue: r.Queues[0], ID: "ID"}}, nil
	}
	fe.eng.respawn = func(_ context.Context, _, _ string, limit int64, ttl time.Duration) (int64, error) {
		fe.limit, fe.ttl = limit, ttl
		return 0, nil
	}
	fe.eng.deleteDead = func(_ context.Context, _, _ string, limit int64) (int64, error) {
		fe.limit = limit
		return 0, nil
	}
	return fe
}

func (fe *fuzzEnv) reset() {
	fe.publish, fe.batch, fe.consume, fe.limit, fe.ttl = nil, nil, nil, 0, 0
	fe.logs.Reset()
}

// serve runs a request built by hand (any method, path and query bytes,
// which httptest.NewRequest would refuse) against h.
func serve(h http.Handler, method, path, rawQuery string, header http.Header, body []byte) *httptest.ResponseRecorder {
	req := &http.Request{
		Method:     method,
		URL:        &url.URL{Path: path, RawQuery: rawQuery},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     header,
		Host:       "localhost", // a name the admin listener answers
		RemoteAddr: "192.0.2.1:1234",
		RequestURI: path,
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req = req.WithContext(context.Background())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// checkFuzzAnswer fails on a 5xx, and on a 4xx whose body is not JSON.
func checkFuzzAnswer(t *testing.T, what string, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("%s: %d %s", what, w.Code, w.Body)
	}
	if w.Code >= 400 && w.Body.Len() > 0 && !json.Valid(w.Body.Bytes()) {
		t.Fatalf("%s: %d with a non-JSON body %q", what, w.Code, w.Body)
	}
}

// firstUint is the oracle of the strict unsigned parameters: the first
// value of name in the query as Go parses it.
func firstUint(vals url.Values, name string, bits int, def uint64) (uint64, bool) {
	v, ok := vals[name]
	if !ok {
		return def, true
	}
	n, err := strconv.ParseUint(v[0], 10, bits)
	return n, err == nil
}

// onlyKeys reports whether vals has no key outside keys.
func onlyKeys(vals url.Values, keys ...string) bool {
	for k := range vals {
		found := false
		for _, want := range keys {
			found = found || k == want
		}
		if !found {
			return false
		}
	}
	return true
}

var querySeeds = []string{
	"", "delay=0&ttl=0&tries=1", "delay=10&ttl=5", "ttl=4294967295&delay=4294967295&tries=65535",
	"delay=-1", "ttl=4294967296", "tries=0", "tries=65536", "delay=1e3", "ttl=0x10", "tries=%201", "delay=%ff",
	"delay=1&delay=x", "ttl=+1", "delay=1;ttl=2", "%zz=1&tries=2", "ttr=0&timeout=0&count=1",
	"ttr=4294967295&timeout=4294967295&count=100", "count=0", "count=101", "count=-1", "timeout=99999999999999999999",
	"limit=1&ttl=0", "limit=0", "limit=-9223372036854775808", "ttl=9223372036", "ttl=9223372037", "limit=9223372036854775807",
	"token=x&delay=1", "freeze_tries=true",
}

// FuzzPublishParams: the publish route parses delay, ttl and tries exactly
// as strconv.ParseUint with their widths does (first value wins), refuses
// the rest with a 400, and never answers a 5xx.
func FuzzPublishParams(f *testing.F) {
	for _, s := range querySeeds {
		f.Add(s)
	}
	fe := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		fe.reset()
		w := serve(fe.srv.Handler(), "PUT", "/api/ns/q", rawQuery, http.Header{"X-Token": {goodToken}}, []byte("body"))
		checkFuzzAnswer(t, "PUT ?"+rawQuery, w)
		vals, _ := url.ParseQuery(rawQuery)
		delay, okD := firstUint(vals, "delay", 32, 0)
		ttl, okT := firstUint(vals, "ttl", 32, 86400)
		tries, okR := firstUint(vals, "tries", 16, 1)
		valid := okD && okT && okR && (ttl == 0 || ttl >= delay) && tries > 0
		switch {
		case w.Code == 201:
			r := fe.publish
			if !valid || r == nil || r.Delay != secs(delay) || r.TTL != secs(ttl) || uint64(r.Tries) != tries {
				t.Fatalf("?%s published %+v; the query says delay %d ttl %d tries %d (valid %v)", rawQuery, r, delay, ttl, tries, valid)
			}
		case valid && onlyKeys(vals, "delay", "ttl", "tries", "token"):
			t.Fatalf("?%s: %d %s, want 201", rawQuery, w.Code, w.Body)
		case w.Code != 400 || fe.publish != nil:
			t.Fatalf("?%s: %d %s (engine called: %v), want 400 without publishing", rawQuery, w.Code, w.Body, fe.publish != nil)
		}
	})
}

// FuzzConsumeParams: ttr, timeout (capped at MaxTimeoutSecond) and count
// (1..100) reach the engine as parsed; anything else is a 400.
func FuzzConsumeParams(f *testing.F) {
	for _, s := range querySeeds {
		f.Add(s, "q")
	}
	f.Add("count=2", "q1,q2,,q3")
	f.Add("", ",,")
	f.Add("", "_q,q")
	fe := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, rawQuery, queues string) {
		fe.reset()
		w := serve(fe.srv.Handler(), "GET", "/api/ns/"+queues, rawQuery, http.Header{"X-Token": {goodToken}}, nil)
		checkFuzzAnswer(t, "GET "+queues+"?"+rawQuery, w)
		vals, _ := url.ParseQuery(rawQuery)
		ttr, okR := firstUint(vals, "ttr", 32, 120)
		timeout, okT := firstUint(vals, "timeout", 32, 0)
		count, okC := firstUint(vals, "count", 32, 1)
		valid := okR && okT && okC && count >= 1 && count <= engine.MaxBatchConsume
		r := fe.consume
		if w.Code != 200 {
			if r != nil {
				t.Fatalf("?%s: %d but the engine was called with %+v", rawQuery, w.Code, r)
			}
			if valid && w.Code == 400 && !strings.Contains(w.Body.String(), "queue") && onlyKeys(vals, "ttr", "timeout", "count", "token", "freeze_tries") {
				t.Fatalf("?%s: %d %s, want the job", rawQuery, w.Code, w.Body)
			}
			return
		}
		if !valid || r == nil || r.TTR != secs(ttr) || r.Timeout != secs(min(timeout, 600)) || uint64(r.Count) != count {
			t.Fatalf("?%s consumed with %+v; the query says ttr %d timeout %d count %d (valid %v)", rawQuery, r, ttr, timeout, count, valid)
		}
		for _, q := range r.Queues {
			if !engine.ValidQueueName(q) {
				t.Fatalf("queues %q reached the engine as %q", queues, r.Queues)
			}
		}
	})
}

// FuzzDeadLetterParams: respawn's limit (> 0) and ttl (0..9223372036 s)
// and delete's limit reach the engine as parsed; the rest is a 400.
func FuzzDeadLetterParams(f *testing.F) {
	for _, s := range querySeeds {
		f.Add(s)
	}
	fe := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		vals, _ := url.ParseQuery(rawQuery)
		first := func(name string, def int64) (int64, bool) {
			v, ok := vals[name]
			if !ok {
				return def, true
			}
			n, err := strconv.ParseInt(v[0], 10, 64)
			return n, err == nil
		}
		limit, okL := first("limit", 1)
		ttl, okT := first("ttl", 86400)
		for _, method := range []string{"PUT", "DELETE"} {
			fe.reset()
			w := serve(fe.srv.Handler(), method, "/api/ns/q/deadletter", rawQuery, http.Header{"X-Token": {goodToken}}, nil)
			checkFuzzAnswer(t, method+" ?"+rawQuery, w)
			valid := okL && limit > 0
			if method == "PUT" {
				valid = valid && okT && ttl >= 0 && ttl <= math.MaxInt64/int64(time.Second)
			}
			ok := w.Code == 200 || w.Code == 204
			switch {
			case ok != valid:
				t.Fatalf("%s ?%s: %d %s, valid %v (limit %d ttl %d)", method, rawQuery, w.Code, w.Body, valid, limit, ttl)
			case ok && (fe.limit != limit || method == "PUT" && fe.ttl != time.Duration(ttl)*time.Second):
				t.Fatalf("%s ?%s reached the engine as limit %d ttl %v", method, rawQuery, fe.limit, fe.ttl)
			case !ok && w.Code != 400:
				t.Fatalf("%s ?%s: %d %s, want 400", method, rawQuery, w.Code, w.Body)
			}
		}
	})
}

// FuzzAttributes: whatever the Job-Attr-* headers, a versioned publish
// stores at most 16 attributes with keys of at most 32 lower-case bytes and
// non-empty values of at most 128 bytes, or is refused with a 400.
func FuzzAttributes(f *testing.F) {
	f.Add("YES", "Trace\nabc\nJob-Attr-X\ny")
	f.Add("yes", strings.Repeat("K\nv\n", 20))
	f.Add("no", "Trace\nabc")
	f.Add("YES", strings.Repeat("L", 40)+"\n"+strings.Repeat("v", 200)+"\nl\n\xff")
	f.Add("YES", "A\n\nB\n ")
	fe := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, version, pairs string) {
		fe.reset()
		h := http.Header{"X-Token": {goodToken}, "Enable-Job-Version": {version}}
		lines := strings.Split(pairs, "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			// Only what net/http lets through: a token as the name, no
			// control characters but tab in the value.
			if !validMethod(lines[i]) || strings.ContainsFunc(lines[i+1], func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
				continue
			}
			h.Add(http.CanonicalHeaderKey("Job-Attr-"+lines[i]), lines[i+1])
		}
		w := serve(fe.srv.Handler(), "PUT", "/api/ns/q", "", h, []byte("body"))
		checkFuzzAnswer(t, "attributes "+pairs, w)
		if w.Code != 201 {
			if w.Code != 400 || w.Body.String() != `{"error":"too many attributes, cannot exceed 16"}` {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			return
		}
		r := fe.publish
		if r.Versioned != strings.EqualFold(version, "YES") {
			t.Fatalf("version header %q gave Versioned %v", version, r.Versioned)
		}
		if !r.Versioned && r.Attributes != nil {
			t.Fatalf("an unversioned job got attributes %q", r.Attributes)
		}
		if len(r.Attributes) > 16 {
			t.Fatalf("%d attributes stored", len(r.Attributes))
		}
		for k, v := range r.Attributes {
			if len(k) > 32 || k != strings.ToLower(k) || v == "" || len(v) > 128 {
				t.Fatalf("attribute %q=%q breaks the limits", k, v)
			}
		}
	})
}

// FuzzBulkBody: a bulk body is published only when it is a JSON array of
// 1..64 elements of at most 1 MiB, each element's raw text becoming one
// job body; anything else is a 400 or 413 and publishes nothing.
func FuzzBulkBody(f *testing.F) {
	for _, s := range []string{
		`["hello msg",123456,{"msg":"success"},["foo","bar"],true]`, `[]`, `null`, `[`, `{}`, `"a"`, `[null]`,
		` [ 1 , "x" ] `, `[1]x`, "[\"\xff\"]", `[` + strings.Repeat(`1,`, 64) + `1]`, `[[[[[[[[[[]]]]]]]]]]`,
		`[1e400]`, `[-0]`, `["\u0000"]`, "",
	} {
		f.Add([]byte(s))
	}
	fe := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fe.reset()
		w := serve(fe.srv.Handler(), "PUT", "/api/ns/q/bulk", "", http.Header{"X-Token": {goodToken}}, body)
		checkFuzzAnswer(t, "bulk", w)
		var elems []json.RawMessage
		err := json.Unmarshal(body, &elems)
		valid := err == nil && len(elems) >= 1 && len(elems) <= engine.MaxBulkPublish
		for _, e := range elems {
			valid = valid && len(e) <= engine.MaxBodySize
		}
		if (w.Code == 201) != valid {
			t.Fatalf("bulk %q: %d %s, valid %v", body, w.Code, w.Body, valid)
		}
		if !valid {
			if fe.batch != nil || w.Code != 400 && w.Code != 413 {
				t.Fatalf("bulk %q: %d %s, engine called %v", body, w.Code, w.Body, fe.batch != nil)
			}
			return
		}
		if len(fe.batch) != len(elems) {
			t.Fatalf("bulk %q: %d jobs published, want %d", body, len(fe.batch), len(elems))
		}
		for i, r := range fe.batch {
			if !bytes.Equal(r.Body, elems[i]) || !json.Valid(r.Body) {
				t.Fatalf("job %d body %q, want the element's raw text %q", i, r.Body, elems[i])
			}
		}
	})
}

// FuzzRequest throws arbitrary methods, paths, queries, tokens and bodies
// at both listeners (with accounts configured): never a 5xx or a panic,
// and the public API's errors are JSON.
func FuzzRequest(f *testing.F) {
	for _, s := range [][5]string{
		{"PUT", "/api/ns/q", "delay=1", goodToken, "x"},
		{"GET", "/api/ns/q1,q2", "count=3&timeout=1", goodToken, ""},
		{"DELETE", "/api/ns/q/job/01J5Z8R6Q1X0V3M2B7K9C4D000", "", poolBToken, ""},
		{"GET", "/api/ns/q/size", "", "", ""},
		{"PUT", "/api/ns/q/deadletter", "limit=2&ttl=0", goodToken, ""},
		{"GET", "/api/\xff/q/peek", "", "\xff", ""},
		{"POST", "/token/ns", "description=d&queues=q&roles=consume", "", ""},
		{"PUT", "/token/ns/" + goodToken + "/limit", "", "", `{"read":1,"write":1,"interval":1}`},
		{"DELETE", "/token/ns/b:sha256-0123456789ab", "", "", ""},
		{"GET", "/info", "pool=b", "", ""},
		{"POST", "/accesslog", "status=enable", "", ""},
		{"GET", "/debug/pprof/cmdline", "", "", ""},
		{"GET", "/api/ns/q/", "token=" + goodToken, "", ""},
		{"PRI", "*", "", "", ""},
		{"PUT", "/api/ns/q/job/01J5Z8R6Q1X0V3M2B7K9C4D000/release", "receipt=x&delay_ms=5", goodToken, ""},
		{"PUT", "/api/ns/q", "priority=300&job_key=k&delay_ms=1&ttl_ms=99999999999999999999", goodToken, "x"},
		{"GET", "/api/ns/q/deadletter/jobs", "limit=all&offset=-1", goodToken, ""},
		{"PUT", "/queue/ns/q/config", "", "", `{"backoff":"e:1:2:3:0.5","dead_ttl_ms":-1}`},
		{"PUT", "/webhook/ns/q", "", "", `{"url":"http://x","concurrency":-1}`},
	} {
		f.Add(s[0], s[1], s[2], s[3], []byte(s[4]))
	}
	fe := newFuzzEnv(f)
	fe.tokens.create = func(context.Context, string, string, string, string, auth.Scope) (string, error) {
		return goodToken, nil
	}
	fe.tokens.list = func(context.Context, string, string, bool) (map[string]string, error) {
		return map[string]string{}, nil
	}
	fe.tokens.del = func(context.Context, string, string, string) error { return nil }
	fe.throttler.get = func(context.Context, string, string, string) (auth.Limit, bool, error) {
		return auth.Limit{}, false, nil
	}
	fe.throttler.add = func(context.Context, string, string, string, auth.Limit) error { return nil }
	fe.throttler.set = func(context.Context, string, string, string, auth.Limit) error { return nil }
	fe.throttler.del = func(context.Context, string, string, string) error { return nil }
	fe.throttler.list = func(context.Context, bool) ([]auth.LimitEntry, error) { return nil, nil }
	f.Fuzz(func(t *testing.T, method, path, rawQuery, token string, body []byte) {
		if !validMethod(method) || strings.Contains(path, "/debug/pprof/profile") || strings.Contains(path, "/debug/pprof/trace") {
			return // net/http refuses such methods; CPU profiles and traces block for seconds
		}
		fe.reset()
		h := http.Header{}
		if token != "" {
			h.Set("X-Token", token)
		}
		for name, handler := range map[string]http.Handler{"api": fe.srv.Handler(), "admin": fe.srv.AdminHandler()} {
			w := serve(handler, method, path, rawQuery, h, body)
			if w.Code == 501 && notConfigured[w.Body.String()] {
				continue // the fakes have no extension engine and no webhooks
			}
			if w.Code >= 500 {
				t.Fatalf("%s: %s %q ?%q: %d %s", name, method, path, rawQuery, w.Code, w.Body)
			}
			if name == "api" && w.Code >= 400 && !json.Valid(w.Body.Bytes()) {
				t.Fatalf("api: %s %q: %d with a non-JSON body %q", method, path, w.Code, w.Body)
			}
		}
	})
}

// notConfigured are the 501 answers of a server that has no webhook
// manager, as FuzzRequest's.
var notConfigured = map[string]bool{
	`{"error":"webhooks are not enabled on this server"}`: true,
}

// validMethod reports whether m is a token of RFC 9110, as net/http wants
// methods and header names to be.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// FuzzQueryParam checks getQuery's in-place scan against url.ParseQuery,
// which gin's c.GetQuery uses: for every query it calls plain, the first
// value of every name in it (and of a name not in it) is the same.
func FuzzQueryParam(f *testing.F) {
	for _, s := range []string{
		"ttl=3600&tries=3&delay=0", "a=1&a=2", "a&a=1", "=x&a", "&&a=&", "a=b=c",
		"token=x%20y", "a=1;b=2", "a+b=1", "delay=1&delay=x", "",
	} {
		f.Add(s, "a")
	}
	f.Fuzz(func(t *testing.T, raw, name string) {
		if _, _, plain := plainQuery(raw, name); !plain {
			if len(raw) <= maxPlainQuery && !strings.ContainsAny(raw, "%+;") {
				t.Fatalf("plainQuery refused the plain query %q", raw)
			}
			return
		}
		want, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatalf("plain query %q: url.ParseQuery: %v", raw, err)
		}
		names := []string{name}
		for k := range want {
			names = append(names, k)
		}
		for _, n := range names {
			v, found, _ := plainQuery(raw, n)
			wv, wok := want[n]
			if found != wok || (wok && v != wv[0]) {
				t.Fatalf("query %q, %q: got %q %v, url.ParseQuery %q", raw, n, v, found, wv)
			}
		}
	})
}
