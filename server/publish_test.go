package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

func TestPublish(t *testing.T) {
	const id = "01HZZZZZZZZZZZZZZZZZ000000"
	long := strings.Repeat("k", 300)
	tests := []struct {
		name   string
		query  string
		body   string
		header map[string]string
		engErr error
		status int
		resp   string
		want   *engine.PublishRequest // nil: the engine must not be called
	}{
		{
			name: "defaults", body: "hello", status: 201,
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("hello"), TTL: 86400 * time.Second, Tries: 1},
		},
		{
			name: "explicit params", query: "?delay=10&ttl=20&tries=3", body: "x", status: 201,
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 20 * time.Second, Delay: 10 * time.Second, Tries: 3},
		},
		{
			name: "ttl 0 is forever, longer than any delay", query: "?delay=4294967295&ttl=0&tries=65535", status: 201,
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte{}, Delay: 4294967295 * time.Second, Tries: 65535},
		},
		{
			name: "ttl equal to delay", query: "?delay=5&ttl=5", body: "x", status: 201,
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 5 * time.Second, Delay: 5 * time.Second, Tries: 1},
		},
		{
			name: "versioned with attributes", body: "x", status: 201,
			header: map[string]string{
				"Enable-Job-Version": "yes",
				"Job-Attr-Foo":       "bar",
				"job-attr-my_key":    "v",
				"Job-Attr-Empty":     "",
				"Job-Attr-" + long:   strings.Repeat("v", 300),
			},
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{
				Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1, Versioned: true,
				Attributes: map[string]string{"foo": "bar", "my_key": "v", strings.Repeat("k", 32): strings.Repeat("v", 128)},
			},
		},
		{
			name: "attributes ignored without the version header", body: "x", status: 201,
			header: map[string]string{"Enable-Job-Version": "NO", "Job-Attr-Foo": "bar"},
			resp:   `{"job_id":"` + id + `","msg":"published"}`,
			want:   &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1},
		},
		{
			name: "versioned without attributes", body: "x", status: 201,
			header: map[string]string{"Enable-Job-Version": "YES"},
			resp:   `{"job_id":"` + id + `","msg":"published"}`,
			want:   &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1, Versioned: true},
		},
		{name: "negative delay", query: "?delay=-1", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "non-numeric delay", query: "?delay=abc", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "empty delay", query: "?delay=", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "plus-signed delay", query: "?delay=%2B1", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "delay overflows uint32", query: "?delay=4294967296", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "delay checked before ttl", query: "?delay=x&ttl=x&tries=x", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "ttl overflows uint32", query: "?ttl=4294967296", status: 400, resp: `{"error":"invalid ttl"}`},
		{name: "fractional ttl", query: "?ttl=1.5", status: 400, resp: `{"error":"invalid ttl"}`},
		{name: "ttl shorter than delay", query: "?ttl=5&delay=10", status: 400, resp: `{"error":"ttl is shorter than delay"}`},
		{name: "ttl/delay checked before tries", query: "?ttl=5&delay=10&tries=0", status: 400, resp: `{"error":"ttl is shorter than delay"}`},
		{name: "tries overflows uint16", query: "?tries=65536", status: 400, resp: `{"error":"invalid tries"}`},
		{name: "negative tries", query: "?tries=-1", status: 400, resp: `{"error":"invalid tries"}`},
		{name: "zero tries", query: "?tries=0", status: 400, resp: `{"error":"tries shouldn't be zero"}`},
		{name: "params checked before body size", query: "?tries=0", body: strings.Repeat("x", engine.MaxBodySize+1), status: 400, resp: `{"error":"tries shouldn't be zero"}`},
		{name: "body too large", body: strings.Repeat("x", engine.MaxBodySize+1), status: 413, resp: `{"error":"body too large"}`},
		{
			name: "body of exactly 1 MiB", body: strings.Repeat("x", engine.MaxBodySize), status: 201,
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte(strings.Repeat("x", engine.MaxBodySize)), TTL: 86400 * time.Second, Tries: 1},
		},
		{name: "17 attributes", body: "x", header: attrHeaders(17), status: 400, resp: `{"error":"too many attributes, cannot exceed 16"}`},
		{
			name: "16 attributes", body: "x", header: attrHeaders(16), status: 201,
			resp: `{"job_id":"` + id + `","msg":"published"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1, Versioned: true, Attributes: attrMap(16)},
		},
		{
			name: "engine failure", body: "x", engErr: errUnexpected, status: 500, resp: `{"error":"internal error"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1},
		},
		{
			name: "engine refuses", body: "x", engErr: fmt.Errorf("publish: %w", engine.ErrInvalid), status: 400, resp: `{"error":"invalid request"}`,
			want: &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), TTL: 86400 * time.Second, Tries: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got *engine.PublishRequest
			env.eng.publish = func(_ context.Context, req *engine.PublishRequest) (string, error) {
				got = req
				if tc.engErr != nil {
					return "", tc.engErr
				}
				return id, nil
			}
			h := map[string]string{"X-Token": goodToken}
			for k, v := range tc.header {
				h[k] = v
			}
			w := env.api(t, request{method: "PUT", target: "/api/ns/q" + tc.query, body: tc.body, header: h})
			expect(t, w, tc.status, tc.resp)
			if tc.want == nil {
				if calls := env.eng.Calls(); len(calls) != 0 {
					t.Errorf("engine called: %v", calls)
				}
				return
			}
			if got == nil {
				t.Fatalf("engine not called")
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("publish request\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func attrHeaders(n int) map[string]string {
	h := map[string]string{"Enable-Job-Version": "YES"}
	for i := range n {
		h[fmt.Sprintf("Job-Attr-K%02d", i)] = "v"
	}
	return h
}

func attrMap(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%02d", i)] = "v"
	}
	return m
}

