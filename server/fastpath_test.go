package server

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/evloop"
)

// fastHead is a request head of the fast subset; tests vary it.
const fastHead = "PUT /api/ns/q?delay=1&ttl=60&tries=3 HTTP/1.1\r\nHost: kairos:7777\r\nX-Token: tok\r\nContent-Length: 5\r\n\r\n"

func TestParseFast(t *testing.T) {
	big := strings.Repeat("x", loopRoutes.MaxHead)
	cases := []struct {
		name string
		raw  string
		want evloop.Result
	}{
		{"plain", fastHead + "hello", evloop.Done},
		{"pipelined", fastHead + "hello" + fastHead, evloop.Done},
		{"no query", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Done},
		{"token in query", "PUT /api/ns/q?token=pool:abc HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Done},
		{"keep-alive", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx", evloop.Done},
		{"other headers", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nUser-Agent: x/1\r\nAccept-Encoding: gzip\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx", evloop.Done},
		{"body pending", fastHead + "hel", evloop.Head},
		{"head pending", fastHead[:40], evloop.More},
		{"line pending", "PUT /ap", evloop.More},
		{"CR pending", "PUT /api/ns/q HTTP/1.1\r", evloop.More},
		{"bare CR pending", "GET /api/ns/q/size HTTP/1.1\rHost: x\r\r", evloop.Other},
		{"bare CR in a header pending", "PUT /api/ns/q HTTP/1.1\r\nHost: x\rY", evloop.Other},
		{"empty", "", evloop.More},
		{"POST", "POST /api/ns/q HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"POST pending", "POST /api/n", evloop.Other},
		{"bulk route", "PUT /api/ns/q/bulk HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n[]", evloop.Other},
		{"republish route", "PUT /api/ns/q/job/abc HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"trailing slash", "PUT /api/ns/q/ HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"encoded path", "PUT /api/n%73/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"dot segment", "PUT /api/../q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"underscore queue", "PUT /api/ns/_q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"HTTP/1.0", "PUT /api/ns/q HTTP/1.0\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"bare LF", "PUT /api/ns/q HTTP/1.1\nHost: h\nContent-Length: 1\n\nx", evloop.Other},
		{"bare LF in headers", "PUT /api/ns/q HTTP/1.1\r\nHost: h\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"no Host", "PUT /api/ns/q HTTP/1.1\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"two Hosts", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"odd Host", "PUT /api/ns/q HTTP/1.1\r\nHost: a b\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"no Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"zero Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", evloop.Other},
		{"signed Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", evloop.Other},
		{"two Content-Lengths", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"huge Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1048577\r\n\r\nx", evloop.Other},
		{"chunked", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"Expect", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"Connection close", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"folded header", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\n X: y\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"header without colon", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nBad\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"space before colon", "PUT /api/ns/q HTTP/1.1\r\nHost : h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"NUL in value", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-A: \x00\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"versioned", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nEnable-Job-Version: yes\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"attribute", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\njob-attr-a: b\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"idempotency key", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"two X-Tokens", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Token: a\r\nX-Token: b\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"extension parameter", "PUT /api/ns/q?delay_ms=5 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"repeated parameter", "PUT /api/ns/q?delay=1&delay=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"encoded value", "PUT /api/ns/q?token=a%3Ab HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"plus in value", "PUT /api/ns/q?delay=+1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"semicolon", "PUT /api/ns/q?delay=1;ttl=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"empty pair", "PUT /api/ns/q?delay=1& HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"key without value", "PUT /api/ns/q?delay HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"consume", "GET /api/ns/q?ttr=30&timeout=0&count=3&token=t HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Done},
		{"consume, empty body", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", evloop.Done},
		{"consume with body", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
		{"consume of queues", "GET /api/ns/q1,q2 HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"consume, ms timeout", "GET /api/ns/q?timeout_ms=5 HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"consume, publish parameter", "GET /api/ns/q?delay=5 HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"consume with receipts", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Kairos-Extensions: 1\r\n\r\n", evloop.Done},
		{"consume, two extension headers", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Kairos-Extensions: 1\r\nx-kairos-extensions: 1\r\n\r\n", evloop.Other},
		{"peek", "GET /api/ns/q/peek HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"size", "GET /api/ns/q/size HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"ack", "DELETE /api/ns/q/job/01ARZ3NDEKTSV4RRFFQ69G5FAV HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Done},
		{"ack with receipt", "DELETE /api/ns/q/job/abc?receipt=0123456789abcdef HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Done},
		{"ack, ms parameter", "DELETE /api/ns/q/job/abc?delay_ms=1 HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"ack, odd job ID", "DELETE /api/ns/q/job/a-b HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"ack, no job ID", "DELETE /api/ns/q/job/ HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"destroy", "DELETE /api/ns/q HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"dead letter", "DELETE /api/ns/q/deadletter HTTP/1.1\r\nHost: h\r\n\r\n", evloop.Other},
		{"ack pending", "DELETE /api/n", evloop.More},
		{"empty X-Token, query token", "GET /api/ns/q?token=q HTTP/1.1\r\nHost: h\r\nX-Token:\r\n\r\n", evloop.Done},
		{"long head", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Big: " + big + "\r\nContent-Length: 1\r\n\r\nx", evloop.Other},
	}
	for _, tc := range cases {
		var r evloop.Request
		if got := loopParser.Parse([]byte(tc.raw), &r); got != tc.want {
			t.Errorf("%s: Parse = %d, want %d", tc.name, got, tc.want)
		}
	}
	var r evloop.Request
	raw := fastHead + "hello" + fastHead
	param := func(name string) string { v, _ := r.Param(name); return string(v) }
	if loopParser.Parse([]byte(raw), &r) != evloop.Done || r.Size != len(fastHead)+5 ||
		string(r.Namespace) != "ns" || string(r.Queue) != "q" || string(r.Body) != "hello" ||
		param("delay") != "1" || param("ttl") != "60" || param("tries") != "3" || string(r.Token) != "tok" {
		t.Errorf("fields: %+v", r)
	}
	// The header wins over the query parameter, as in guard.
	raw = "PUT /api/ns/q?token=query HTTP/1.1\r\nHost: h\r\nX-Token: header\r\nContent-Length: 1\r\n\r\nx"
	if loopParser.Parse([]byte(raw), &r) != evloop.Done || string(r.Token) != "header" {
		t.Errorf("token: %q", r.Token)
	}
	// A pending body: the head is whole, and tells how long the request is.
	if loopParser.Parse([]byte(fastHead+"he"), &r) != evloop.Head || r.Size != len(fastHead)+5 || r.HeadSize != len(fastHead) || r.Length != 5 || r.Body != nil {
		t.Errorf("pending body: size %d, want %d", r.Size, len(fastHead)+5)
	}
}

// FuzzParseFast: whatever the loops' parser takes as a complete fast request,
// net/http reads the same way: method, path, query, X-Token, Host, body and
// length. A request net/http refuses must not be taken.
func FuzzParseFast(f *testing.F) {
	f.Add([]byte(fastHead + "hello"))
	f.Add([]byte("PUT /api/ns/q?token=p:t&delay=0 HTTP/1.1\r\nHost: [::1]:80\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabcPUT"))
	f.Add([]byte("PUT /api/a-b/c_d HTTP/1.1\r\nhost: h\r\ncontent-length: 001\r\nx-token:\t t \r\n\r\nz"))
	f.Add([]byte("PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-A: \x80\xff\r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("GET /api/ns/q?ttr=30&timeout=0&count=2 HTTP/1.1\r\nHost: h\r\nX-Token: t\r\n\r\nGET"))
	f.Add([]byte("DELETE /api/ns/q/job/01ARZ3NDEKTSV4RRFFQ69G5FAV?token=t HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("PUT /api/ns/q HTTP/1.1\r\nHost: h\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nTraceState:  a=b \r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nTracestate: \x80\r\nContent-Length: 1\r\n\r\nx"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var r evloop.Request
		res := loopParser.Parse(raw, &r)
		if res != evloop.Done {
			return
		}
		if r.Size > len(raw) {
			t.Fatalf("size %d beyond the %d bytes", r.Size, len(raw))
		}
		br := bufio.NewReader(bytes.NewReader(raw))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("net/http refuses what the fast path takes: %v", err)
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Fatalf("net/http cannot read the body: %v", err)
		}
		rest, _ := io.ReadAll(br)
		if consumed := len(raw) - len(rest); consumed != r.Size {
			t.Errorf("net/http read %d bytes, the fast path %d", consumed, r.Size)
		}
		if req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Close || req.URL.RawPath != "" {
			t.Errorf("net/http: HTTP/%d.%d close=%v raw path %q", req.ProtoMajor, req.ProtoMinor, req.Close, req.URL.RawPath)
		}
		if req.URL.RawQuery != string(r.Query) {
			t.Errorf("query %q, fast path %q", req.URL.RawQuery, r.Query)
		}
		if !bytes.Equal(body, r.Body) || len(body) > 0 && req.ContentLength != int64(len(r.Body)) {
			t.Errorf("body %q (%d), fast path %q", body, req.ContentLength, r.Body)
		}
		if req.Host == "" || len(req.TransferEncoding) > 0 {
			t.Errorf("host %q, transfer encoding %v", req.Host, req.TransferEncoding)
		}
		q, err := url.ParseQuery(req.URL.RawQuery)
		if err != nil {
			t.Errorf("net/http's query %q: %v", req.URL.RawQuery, err)
		}
		token := req.Header.Get("X-Token")
		if token == "" {
			token = q.Get("token")
		}
		if token != string(r.Token) {
			t.Errorf("token %q, fast path %q", token, r.Token)
		}
		// The trace context net/http's handler would store (requestTrace)
		// is the one the loops read.
		wantTP, wantTS := requestTrace(req.Header)
		gotTP, gotTS := "", ""
		if tp := string(r.TraceParent); engine.ValidTraceParent(tp) {
			gotTP = tp
			if ts := string(r.TraceState); engine.ValidTraceState(ts) {
				gotTS = ts
			}
		}
		if gotTP != wantTP || gotTS != wantTS {
			t.Errorf("trace context %q %q, fast path %q %q", wantTP, wantTS, gotTP, gotTS)
		}
		for _, name := range loopParamNames() {
			v, has := r.Param(name)
			if got, ok := q[name]; ok != has || has && (len(got) != 1 || got[0] != string(v)) {
				t.Errorf("%s %q, fast path %q (given: %v)", name, got, v, has)
			}
		}
		var route string
		switch r.Route().Kind {
		case evloop.Publish:
			route = "PUT /api/" + string(r.Namespace) + "/" + string(r.Queue)
		case evloop.Consume:
			route = "GET /api/" + string(r.Namespace) + "/" + string(r.Queue)
		case evloop.Ack:
			route = "DELETE /api/" + string(r.Namespace) + "/" + string(r.Queue) + "/job/" + string(r.JobID)
		}
		if got := req.Method + " " + req.URL.Path; got != route {
			t.Errorf("net/http reads %s, the fast path %s", got, route)
		}
		if req.Header.Get("Enable-Job-Version") != "" || req.Header.Get("Idempotency-Key") != "" {
			t.Errorf("extension headers taken: %v", req.Header)
		}
		if got := req.Header.Get(extHeader); got != string(r.Ext) {
			t.Errorf("%s %q, fast path %q", extHeader, got, r.Ext)
		}
	})
}

// TestDecimalParam: evloop.DecimalParam agrees with strconv.ParseUint.
func TestDecimalParam(t *testing.T) {
	for _, v := range []string{"", "0", "007", "1", "4294967295", "4294967296", "65535", "65536",
		"18446744073709551615", "18446744073709551616", "99999999999999999999999", "-1", "+1", "1_0", "1a", " 1"} {
		for _, bits := range []int{16, 32} {
			want, err := strconv.ParseUint(v, 10, bits)
			got, ok := evloop.DecimalParam([]byte(v), true, bits, 7)
			if ok != (err == nil) || ok && got != want {
				t.Errorf("DecimalParam(%q, %d) = %d, %v; ParseUint: %d, %v", v, bits, got, ok, want, err)
			}
		}
	}
	if got, ok := evloop.DecimalParam(nil, false, 32, 7); !ok || got != 7 {
		t.Errorf("absent: %d %v, want the default", got, ok)
	}
}

// TestAppendFastResponse: the answers read back as net/http reads them.
func TestAppendFastResponse(t *testing.T) {
	id := []byte("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	date := []byte("Tue, 24 Nov 2026 22:38:36 GMT")
	created := `{"job_id":"01M87VC16NZAC9VNKJGM000000","msg":"published"}`
	b := evloop.AppendResponse(nil, 201, 0, "", "", false, id, date, []byte(created))
	b = evloop.AppendResponse(b, 204, 0, "", "", false, id, date, nil)
	b = evloop.AppendResponse(b, 499, 0, "", "", false, id, date, errClientGone.body)
	br := bufio.NewReader(bytes.NewReader(b))
	for _, want := range []struct {
		line, ctype, body string
	}{
		{"201 Created", jsonContentType, created},
		{"204 No Content", "", ""},
		{"499 status code 499", jsonContentType, string(errClientGone.body)},
	} {
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.Status != want.line || string(body) != want.body || resp.Header.Get("Content-Type") != want.ctype ||
			resp.Header.Get("X-Request-Id") != string(id) || resp.Header.Get("Date") != string(date) || resp.Close {
			t.Errorf("got %s %v %q, want %s %q", resp.Status, resp.Header, body, want.line, want.body)
		}
	}
}

// loopParamNames are the query parameters of every route of loopRoutes.
func loopParamNames() []string {
	var names []string
	for _, r := range loopRoutes.Routes {
		for _, p := range r.Params {
			if !slices.Contains(names, p) {
				names = append(names, p)
			}
		}
	}
	return names
}
