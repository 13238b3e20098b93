package openapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGinPath(t *testing.T) {
	for in, want := range map[string]string{
		"/api/:namespace/:queue":      "/api/{namespace}/{queue}",
		"/debug/pprof/*profile":       "/debug/pprof/{profile}",
		"/token/:namespace/:token/lm": "/token/{namespace}/{token}/lm",
		"/pools":                      "/pools",
	} {
		got, catchAll := GinPath(in)
		if got != want || catchAll != strings.Contains(in, "*") {
			t.Errorf("GinPath(%q) = %q, %v; want %q", in, got, catchAll, want)
		}
	}
}

// TestFind: requests find their operation as gin routes them (static
// segments first, catch-alls take the rest, escaped slashes stay in one
// segment), per listener.
func TestFind(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ listener, method, path, want string }{
		{Public, http.MethodGet, "/api/ns/q", "/api/{namespace}/{queue}"},
		{Public, http.MethodGet, "/api/ns/q1,q2", "/api/{namespace}/{queue}"},
		{Public, http.MethodGet, "/api/ns/q/peek", "/api/{namespace}/{queue}/peek"},
		{Public, http.MethodGet, "/api/ns/q/deadletter/size", "/api/{namespace}/{queue}/deadletter/size"},
		{Public, http.MethodDelete, "/api/ns/q/job_key/a%2Fb", "/api/{namespace}/{queue}/job_key/{key}"},
		{Public, http.MethodDelete, "/api/ns/q/job_key/a/b", "/api/{namespace}/{queue}/job_key/{key}"},
		{Admin, http.MethodGet, "/debug/pprof/", "/debug/pprof/{profile}"},
		{Admin, http.MethodPost, "/debug/pprof/symbol", "/debug/pprof/{profile}"},
		{Admin, http.MethodGet, "/healthz", "/healthz"},
		{Public, http.MethodGet, "/healthz", "/healthz"},
		{Public, http.MethodGet, "/pools", ""},
		{Admin, http.MethodGet, "/api/ns/q", ""},
		{Public, http.MethodPost, "/api/ns/q", ""},
		{Public, http.MethodGet, "/api/ns/q/nope", ""},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		m := v.find(c.listener, c.method, req.URL.EscapedPath())
		got := ""
		if m != nil {
			got = m.template
		}
		if got != c.want {
			t.Errorf("%s %s %s: operation %q, want %q", c.listener, c.method, c.path, got, c.want)
		}
	}
}

// TestCheck: an answer the description does not allow is refused with the
// route and the reason; an unknown route must be answered as one.
func TestCheck(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	hdr := func() http.Header {
		return http.Header{"Content-Type": {"application/json; charset=utf-8"}, "X-Request-Id": {"01M8A0VKAAT224HYXTMC9PRMZJ"}}
	}
	put := httptest.NewRequest(http.MethodPut, "/api/ns/q", nil)
	if err := v.Check(Public, put, 201, hdr(), []byte(`{"job_id":"01M8A0VKAAT224HYXTMC9PRMZJ","msg":"published"}`)); err != nil {
		t.Fatalf("a described answer: %v", err)
	}
	for _, c := range []struct {
		name   string
		status int
		header http.Header
		body   string
		want   string
	}{
		{"extra field", 201, hdr(), `{"job_id":"01M8A0VKAAT224HYXTMC9PRMZJ","msg":"published","x":1}`, `"x"`},
		{"undeclared status", 202, hdr(), `{}`, "status is not supported"},
		{"no request id", 201, http.Header{"Content-Type": {"application/json"}}, `{"job_id":"01M8A0VKAAT224HYXTMC9PRMZJ","msg":"published"}`, "X-Request-ID"},
		{"503 without Retry-After", 503, hdr(), `{"error":"redis is unavailable, retry later"}`, "Retry-After"},
		{"error with another key", 400, hdr(), `{"message":"x"}`, "error"},
	} {
		err := v.Check(Public, put, c.status, c.header, []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "PUT /api/{namespace}/{queue}") {
			t.Errorf("%s: %v, want an error naming the operation and %q", c.name, err, c.want)
		}
	}
	del := httptest.NewRequest(http.MethodDelete, "/api/ns/q/job/J", nil)
	if err := v.Check(Public, del, 204, hdr(), []byte("x")); err == nil {
		t.Error("a 204 with a body passed")
	}
	unknown := httptest.NewRequest(http.MethodGet, "/nope", nil)
	if err := v.Check(Public, unknown, 404, hdr(), []byte(`{"error":"api not found"}`)); err != nil {
		t.Errorf("the unknown-route 404: %v", err)
	}
	if err := v.Check(Public, unknown, 200, hdr(), []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "no operation") {
		t.Errorf("an undescribed route answering 200: %v", err)
	}
}

// TestUnregister: a host registered as a Kairos listener is validated;
// once unregistered (its server gone, its port reusable by anything), it
// is not.
func TestUnregister(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated) // no operation answers POST /token/ns with this on the public listener
	}))
	defer srv.Close()
	tr, err := NewTransport(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	post := func() error {
		resp, err := c.Post(srv.URL+"/token/ns", "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	tr.Register(srv.URL, Public)
	if err := post(); err == nil {
		t.Fatal("a registered host's undescribed answer passed")
	}
	tr.Unregister(srv.URL)
	if err := post(); err != nil {
		t.Fatalf("an unregistered host is still validated: %v", err)
	}
}
