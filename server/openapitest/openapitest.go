// Package openapitest checks Kairos's HTTP exchanges against its OpenAPI
// description (doc/openapi.yaml): a Validator that finds the described
// operation of a request and validates the response's status, headers and
// body against it with kin-openapi, and a Transport (an http.RoundTripper)
// that does so for every exchange a test client makes. Tests only: the
// server does not import it.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/kairos-dev/kairos/doc"
)

// The listeners, as the description's tags name them.
const (
	Public = "public"
	Admin  = "admin"
)

// Extensions of the description that the tests read.
const (
	// ExtCatchAll marks a path item whose last path parameter takes the
	// rest of the path, slashes included (a gin "*name" route).
	ExtCatchAll = "x-kairos-catch-all"
	// ExtOtherMethods lists methods a path item serves that OpenAPI 3.1
	// has no operation field for (CONNECT, of gin's Any).
	ExtOtherMethods = "x-kairos-other-methods"
)

var (
	loadOnce sync.Once
	loaded   *openapi3.T
	loadErr  error
)

// Spec returns doc/openapi.yaml loaded and validated (once per process).
// The result is shared: do not modify it.
func Spec() (*openapi3.T, error) {
	loadOnce.Do(func() {
		l := openapi3.NewLoader()
		loaded, loadErr = l.LoadFromData(doc.OpenAPI)
		if loadErr == nil {
			loadErr = loaded.Validate(context.Background())
		}
		if loadErr != nil {
			loadErr = fmt.Errorf("doc/openapi.yaml: %w", loadErr)
		}
	})
	return loaded, loadErr
}

// GinPath turns a gin route path into its OpenAPI path template: ":name"
// and "*name" become "{name}"; catchAll reports a "*name".
func GinPath(p string) (template string, catchAll bool) {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":"):
			segs[i] = "{" + s[1:] + "}"
		case strings.HasPrefix(s, "*"):
			segs[i] = "{" + s[1:] + "}"
			catchAll = true
		}
	}
	return strings.Join(segs, "/"), catchAll
}

// IsCatchAll reports whether the path item is marked x-kairos-catch-all.
func IsCatchAll(item *openapi3.PathItem) bool {
	b, _ := item.Extensions[ExtCatchAll].(bool)
	return b
}

// OtherMethods returns the path item's x-kairos-other-methods.
func OtherMethods(item *openapi3.PathItem) []string {
	list, _ := item.Extensions[ExtOtherMethods].([]any)
	var out []string
	for _, m := range list {
		if s, ok := m.(string); ok {
			out = append(out, strings.ToUpper(s))
		}
	}
	return out
}

// Validator validates responses against the description.
type Validator struct {
	spec *openapi3.T

	mu   sync.Mutex
	seen map[string]bool // "listener METHOD template status"
}

// NewValidator loads the description.
func NewValidator() (*Validator, error) {
	spec, err := Spec()
	if err != nil {
		return nil, err
	}
	return &Validator{spec: spec, seen: map[string]bool{}}, nil
}

// NewValidatorAnyJobID is NewValidator with any non-empty string allowed
// as a job ID (components/schemas/JobID without its pattern): for tests
// whose fake engines make up IDs such as "J". Every other check stays.
func NewValidatorAnyJobID() (*Validator, error) {
	if _, err := Spec(); err != nil {
		return nil, err
	}
	spec, err := openapi3.NewLoader().LoadFromData(doc.OpenAPI)
	if err != nil {
		return nil, err
	}
	id := spec.Components.Schemas["JobID"]
	if id == nil || id.Value == nil {
		return nil, fmt.Errorf("doc/openapi.yaml: no components/schemas/JobID")
	}
	id.Value.Pattern = ""
	id.Value.MinLength = 1
	if err := spec.Validate(context.Background()); err != nil {
		return nil, err
	}
	return &Validator{spec: spec, seen: map[string]bool{}}, nil
}

// match is a request's described operation.
type match struct {
	template string
	item     *openapi3.PathItem
	op       *openapi3.Operation
	params   map[string]string
}

// find returns the operation of listener that serves method and the
// escaped path, preferring the template with the most literal segments (as
// gin prefers static segments), or nil.
func (v *Validator) find(listener, method, escapedPath string) *match {
	segs := strings.Split(escapedPath, "/")
	var best *match
	bestLiterals := -1
	for template, item := range v.spec.Paths.Map() {
		op := item.GetOperation(method)
		if op == nil || !slices.Contains(op.Tags, listener) {
			continue
		}
		params, literals, ok := matchTemplate(template, IsCatchAll(item), segs)
		if ok && literals > bestLiterals {
			best = &match{template: template, item: item, op: op, params: params}
			bestLiterals = literals
		}
	}
	return best
}