// TestPublishBodyLimitWithoutContentLength checks that a chunked body over
// 1 MiB is refused while reading, without buffering it all.
func TestPublishBodyLimitWithoutContentLength(t *testing.T) {
	env := newEnv(t)
	read := 0
	r := request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)}.build(t)
	r.ContentLength = -1
	r.Body = &countingReader{n: 64 << 20, read: &read}
	w := httptest.NewRecorder()
	env.srv.Handler().ServeHTTP(w, r)
	expect(t, w, 413, `{"error":"body too large"}`)
	if read > engine.MaxBodySize+64<<10 {
		t.Errorf("read %d bytes of the body, want about 1 MiB", read)
	}
	if calls := env.eng.Calls(); len(calls) != 0 {
		t.Errorf("engine called: %v", calls)
	}
}

// countingReader yields n bytes of 'x' and counts what was read.
type countingReader struct {
	n    int
	read *int
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	*r.read += k
	return k, nil
}

func (r *countingReader) Close() error { return nil }

func TestRePublish(t *testing.T) {
	tests := []struct {
		name     string
		query    string
		body     string
		status   int
		resp     string
		replaced string // "" = engine not called
	}{
		{name: "replaces the old job atomically", query: "?delay=0&ttl=10&tries=1", body: "new", status: 201,
			resp: `{"job_id":"NEW","msg":"published"}`, replaced: "OLD"},
		{name: "invalid delay deletes nothing", query: "?delay=x", status: 400, resp: `{"error":"invalid delay"}`},
		{name: "invalid ttl deletes nothing", query: "?ttl=-5", status: 400, resp: `{"error":"invalid ttl"}`},
		{name: "zero tries deletes nothing", query: "?tries=0", status: 400, resp: `{"error":"tries shouldn't be zero"}`},
		{name: "too large body deletes nothing", body: strings.Repeat("x", engine.MaxBodySize+1), status: 413, resp: `{"error":"body too large"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got *engine.PublishRequest
			env.eng.publish = func(_ context.Context, req *engine.PublishRequest) (string, error) {
				got = req
				return "NEW", nil
			}
			w := env.api(t, request{method: "PUT", target: "/api/ns/q/job/OLD" + tc.query, body: tc.body, header: tok(goodToken)})
			expect(t, w, tc.status, tc.resp)
			if tc.replaced == "" {
				if calls := env.eng.Calls(); len(calls) != 0 {
					t.Errorf("engine called: %v", calls)
				}
				return
			}
			if calls := env.eng.Calls(); !reflect.DeepEqual(calls, []string{"Publish"}) {
				t.Errorf("engine calls %v, want one Publish", calls)
			}
			if got.Replaces != tc.replaced || string(got.Body) != tc.body || got.TTL != 10*time.Second {
				t.Errorf("publish request %+v", got)
			}
		})
	}
}

func TestPublishBulk(t *testing.T) {
	big := `"` + strings.Repeat("x", engine.MaxBodySize-1) + `"` // 1 MiB + 1 byte
	many := "[" + strings.Repeat("1,", engine.MaxBulkPublish) + "1]"
	max := "[" + strings.Repeat("1,", engine.MaxBulkPublish-1) + "1]"
	tests := []struct {
		name   string
		query  string
		body   string
		header map[string]string
		status int
		resp   string
		bodies []string // nil: the engine must not be called
		engErr error
	}{
		{
			name: "raw element bodies", body: `["hello msg",123456,{"msg":"success"},["foo","bar"],true,null]`, status: 201,
			resp:   `{"job_ids":["id0","id1","id2","id3","id4","id5"],"msg":"published"}`,
			bodies: []string{`"hello msg"`, `123456`, `{"msg":"success"}`, `["foo","bar"]`, `true`, `null`},
		},
		{
			name: "inner whitespace kept", body: " [ {\"a\" :  1} ,\n \"x\" ] ", status: 201,
			resp:   `{"job_ids":["id0","id1"],"msg":"published"}`,
			bodies: []string{`{"a" :  1}`, `"x"`},
		},
		{name: "64 jobs", body: max, status: 201, resp: bulkIDs(engine.MaxBulkPublish), bodies: repeat("1", engine.MaxBulkPublish)},
		{name: "object", body: `{"a":1}`, status: 400, resp: `{"error":"request body should be an array of objects"}`},
		{name: "truncated", body: `["a",`, status: 400, resp: `{"error":"request body should be an array of objects"}`},
		{name: "empty body", body: ``, status: 400, resp: `{"error":"request body should be an array of objects"}`},
		{name: "null", body: `null`, status: 400, resp: `{"error":"no jobs"}`},
		{name: "empty array", body: `[]`, status: 400, resp: `{"error":"no jobs"}`},
		{name: "65 jobs", body: many, status: 400, resp: `{"error":"too many jobs"}`},
		{name: "element too large", body: `[1,` + big + `]`, status: 413, resp: `{"error":"job too large"}`},
		{name: "body over the bulk cap", body: `[` + strings.Repeat(" ", maxBulkBody) + `1]`, status: 413, resp: `{"error":"body too large"}`},
		{name: "params first", query: "?ttl=1&delay=2", body: `[1]`, status: 400, resp: `{"error":"ttl is shorter than delay"}`},
		{name: "too many attributes", body: `[1]`, header: attrHeaders(17), status: 400, resp: `{"error":"too many attributes, cannot exceed 16"}`},
		{name: "engine failure", body: `[1,2]`, status: 500, resp: `{"error":"internal error"}`, bodies: []string{"1", "2"}, engErr: errUnexpected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got []*engine.PublishRequest
			env.eng.publishBatch = func(_ context.Context, reqs []*engine.PublishRequest) ([]string, error) {
				got = reqs
				if tc.engErr != nil {
					return nil, tc.engErr
				}
				ids := make([]string, len(reqs))
				for i := range reqs {
					ids[i] = fmt.Sprintf("id%d", i)
				}
				return ids, nil
			}
			h := map[string]string{"X-Token": goodToken}
			for k, v := range tc.header {
				h[k] = v
			}
			w := env.api(t, request{method: "PUT", target: "/api/ns/q/bulk" + tc.query, body: tc.body, header: h})
			expect(t, w, tc.status, tc.resp)
			if tc.bodies == nil {
				if calls := env.eng.Calls(); len(calls) != 0 {
					t.Errorf("engine called: %v", calls)
				}
				return
			}
			if calls := env.eng.Calls(); !reflect.DeepEqual(calls, []string{"PublishBatch"}) {
				t.Errorf("engine calls %v, want one PublishBatch", calls)
			}
			var bodies []string
			for _, r := range got {
				bodies = append(bodies, string(r.Body))
				if r.Namespace != "ns" || r.Queue != "q" || r.TTL != 86400*time.Second || r.Tries != 1 || r.Delay != 0 || r.Versioned {
					t.Errorf("request %+v", r)
				}
			}
			if !reflect.DeepEqual(bodies, tc.bodies) {
				t.Errorf("bodies %q, want %q", bodies, tc.bodies)
			}
		})
	}
}

func TestPublishBulkAttributes(t *testing.T) {
	env := newEnv(t)
	var got []*engine.PublishRequest
	env.eng.publishBatch = func(_ context.Context, reqs []*engine.PublishRequest) ([]string, error) {
		got = reqs
		return []string{"1a", "1b"}, nil
	}
	w := env.api(t, request{method: "PUT", target: "/api/ns/q/bulk?delay=3&ttl=9&tries=2", body: `[1,2]`,
		header: map[string]string{"X-Token": goodToken, "Enable-Job-Version": "Yes", "Job-Attr-A": "b"}})
	expect(t, w, http.StatusCreated, `{"job_ids":["1a","1b"],"msg":"published"}`)
	for _, r := range got {
		if !r.Versioned || !reflect.DeepEqual(r.Attributes, map[string]string{"a": "b"}) ||
			r.Delay != 3*time.Second || r.TTL != 9*time.Second || r.Tries != 2 {
			t.Errorf("request %+v", r)
		}
	}
}

func bulkIDs(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf(`"id%d"`, i)
	}
	return `{"job_ids":[` + strings.Join(ids, ",") + `],"msg":"published"}`
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
