package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/doc"
	"github.com/kairos-dev/kairos/server/openapitest"
)

// describedRoute is one (listener, method, OpenAPI path) of the server or
// of doc/openapi.yaml.
type describedRoute struct {
	listener, method, path string
	catchAll               bool
}

func (r describedRoute) String() string {
	return fmt.Sprintf("%s %s %s", r.listener, r.method, r.path)
}

// registeredRoutes lists what the server's gin engines serve on each
// listener. Nothing else is served outside gin: the event loops' fast path
// (fastpath.go) serves a subset of these routes with the same wire
// behaviour and hands every other request to gin, and withRequestID only
// wraps the engines.
func registeredRoutes(t *testing.T) []describedRoute {
	t.Helper()
	env := newEnv(t)
	var out []describedRoute
	for listener, eng := range map[string]*gin.Engine{
		openapitest.Public: env.srv.apiRoutes(),
		openapitest.Admin:  env.srv.adminRoutes(),
	} {
		for _, ri := range eng.Routes() {
			p, catchAll := openapitest.GinPath(ri.Path)
			out = append(out, describedRoute{listener, ri.Method, p, catchAll})
		}
	}
	return out
}

// describedRoutes lists the operations of doc/openapi.yaml per listener
// (its public and admin tags; other tags, such as dashboard, group
// operations), with the methods of x-kairos-other-methods.
func describedRoutes(t *testing.T) []describedRoute {
	t.Helper()
	spec, err := openapitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var out []describedRoute
	for path, item := range spec.Paths.Map() {
		catchAll := openapitest.IsCatchAll(item)
		for method, op := range item.Operations() {
			if !slices.Contains(op.Tags, openapitest.Public) && !slices.Contains(op.Tags, openapitest.Admin) {
				t.Errorf("doc/openapi.yaml: %s %s has no listener tag: tag it public and/or admin", method, path)
			}
			for _, tag := range op.Tags {
				if tag != openapitest.Public && tag != openapitest.Admin {
					continue // a grouping tag (dashboard), not a listener
				}
				out = append(out, describedRoute{tag, method, path, catchAll})
				for _, m := range openapitest.OtherMethods(item) {
					out = append(out, describedRoute{tag, m, path, catchAll})
				}
			}
		}
	}
	return out
}

// TestOpenAPIDescribesEveryRoute: every route either listener registers is
// described in doc/openapi.yaml (same path template, method, and a tag
// naming the listener), and nothing else is described. The failure lists
// each route and what to add or remove.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	registered, described := registeredRoutes(t), describedRoutes(t)
	key := func(r describedRoute) string { return r.String() }
	reg, desc := map[string]describedRoute{}, map[string]describedRoute{}
	for _, r := range registered {
		reg[key(r)] = r
	}
	for _, r := range described {
		desc[key(r)] = r
	}

	var missing, extra, catchAll []string
	for k, r := range reg {
		d, ok := desc[k]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("  %-62s add under paths: %q: %s: {tags: [%s], summary: …, x-kairos-origin: kairos, parameters: […], responses: {…}}",
				k, r.path, strings.ToLower(r.method), r.listener))
		case d.catchAll != r.catchAll:
			catchAll = append(catchAll, fmt.Sprintf("  %s: the route catch-all is %v, the path item's x-kairos-catch-all is %v", k, r.catchAll, d.catchAll))
		}
	}
	for k := range desc {
		if _, ok := reg[k]; !ok {
			extra = append(extra, "  "+k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(catchAll)
	if len(missing) > 0 {
		t.Errorf("%d routes are registered but not described in doc/openapi.yaml (listener method path):\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
	if len(extra) > 0 {
		t.Errorf("%d operations of doc/openapi.yaml are not registered by the server (listener method path): remove them or fix their path, method or tags:\n%s",
			len(extra), strings.Join(extra, "\n"))
	}
	if len(catchAll) > 0 {
		t.Errorf("catch-all routes (gin *name) and x-kairos-catch-all disagree:\n%s", strings.Join(catchAll, "\n"))
	}
}

// TestOpenAPIOperationsComplete: every operation says where it comes from
// and declares X-Request-ID on every response, a 503 with Retry-After
// wherever it can reach Redis, and JSON errors for every 4xx and 5xx.
func TestOpenAPIOperationsComplete(t *testing.T) {
	spec, err := openapitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if o, _ := op.Extensions["x-kairos-origin"].(string); o != "lmstfy" && o != "kairos" {
				bad = append(bad, where+": x-kairos-origin must be lmstfy or kairos")
			}
			if op.Summary == "" {
				bad = append(bad, where+": no summary")
			}
			for code, resp := range op.Responses.Map() {
				if resp.Value.Headers["X-Request-ID"] == nil {
					bad = append(bad, fmt.Sprintf("%s: response %s does not declare X-Request-ID", where, code))
				}
				if code == "503" && resp.Value.Headers["Retry-After"] == nil {
					bad = append(bad, where+": 503 without Retry-After")
				}
			}
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("doc/openapi.yaml:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestOpenAPIServed: the admin listener serves doc/openapi.yaml at
// /openapi.yaml as application/yaml, byte for byte; the public one does not.
func TestOpenAPIServed(t *testing.T) {
	env := newEnv(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil)
	req.Host = "localhost"
	env.srv.AdminHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/yaml" {
		t.Fatalf("admin GET /openapi.yaml: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec.Body.String() != string(doc.OpenAPI) || len(doc.OpenAPI) == 0 {
		t.Fatalf("admin GET /openapi.yaml: %d bytes, want doc/openapi.yaml's %d", rec.Body.Len(), len(doc.OpenAPI))
	}
	rec = httptest.NewRecorder()
	env.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("public GET /openapi.yaml: %d, want 404", rec.Code)
	}
}
