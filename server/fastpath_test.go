package server

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// fastHead is a request head of the fast subset; tests vary it.
const fastHead = "PUT /api/ns/q?delay=1&ttl=60&tries=3 HTTP/1.1\r\nHost: kairos:7777\r\nX-Token: tok\r\nContent-Length: 5\r\n\r\n"

func TestParseFast(t *testing.T) {
	big := strings.Repeat("x", fastMaxHead)
	cases := []struct {
		name string
		raw  string
		want parseResult
	}{
		{"plain", fastHead + "hello", parseDone},
		{"pipelined", fastHead + "hello" + fastHead, parseDone},
		{"no query", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseDone},
		{"token in query", "PUT /api/ns/q?token=pool:abc HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseDone},
		{"keep-alive", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx", parseDone},
		{"other headers", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nUser-Agent: x/1\r\nAccept-Encoding: gzip\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx", parseDone},
		{"body pending", fastHead + "hel", parseMore},
		{"head pending", fastHead[:40], parseMore},
		{"line pending", "PUT /ap", parseMore},
		{"CR pending", "PUT /api/ns/q HTTP/1.1\r", parseMore},
		{"bare CR pending", "GET /api/ns/q/size HTTP/1.1\rHost: x\r\r", parseOther},
		{"bare CR in a header pending", "PUT /api/ns/q HTTP/1.1\r\nHost: x\rY", parseOther},
		{"empty", "", parseMore},
		{"POST", "POST /api/ns/q HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"POST pending", "POST /api/n", parseOther},
		{"bulk route", "PUT /api/ns/q/bulk HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n[]", parseOther},
		{"republish route", "PUT /api/ns/q/job/abc HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"trailing slash", "PUT /api/ns/q/ HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"encoded path", "PUT /api/n%73/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"dot segment", "PUT /api/../q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"underscore queue", "PUT /api/ns/_q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"HTTP/1.0", "PUT /api/ns/q HTTP/1.0\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"bare LF", "PUT /api/ns/q HTTP/1.1\nHost: h\nContent-Length: 1\n\nx", parseOther},
		{"bare LF in headers", "PUT /api/ns/q HTTP/1.1\r\nHost: h\nContent-Length: 1\r\n\r\nx", parseOther},
		{"no Host", "PUT /api/ns/q HTTP/1.1\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"two Hosts", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"odd Host", "PUT /api/ns/q HTTP/1.1\r\nHost: a b\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"no Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"zero Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", parseOther},
		{"signed Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", parseOther},
		{"two Content-Lengths", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"huge Content-Length", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1048577\r\n\r\nx", parseOther},
		{"chunked", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"Expect", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"Connection close", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"folded header", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\n X: y\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"header without colon", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nBad\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"space before colon", "PUT /api/ns/q HTTP/1.1\r\nHost : h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"NUL in value", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-A: \x00\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"versioned", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nEnable-Job-Version: yes\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"attribute", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\njob-attr-a: b\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"idempotency key", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"two X-Tokens", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Token: a\r\nX-Token: b\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"extension parameter", "PUT /api/ns/q?delay_ms=5 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"repeated parameter", "PUT /api/ns/q?delay=1&delay=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"encoded value", "PUT /api/ns/q?token=a%3Ab HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"plus in value", "PUT /api/ns/q?delay=+1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"semicolon", "PUT /api/ns/q?delay=1;ttl=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"empty pair", "PUT /api/ns/q?delay=1& HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"key without value", "PUT /api/ns/q?delay HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"consume", "GET /api/ns/q?ttr=30&timeout=0&count=3&token=t HTTP/1.1\r\nHost: h\r\n\r\n", parseDone},
		{"consume, empty body", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", parseDone},
		{"consume with body", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", parseOther},
		{"consume of queues", "GET /api/ns/q1,q2 HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"consume, ms timeout", "GET /api/ns/q?timeout_ms=5 HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"consume, publish parameter", "GET /api/ns/q?delay=5 HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"consume with receipts", "GET /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Kairos-Extensions: 1\r\n\r\n", parseOther},
		{"peek", "GET /api/ns/q/peek HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"size", "GET /api/ns/q/size HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"ack", "DELETE /api/ns/q/job/01ARZ3NDEKTSV4RRFFQ69G5FAV HTTP/1.1\r\nHost: h\r\n\r\n", parseDone},
		{"ack with receipt", "DELETE /api/ns/q/job/abc?receipt=r HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"ack, odd job ID", "DELETE /api/ns/q/job/a-b HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"ack, no job ID", "DELETE /api/ns/q/job/ HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"destroy", "DELETE /api/ns/q HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"dead letter", "DELETE /api/ns/q/deadletter HTTP/1.1\r\nHost: h\r\n\r\n", parseOther},
		{"ack pending", "DELETE /api/n", parseMore},
		{"empty X-Token, query token", "GET /api/ns/q?token=q HTTP/1.1\r\nHost: h\r\nX-Token:\r\n\r\n", parseDone},
		{"long head", "PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-Big: " + big + "\r\nContent-Length: 1\r\n\r\nx", parseOther},
	}
	for _, tc := range cases {
		var r fastRequest
		if got := parseFast([]byte(tc.raw), &r); got != tc.want {
			t.Errorf("%s: parseFast = %d, want %d", tc.name, got, tc.want)
		}
	}
	var r fastRequest
	raw := fastHead + "hello" + fastHead
	if parseFast([]byte(raw), &r) != parseDone || r.size != len(fastHead)+5 ||
		string(r.namespace) != "ns" || string(r.queue) != "q" || string(r.body) != "hello" ||
		string(r.params[pDelay]) != "1" || string(r.params[pTTL]) != "60" || string(r.params[pTries]) != "3" || string(r.token) != "tok" {
		t.Errorf("fields: %+v", r)
	}
	// The header wins over the query parameter, as in guard.
	raw = "PUT /api/ns/q?token=query HTTP/1.1\r\nHost: h\r\nX-Token: header\r\nContent-Length: 1\r\n\r\nx"
	if parseFast([]byte(raw), &r) != parseDone || string(r.token) != "header" {
		t.Errorf("token: %q", r.token)
	}
	// A pending body tells how long the whole request is.
	if parseFast([]byte(fastHead+"he"), &r) != parseMore || r.size != len(fastHead)+5 {
		t.Errorf("pending body: size %d, want %d", r.size, len(fastHead)+5)
	}
}

// FuzzParseFast: whatever parseFast takes as a complete fast request,
// net/http reads the same way: method, path, query, X-Token, Host, body and
// length. A request net/http refuses must not be taken.
func FuzzParseFast(f *testing.F) {
	f.Add([]byte(fastHead + "hello"))
	f.Add([]byte("PUT /api/ns/q?token=p:t&delay=0 HTTP/1.1\r\nHost: [::1]:80\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabcPUT"))
	f.Add([]byte("PUT /api/a-b/c_d HTTP/1.1\r\nhost: h\r\ncontent-length: 001\r\nx-token:\t t \r\n\r\nz"))
	f.Add([]byte("PUT /api/ns/q HTTP/1.1\r\nHost: h\r\nX-A: \x80\xff\r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("GET /api/ns/q?ttr=30&timeout=0&count=2 HTTP/1.1\r\nHost: h\r\nX-Token: t\r\n\r\nGET"))
	f.Add([]byte("DELETE /api/ns/q/job/01ARZ3NDEKTSV4RRFFQ69G5FAV?token=t HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var r fastRequest
		res := parseFast(raw, &r)
		if res != parseDone {
			return
		}
		if r.size > len(raw) {
			t.Fatalf("size %d beyond the %d bytes", r.size, len(raw))
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
		if consumed := len(raw) - len(rest); consumed != r.size {
			t.Errorf("net/http read %d bytes, the fast path %d", consumed, r.size)
		}
		if req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Close || req.URL.RawPath != "" {
			t.Errorf("net/http: HTTP/%d.%d close=%v raw path %q", req.ProtoMajor, req.ProtoMinor, req.Close, req.URL.RawPath)
		}
		if req.URL.RawQuery != string(r.query) {
			t.Errorf("query %q, fast path %q", req.URL.RawQuery, r.query)
		}
		if !bytes.Equal(body, r.body) || len(body) > 0 && req.ContentLength != int64(len(r.body)) {
			t.Errorf("body %q (%d), fast path %q", body, req.ContentLength, r.body)
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
		if token != string(r.token) {
			t.Errorf("token %q, fast path %q", token, r.token)
		}
		for i, name := range paramNames {
			v, has := r.param(i)
			if got, ok := q[name]; ok != has || has && (len(got) != 1 || got[0] != string(v)) {
				t.Errorf("%s %q, fast path %q (given: %v)", name, got, v, has)
			}
		}
		var route string
		switch r.kind {
		case kindPublish:
			route = "PUT /api/" + string(r.namespace) + "/" + string(r.queue)
		case kindConsume:
			route = "GET /api/" + string(r.namespace) + "/" + string(r.queue)
		case kindAck:
			route = "DELETE /api/" + string(r.namespace) + "/" + string(r.queue) + "/job/" + string(r.jobID)
		}
		if got := req.Method + " " + req.URL.Path; got != route {
			t.Errorf("net/http reads %s, the fast path %s", got, route)
		}
		if req.Header.Get("Enable-Job-Version") != "" || req.Header.Get("Idempotency-Key") != "" || req.Header.Get(extHeader) != "" {
			t.Errorf("extension headers taken: %v", req.Header)
		}
	})
}

// TestDecimalParam: decimalParam agrees with strconv.ParseUint.
func TestDecimalParam(t *testing.T) {
	for _, v := range []string{"", "0", "007", "1", "4294967295", "4294967296", "65535", "65536",
		"18446744073709551615", "18446744073709551616", "99999999999999999999999", "-1", "+1", "1_0", "1a", " 1"} {
		for _, bits := range []int{16, 32} {
			want, err := strconv.ParseUint(v, 10, bits)
			got, ok := decimalParam([]byte(v), true, bits, 7)
			if ok != (err == nil) || ok && got != want {
				t.Errorf("decimalParam(%q, %d) = %d, %v; ParseUint: %d, %v", v, bits, got, ok, want, err)
			}
		}
	}
	if got, ok := decimalParam(nil, false, 32, 7); !ok || got != 7 {
		t.Errorf("absent: %d %v, want the default", got, ok)
	}
}

// TestAppendFastResponse: the answers read back as net/http reads them.
func TestAppendFastResponse(t *testing.T) {
	id := []byte("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	date := []byte("Tue, 24 Nov 2026 22:38:36 GMT")
	created := `{"job_id":"01M87VC16NZAC9VNKJGM000000","msg":"published"}`
	b := appendFastResponse(nil, 201, 0, id, date, []byte(created))
	b = appendFastResponse(b, 204, 0, id, date, nil)
	b = appendFastResponse(b, 499, 0, id, date, errClientGone.body)
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
