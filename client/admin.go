package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Admin calls the admin API (tokens, rate limits, pools, info). It is safe
// for concurrent use. When the server's [Accounts] is set, give an account
// with WithBasicAuth.
type Admin struct {
	t *transport
}

// NewAdmin returns a client of the admin API at addr ("127.0.0.1:7778").
// WithNamespace and WithToken are ignored.
func NewAdmin(addr string, opts ...Option) (*Admin, error) {
	t, _, err := newTransport(addr, opts)
	if err != nil {
		return nil, err
	}
	return &Admin{t: t}, nil
}

// TokenOptions describe a token to create.
type TokenOptions struct {
	// Description is stored with the token (required).
	Description string
	// Token is the secret to create (at least 20 characters); empty lets
	// the server make one.
	Token string
	// Pool is the Redis pool of the namespace; empty means "default".
	Pool string
	// Queues limits the token to these queues (Kairos); empty: all.
	Queues []string
	// Roles limits the token to these roles among "publish", "consume"
	// and "manage" (Kairos); empty: all.
	Roles []string
}

// CreateToken creates a token for namespace and returns it as clients must
// send it ("pool:secret" for a pool other than "default").
func (a *Admin) CreateToken(ctx context.Context, namespace string, opts TokenOptions) (string, error) {
	if namespace == "" {
		return "", argError("empty namespace")
	}
	if opts.Description == "" {
		return "", argError("a token needs a description")
	}
	form := url.Values{"description": {opts.Description}}
	if opts.Token != "" {
		form.Set("token", opts.Token)
	}
	if len(opts.Queues) > 0 {
		form.Set("queues", strings.Join(opts.Queues, ","))
	}
	if len(opts.Roles) > 0 {
		form.Set("roles", strings.Join(opts.Roles, ","))
	}
	var q url.Values
	if opts.Pool != "" {
		q = url.Values{"pool": {opts.Pool}}
	}
	resp, err := a.t.do(ctx, request{
		method: http.MethodPost, path: a.path("token", namespace), query: q,
		body: []byte(form.Encode()), form: true, want: []int{http.StatusCreated},
	})
	if err != nil {
		return "", err
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := decode(resp, &out); err != nil {
		return "", err
	}
	return out.Token, nil
}

// ListTokens returns the tokens of namespace (token → description). With a
// pool ("" means "default" without prefixes), tokens are listed as
// "pool:token", as lmstfy does.
func (a *Admin) ListTokens(ctx context.Context, namespace, pool string) (map[string]string, error) {
	if namespace == "" {
		return nil, argError("empty namespace")
	}
	var q url.Values
	if pool != "" {
		q = url.Values{"pool": {pool}}
	}
	var out struct {
		Tokens map[string]string `json:"tokens"`
	}
	if err := a.get(ctx, a.path("token", namespace), q, &out); err != nil {
		return nil, err
	}
	if out.Tokens == nil {
		out.Tokens = map[string]string{}
	}
	return out.Tokens, nil
}

// DeleteToken deletes a token ("secret" or "pool:secret") of namespace and
// its rate limit. Deleting an unknown token is not an error.
func (a *Admin) DeleteToken(ctx context.Context, namespace, token string) error {
	if namespace == "" || token == "" {
		return argError("empty namespace or token")
	}
	_, err := a.t.do(ctx, request{
		method: http.MethodDelete, path: a.path("token", namespace, token), idempotent: true,
		want: []int{http.StatusNoContent},
	})
	return err
}

// Pools returns the names of the configured pools, sorted.
func (a *Admin) Pools(ctx context.Context) ([]string, error) {
	var out []string
	if err := a.get(ctx, a.path("pools"), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Info returns the namespaces of pool ("" means "default") and their
// queues.
func (a *Admin) Info(ctx context.Context, pool string) (map[string][]string, error) {
	var q url.Values
	if pool != "" {
		q = url.Values{"pool": {pool}}
	}
	var out map[string][]string
	if err := a.get(ctx, a.path("info"), q, &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string][]string{}
	}
	return out, nil
}

// ServerVersion is what the admin /version reports.
type ServerVersion struct {
	Version     string `json:"version"`
	BuildCommit string `json:"build_commit"`
	BuildDate   string `json:"build_date"`
}

// Version returns the server's version.
func (a *Admin) Version(ctx context.Context) (ServerVersion, error) {
	var out ServerVersion
	err := a.get(ctx, a.path("version"), nil, &out)
	return out, err
}

// Limit is a token's rate limit: at most Read consumes and Write publishes
// per Interval (whole seconds; rounded up); 0 = unlimited in that
// direction. WriteJobs (a Kairos extension) limits the jobs published per
// Interval, a bulk publish of n jobs counting n; 0 = none.
type Limit struct {
	Read      int64
	Write     int64
	WriteJobs int64
	Interval  time.Duration
}

type wireLimit struct {
	Read      int64 `json:"read"`
	Write     int64 `json:"write"`
	WriteJobs int64 `json:"write_jobs,omitempty"`
	Interval  int64 `json:"interval"`
}

func (l wireLimit) limit() Limit {
	return Limit{Read: l.Read, Write: l.Write, WriteJobs: l.WriteJobs, Interval: time.Duration(l.Interval) * time.Second}
}

// LimitEntry is one token's limit in Limits.
type LimitEntry struct {
	Namespace string
	// Token is "pool:token" for pools other than "default".
	Token string
	Limit Limit
}

// Limits returns every rate limit, sorted by namespace and token;
// forceUpdate makes the server reload them from Redis first.
func (a *Admin) Limits(ctx context.Context, forceUpdate bool) ([]LimitEntry, error) {
	var q url.Values
	if forceUpdate {
		q = url.Values{"force_update": {"true"}}
	}
	var out []struct {
		Namespace string    `json:"namespace"`
		Token     string    `json:"token"`
		Limiter   wireLimit `json:"limiter"`
	}
	if err := a.get(ctx, a.path("limits"), q, &out); err != nil {
		return nil, err
	}
	entries := make([]LimitEntry, len(out))
	for i, e := range out {
		entries[i] = LimitEntry{Namespace: e.Namespace, Token: e.Token, Limit: e.Limiter.limit()}
	}
	return entries, nil
}

// GetLimit returns the rate limit of a token; ErrNotFound when it has none.
func (a *Admin) GetLimit(ctx context.Context, namespace, token string) (Limit, error) {
	if namespace == "" || token == "" {
		return Limit{}, argError("empty namespace or token")
	}
	var out wireLimit
	if err := a.get(ctx, a.path("token", namespace, token, "limit"), nil, &out); err != nil {
		return Limit{}, err
	}
	return out.limit(), nil
}

// AddLimit gives a token a rate limit; ErrConflict when it has one.
func (a *Admin) AddLimit(ctx context.Context, namespace, token string, l Limit) error {
	return a.putLimit(ctx, http.MethodPost, namespace, token, l, http.StatusCreated)
}

// SetLimit creates or replaces the rate limit of a token.
func (a *Admin) SetLimit(ctx context.Context, namespace, token string, l Limit) error {
	return a.putLimit(ctx, http.MethodPut, namespace, token, l, http.StatusOK)
}

func (a *Admin) putLimit(ctx context.Context, method, namespace, token string, l Limit, want int) error {
	if namespace == "" || token == "" {
		return argError("empty namespace or token")
	}
	iv, err := seconds("interval", l.Interval)
	if err != nil {
		return err
	}
	body, err := json.Marshal(wireLimit{Read: l.Read, Write: l.Write, WriteJobs: l.WriteJobs, Interval: int64(iv)})
	if err != nil {
		return err
	}
	_, err = a.t.do(ctx, request{
		method: method, path: a.path("token", namespace, token, "limit"), body: body,
		header:     http.Header{"Content-Type": {"application/json"}},
		idempotent: method == http.MethodPut, want: []int{want},
	})
	return err
}

// DeleteLimit removes the rate limit of a token.
func (a *Admin) DeleteLimit(ctx context.Context, namespace, token string) error {
	if namespace == "" || token == "" {
		return argError("empty namespace or token")
	}
	_, err := a.t.do(ctx, request{
		method: http.MethodDelete, path: a.path("token", namespace, token, "limit"), idempotent: true,
		want: []int{http.StatusOK},
	})
	return err
}

// AccessLog reports whether the server's access log is on.
func (a *Admin) AccessLog(ctx context.Context) (bool, error) {
	var out struct {
		Status string `json:"status"`
	}
	if err := a.get(ctx, a.path("accesslog"), nil, &out); err != nil {
		return false, err
	}
	return out.Status == "enabled", nil
}

// SetAccessLog switches the access log of the server instance that
// answers.
func (a *Admin) SetAccessLog(ctx context.Context, on bool) error {
	status := "disable"
	if on {
		status = "enable"
	}
	_, err := a.t.do(ctx, request{
		method: http.MethodPost, path: a.path("accesslog"), query: url.Values{"status": {status}},
		idempotent: true, want: []int{http.StatusOK},
	})
	return err
}

// get sends an idempotent GET and decodes its 200 answer into out.
func (a *Admin) get(ctx context.Context, path string, q url.Values, out any) error {
	resp, err := a.t.do(ctx, request{method: http.MethodGet, path: path, query: q, idempotent: true, want: []int{http.StatusOK}})
	if err != nil {
		return err
	}
	return decode(resp, out)
}

// path joins escaped segments under the base URL.
func (a *Admin) path(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteString("/")
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
