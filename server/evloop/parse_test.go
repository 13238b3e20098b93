package evloop

import (
	"strings"
	"testing"
)

// testTable is a table unlike the server's: a static segment after the
// parameters, a parameter the server's routes do not take, a body bound.
var testTable = Table{
	Routes: []Route{
		{Kind: Publish, Method: "POST", Path: "/v1/:namespace/:queue/jobs", Params: []string{"n", "key"}, Body: Body{Min: 2, Max: 4}},
		{Kind: Ack, Method: "DELETE", Path: "/v1/:namespace/:queue/jobs/:job_id"},
	},
	MaxHead:       256,
	MaxJobID:      4,
	TokenHeader:   "Authorization",
	TokenParam:    "key",
	RefuseHeaders: []string{"X-Special"},
}

// TestParserFollowsTable: the parser takes what its table describes, and
// only that.
func TestParserFollowsTable(t *testing.T) {
	p, err := NewParser(testTable)
	if err != nil {
		t.Fatal(err)
	}
	const host = "Host: h\r\n"
	cases := []struct {
		name, raw string
		want      Result
	}{
		{"publish", "POST /v1/ns/q/jobs?n=1 HTTP/1.1\r\n" + host + "Content-Length: 2\r\n\r\nab", Done},
		{"body too short", "POST /v1/ns/q/jobs HTTP/1.1\r\n" + host + "Content-Length: 1\r\n\r\na", Other},
		{"body too long", "POST /v1/ns/q/jobs HTTP/1.1\r\n" + host + "Content-Length: 5\r\n\r\nabcde", Other},
		{"body pending", "POST /v1/ns/q/jobs HTTP/1.1\r\n" + host + "Content-Length: 3\r\n\r\nab", Head},
		{"wrong static segment", "POST /v1/ns/q/job HTTP/1.1\r\n" + host + "Content-Length: 2\r\n\r\nab", Other},
		{"parameter of no route", "POST /v1/ns/q/jobs?m=1 HTTP/1.1\r\n" + host + "Content-Length: 2\r\n\r\nab", Other},
		{"method of another route", "PUT /v1/ns/q/jobs HTTP/1.1\r\n" + host + "Content-Length: 2\r\n\r\nab", Other},
		{"refused header", "POST /v1/ns/q/jobs HTTP/1.1\r\n" + host + "x-special: 1\r\nContent-Length: 2\r\n\r\nab", Other},
		{"always refused header", "POST /v1/ns/q/jobs HTTP/1.1\r\n" + host + "Upgrade: h2c\r\nContent-Length: 2\r\n\r\nab", Other},
		{"ack", "DELETE /v1/ns/q/jobs/ab12 HTTP/1.1\r\n" + host + "\r\n", Done},
		{"ack, job ID too long", "DELETE /v1/ns/q/jobs/ab123 HTTP/1.1\r\n" + host + "\r\n", Other},
		{"ack with a body", "DELETE /v1/ns/q/jobs/ab HTTP/1.1\r\n" + host + "Content-Length: 1\r\n\r\nx", Other},
		{"ack, parameter", "DELETE /v1/ns/q/jobs/ab?n=1 HTTP/1.1\r\n" + host + "\r\n", Other},
		{"head too long", "POST /v1/ns/q/jobs HTTP/1.1\r\n" + host + "X-A: " + strings.Repeat("a", 256) + "\r\n\r\n", Other},
		{"line pending", "DELETE /v1/n", More},
		{"line of no route", "GET /v1/n", Other},
	}
	for _, tc := range cases {
		var r Request
		if got := p.Parse([]byte(tc.raw), &r); got != tc.want {
			t.Errorf("%s: Parse = %d, want %d", tc.name, got, tc.want)
		}
	}
	var r Request
	raw := "POST /v1/ns/q/jobs?key=qk&n=7 HTTP/1.1\r\n" + host + "Content-Length: 3\r\n\r\nabc"
	if p.Parse([]byte(raw), &r) != Done || r.Route() != &p.t.Routes[0] || string(r.Token) != "qk" || string(r.Body) != "abc" {
		t.Fatalf("publish: %+v", r)
	}
	if n, ok := r.UintParam("n", 8, 0); !ok || n != 7 {
		t.Errorf("n = %d, %v", n, ok)
	}
	raw = "POST /v1/ns/q/jobs?key=qk HTTP/1.1\r\n" + host + "authorization: hk\r\nContent-Length: 2\r\n\r\nab"
	if p.Parse([]byte(raw), &r) != Done || string(r.Token) != "hk" {
		t.Errorf("the token header does not win: %q", r.Token)
	}
}

// TestParserTraceContext: with TraceContext the W3C headers are the
// request's, once each; without, they are ignored, or refused when listed.
func TestParserTraceContext(t *testing.T) {
	const (
		head = "DELETE /v1/ns/q/jobs/ab HTTP/1.1\r\nHost: h\r\n"
		tp   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	tab := testTable
	tab.TraceContext = true
	p, err := NewParser(tab)
	if err != nil {
		t.Fatal(err)
	}
	var r Request
	raw := head + "traceparent:  " + tp + " \r\nTraceState: a=b,c=d\r\n\r\n"
	if p.Parse([]byte(raw), &r) != Done || string(r.TraceParent) != tp || string(r.TraceState) != "a=b,c=d" {
		t.Fatalf("trace context: %q %q", r.TraceParent, r.TraceState)
	}
	if p.Parse([]byte(head+"\r\n"), &r) != Done || r.TraceParent != nil || r.TraceState != nil {
		t.Fatalf("no trace context: %q %q", r.TraceParent, r.TraceState)
	}
	for _, raw := range []string{
		head + "Traceparent: " + tp + "\r\ntraceparent: " + tp + "\r\n\r\n",
		head + "Tracestate: a=b\r\nTracestate: c=d\r\n\r\n",
	} {
		if got := p.Parse([]byte(raw), &r); got != Other {
			t.Errorf("repeated header: Parse = %d, want Other", got)
		}
	}
	off, _ := NewParser(testTable)
	if off.Parse([]byte(raw), &r) != Done || r.TraceParent != nil {
		t.Fatalf("without TraceContext: %q", r.TraceParent)
	}
	tab = testTable
	tab.RefuseHeaders = []string{"Traceparent"}
	refuse, _ := NewParser(tab)
	if got := refuse.Parse([]byte(raw), &r); got != Other {
		t.Fatalf("refused traceparent: Parse = %d, want Other", got)
	}
}

// TestNewParserRefusesBadTables: a table the parser cannot follow is an
// error, not a parser that takes the wrong requests.
func TestNewParserRefusesBadTables(t *testing.T) {
	for name, change := range map[string]func(*Table){
		"no MaxHead":         func(t *Table) { t.MaxHead = 0 },
		"no token header":    func(t *Table) { t.TokenHeader = "" },
		"unknown parameter":  func(t *Table) { t.Routes[0].Path = "/v1/:namespace/:other" },
		"no path parameter":  func(t *Table) { t.Routes[0].Path = "/v1/jobs" },
		"wildcard":           func(t *Table) { t.Routes[0].Path = "/v1/:namespace/*rest" },
		"empty segment":      func(t *Table) { t.Routes[0].Path = "/v1/:namespace//jobs" },
		"too many parameter": func(t *Table) { t.Routes[0].Params = make([]string, maxParams+1) },
	} {
		tab := testTable
		tab.Routes = append([]Route(nil), testTable.Routes...)
		change(&tab)
		if _, err := NewParser(tab); err == nil {
			t.Errorf("%s: NewParser accepted the table", name)
		}
	}
}