// matchTemplate matches a path's escaped segments against a template: a
// literal segment must be equal, "{name}" takes one segment (gin matches
// an empty one too: /api//q reaches the name check), or
// with catchAll the last one takes the rest (possibly empty).
func matchTemplate(template string, catchAll bool, segs []string) (map[string]string, int, bool) {
	tsegs := strings.Split(template, "/")
	params := map[string]string{}
	literals := 0
	for i, t := range tsegs {
		last := i == len(tsegs)-1
		if i >= len(segs) {
			return nil, 0, false
		}
		name, isParam := strings.CutPrefix(t, "{")
		if !isParam {
			if t != segs[i] {
				return nil, 0, false
			}
			literals++
			continue
		}
		name = strings.TrimSuffix(name, "}")
		if last && catchAll {
			rest, err := url.PathUnescape(strings.Join(segs[i:], "/"))
			if err != nil {
				return nil, 0, false
			}
			params[name] = rest
			return params, literals, true
		}
		val, err := url.PathUnescape(segs[i])
		if err != nil {
			return nil, 0, false
		}
		params[name] = val
	}
	return params, literals, len(segs) == len(tsegs)
}

// Check validates one exchange of listener (Public or Admin): the response
// must be one that the operation describing req declares (its status, its
// declared headers, a body matching the schema of its content type, no body
// where none is declared). A request no path describes must have been
// answered as an unknown route: 404 {"error":"api not found"}, or a
// trailing-slash redirect (301/307 with a Location). The error names the
// request, the operation and the violations.
func (v *Validator) Check(listener string, req *http.Request, status int, header http.Header, body []byte) error {
	m := v.find(listener, req.Method, req.URL.EscapedPath())
	where := fmt.Sprintf("%s listener: %s %s → %d", listener, req.Method, req.URL.RequestURI(), status)
	if m == nil {
		switch {
		case status == http.StatusNotFound && strings.TrimSpace(string(body)) == `{"error":"api not found"}`:
			return nil
		case (status == http.StatusMovedPermanently || status == http.StatusTemporaryRedirect) && header.Get("Location") != "":
			return nil
		}
		return fmt.Errorf("openapi: %s: no operation of doc/openapi.yaml describes this route (tag %q), and the answer is not the unknown-route 404 {\"error\":\"api not found\"}; body %.300q", where, listener, body)
	}
	v.mu.Lock()
	v.seen[fmt.Sprintf("%s %s %s %d", listener, req.Method, m.template, status)] = true
	v.mu.Unlock()
	where += fmt.Sprintf(" (operation %s %s)", req.Method, m.template)

	route := &routers.Route{Spec: v.spec, Path: m.template, PathItem: m.item, Method: req.Method, Operation: m.op}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: m.params, Route: route, Options: opts,
		},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: opts,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		msg := err.Error()
		if len(msg) > 4000 {
			msg = msg[:4000] + "…"
		}
		return fmt.Errorf("openapi: %s: the response does not match doc/openapi.yaml: %s\nbody: %.500s", where, msg, body)
	}
	if resp := m.op.Responses.Status(status); resp != nil && resp.Value != nil && len(resp.Value.Content) == 0 && len(body) > 0 && req.Method != http.MethodHead {
		return fmt.Errorf("openapi: %s: doc/openapi.yaml declares no body for status %d, got %.300q", where, status, body)
	}
	if ct := header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") && len(body) > 0 && !json.Valid(body) {
		return fmt.Errorf("openapi: %s: Content-Type %s with a body that is not JSON: %.300q", where, ct, body)
	}
	return nil
}

// CheckAccepted validates a request that the server accepted (answered
// with a 2xx) against the parameters, security and request body its
// operation describes: a request the server takes must be one the
// description allows. body is the request's body.
func (v *Validator) CheckAccepted(listener string, req *http.Request, body []byte) error {
	m := v.find(listener, req.Method, req.URL.EscapedPath())
	if m == nil {
		return fmt.Errorf("openapi: %s listener: %s %s: accepted, but no operation of doc/openapi.yaml describes it", listener, req.Method, req.URL.RequestURI())
	}
	if IsCatchAll(m.item) {
		for _, v := range m.params {
			if v == "" {
				// The catch-all's own root (/debug/pprof/): OpenAPI path
				// parameters cannot be empty, the description says so in
				// words.
				return nil
			}
		}
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request:    r,
		PathParams: m.params,
		Route:      &routers.Route{Spec: v.spec, Path: m.template, PathItem: m.item, Method: req.Method, Operation: m.op},
		Options: &openapi3filter.Options{
			MultiError:         true,
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		},
	}
	// A body of any media type ("*/*": the job bodies, which the server
	// reads as bytes whatever the Content-Type) has no decoder to check it
	// with; the server enforces its size (413).
	// The admin JSON bodies are read as JSON whatever the Content-Type
	// (lmstfy's examples send them form-encoded, curl -d): check them as
	// JSON.
	if rb := m.op.RequestBody; rb != nil && rb.Value != nil {
		switch c := rb.Value.Content; {
		case c["*/*"] != nil:
			in.Options.ExcludeRequestBody = true
		case len(c) == 1 && c["application/json"] != nil:
			r.Header.Set("Content-Type", "application/json")
		}
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		return fmt.Errorf("openapi: %s listener: %s %s (operation %s %s): the server accepted the request, but doc/openapi.yaml does not allow it: %v",
			listener, req.Method, req.URL.RequestURI(), req.Method, m.template, err)
	}
	return nil
}

// CheckWebhook validates a request Kairos sent (an OpenAPI 3.1 webhook of
// the description, such as "jobDelivery") against its operation's
// parameters (headers) and body.
func (v *Validator) CheckWebhook(name string, req *http.Request, body []byte) error {
	item := v.spec.Webhooks[name]
	if item == nil {
		return fmt.Errorf("openapi: doc/openapi.yaml describes no webhook %q", name)
	}
	op := item.GetOperation(req.Method)
	if op == nil {
		return fmt.Errorf("openapi: webhook %q: doc/openapi.yaml describes no %s", name, req.Method)
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: r,
		Route:   &routers.Route{Spec: v.spec, Path: name, PathItem: item, Method: req.Method, Operation: op},
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		return fmt.Errorf("openapi: webhook %q: %s %s does not match doc/openapi.yaml: %v", name, req.Method, req.URL, err)
	}
	return nil
}

// Seen returns the exchanges validated so far, as
// "listener METHOD template status", sorted.
func (v *Validator) Seen() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]string, 0, len(v.seen))
	for k := range v.seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Transport is an http.RoundTripper that validates every response of a
// registered listener against the description and fails the round trip
// (an error naming the route and the violation) when it does not match.
// Requests to hosts that were not registered pass through unchecked.
type Transport struct {
	Base      http.RoundTripper // nil: http.DefaultTransport
	Validator *Validator
	// CheckAccepted also validates every request answered with a 2xx
	// against its operation's parameters and request body
	// (Validator.CheckAccepted).
	CheckAccepted bool

	mu    sync.Mutex
	hosts map[string]string // host:port → listener
}

// NewTransport returns a Transport over base.
func NewTransport(base http.RoundTripper) (*Transport, error) {
	v, err := NewValidator()
	if err != nil {
		return nil, err
	}
	return &Transport{Base: base, Validator: v, hosts: map[string]string{}}, nil
}

// Register says that host ("host:port", or a URL) is a listener (Public or
// Admin) of a Kairos server under test.
func (t *Transport) Register(host, listener string) {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	t.mu.Lock()
	t.hosts[host] = listener
	t.mu.Unlock()
}

// Unregister forgets host (as given to Register): once its server is gone,
// the port may be reused by anything else, a server the transport must not
// take for it.
func (t *Transport) Unregister(host string) {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	t.mu.Lock()
	delete(t.hosts, host)
	t.mu.Unlock()
}

// RoundTrip sends req and validates the response.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	t.mu.Lock()
	listener, ok := t.hosts[req.URL.Host]
	t.mu.Unlock()
	var reqBody []byte
	if ok && t.CheckAccepted && req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := base.RoundTrip(req)
	if err != nil || !ok {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := t.Validator.Check(listener, req, resp.StatusCode, resp.Header, body); err != nil {
		return nil, err
	}
	if t.CheckAccepted && resp.StatusCode/100 == 2 {
		if err := t.Validator.CheckAccepted(listener, req, reqBody); err != nil {
			return nil, err
		}
	}
	return resp, nil
}
