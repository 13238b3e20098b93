package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/openapitest"
)

// oaClient calls one Kairos through its own validating transport, so that
// the test knows which operations and statuses it exercised.
type oaClient struct {
	t      *testing.T
	tr     *openapitest.Transport
	c      *http.Client
	api    string
	admin  string
	basic  string // Authorization header of the admin account
	token  string
	nsPath string // "/api/<ns>/"
}

// do sends one request and checks its status; the transport has validated
// the response against doc/openapi.yaml (a violation fails the request).
func (o *oaClient) do(status int, method, u, token string, body []byte, hdr map[string]string) *response {
	o.t.Helper()
	r, err := tryHTTP(context.Background(), o.c, method, u, token, body, hdr)
	if err != nil {
		o.t.Fatalf("%s %s: %v", method, u, err)
	}
	if r.Status != status {
		o.t.Fatalf("%v: want status %d", r, status)
	}
	return r
}

// pub calls the public API at /api/<ns>/<path>?<q> with the test's token.
func (o *oaClient) pub(status int, method, path, q string, body []byte, hdr map[string]string) *response {
	o.t.Helper()
	u := o.api + o.nsPath + path
	if q != "" {
		u += "?" + q
	}
	return o.do(status, method, u, o.token, body, hdr)
}

// adm calls the admin API with the account's basic auth.
func (o *oaClient) adm(status int, method, path, body string, hdr map[string]string) *response {
	o.t.Helper()
	h := map[string]string{"Authorization": o.basic}
	if strings.HasPrefix(body, "{") {
		h["Content-Type"] = "application/json"
	}
	for k, v := range hdr {
		h[k] = v
	}
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return o.do(status, method, o.admin+path, "", b, h)
}

// jsonField extracts a top-level string field of a JSON object body.
func jsonField(tb testing.TB, r *response, field string) string {
	tb.Helper()
	var m map[string]any
	r.decode(tb, &m)
	s, _ := m[field].(string)
	if s == "" {
		tb.Fatalf("%v: no %q", r, field)
	}
	return s
}

// TestE2EOpenAPIEveryOperation exercises every operation of
// doc/openapi.yaml on a real server (real Redis, real sockets, [Accounts]
// set) with success and error cases, and validates each response against
// the description (openapitest's transport: the status must be declared,
// the declared headers present and valid, the body must match the schema,
// which forbids undeclared fields), and each request the server accepted
// against its operation's parameters and body. It then checks that every described
// operation answered at least once with a 2xx, and every operation that
// declares a 400 answered at least once with a 4xx: a route added to the
// description is exercised here, or this test says which one is not.
func TestE2EOpenAPIEveryOperation(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{})
	cfg := redisConfig(rs.Addr)
	cfg.Accounts = map[string]string{"admin": "secret"}
	k := startKairos(t, cfg)
	tr, err := openapitest.NewTransport(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.CheckAccepted = true
	tr.Register(k.API, openapitest.Public)
	tr.Register(k.Admin, openapitest.Admin)
	o := &oaClient{
		t: t, tr: tr,
		c:      &http.Client{Timeout: 30 * time.Second, Transport: tr},
		api:    k.API,
		admin:  k.Admin,
		basic:  "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:secret")),
		nsPath: "/api/oa/",
	}
	get, put, post, del := http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete
	ext := map[string]string{"X-Kairos-Extensions": "1"}

	// Both listeners: health, readiness.
	for _, base := range []string{k.API, k.Admin} {
		o.do(200, get, base+"/healthz", "", nil, nil)
		o.do(200, get, base+"/readyz", "", nil, nil)
		o.do(404, get, base+"/no/such/route", "", nil, nil)
	}

	// Admin, always open.
	o.do(200, get, k.Admin+"/pools", "", nil, nil)
	o.do(200, get, k.Admin+"/version", "", nil, nil)
	spec := o.do(200, get, k.Admin+"/openapi.yaml", "", nil, nil)
	if !strings.HasPrefix(string(spec.Body), "openapi: 3.1") || spec.Header.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /openapi.yaml: %q, %.40q", spec.Header.Get("Content-Type"), spec.Body)
	}
	o.do(200, get, k.Admin+"/accesslog", "", nil, nil)

	// Tokens (basic auth refused without the account).
	o.do(401, post, k.Admin+"/token/oa?description=x", "", nil, nil)
	o.adm(400, post, "/token/oa", "", nil) // no description
	o.adm(400, post, "/token/bad.ns?description=x", "", nil)
	o.token = jsonField(t, o.adm(201, post, "/token/oa?description=openapi", "", nil), "token")
	consumer := jsonField(t, o.adm(201, post, "/token/oa", "description=scoped&queues=q&roles=consume",
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"}), "token")
	o.adm(200, get, "/token/oa", "", nil)
	o.adm(400, get, "/token/oa?pool=nope", "", nil)
	o.adm(401, get, "/token/oa", "", map[string]string{"Authorization": "Basic eDp5"})

	// Quotas (issue #31): set, read, list, remove, and refused input.
	o.adm(200, put, "/quota/oa", `{"max_jobs":100000,"max_bytes":0}`, nil)
	o.adm(400, put, "/quota/oa", `{"max_jobs":-1}`, nil)
	o.adm(200, get, "/quota/oa", "", nil)
	o.adm(400, get, "/quota/bad.ns", "", nil)
	o.adm(200, get, "/quota", "", nil)
	o.adm(400, get, "/quota?pool=nope", "", nil)
	o.adm(204, del, "/quota/oa", "", nil)
	o.adm(400, del, "/quota/bad.ns", "", nil)

	// Publish, bulk, re-publish.
	id := jsonField(t, o.pub(201, put, "q", "ttl=600&tries=3", []byte("hello"), nil), "job_id")
	o.pub(201, put, "q", "priority=5&delay_ms=0", []byte("second"), map[string]string{"Enable-Job-Version": "YES", "Job-Attr-Trace": "t1"})
	o.pub(400, put, "q", "delay=-1", []byte("x"), nil)
	o.pub(400, put, "q", "ttl=1&delay=2", []byte("x"), nil)
	o.pub(413, put, "q", "", make([]byte, 1<<20+1), nil)
	o.do(401, put, k.API+"/api/oa/q", "", []byte("x"), nil)
	o.do(401, put, k.API+"/api/oa/q", "wrong-token-0000000000", []byte("x"), nil)
	o.do(404, put, k.API+"/api/oa/q", "nopool:"+o.token, []byte("x"), nil)
	o.do(403, put, k.API+"/api/oa/q", consumer, []byte("x"), nil)
	keyed := jsonField(t, o.pub(201, put, "q", "job_key=k1", []byte("keyed"), nil), "job_id")
	o.pub(200, put, "q", "", []byte("keyed"), map[string]string{"Idempotency-Key": "k1"})
	o.pub(201, put, "q/bulk", "", []byte(`["a",{"b":1}]`), nil)
	o.pub(400, put, "q/bulk", "", []byte(`{}`), nil)
	o.pub(400, put, "q/bulk", "job_key=x", []byte(`[1]`), nil)
	id = jsonField(t, o.pub(201, put, "q/job/"+id, "ttl=600&tries=3", []byte("hello again"), nil), "job_id")
	o.pub(400, put, "q/job/"+id, "tries=0", []byte("x"), nil)

	// Size, peek, peek job (lmstfy's form and the inspection form).
	o.do(200, get, k.API+"/api/oa/q/size", "", nil, nil)
	o.do(400, get, k.API+"/api/oa/_q/size", "", nil, nil)
	o.pub(200, get, "q/peek", "", nil, nil)
	o.pub(200, get, "q/peek", "", nil, ext)
	o.pub(404, get, "empty/peek", "", nil, nil)
	o.pub(200, get, "q/job/"+id, "", nil, nil)
	o.pub(200, get, "q/job/"+id, "", nil, ext)
	o.pub(404, get, "q/job/01M00000000000000000000000", "", nil, nil)

	// Cancel by key.
	o.pub(200, del, "q/job_key/k1", "", nil, nil)
	o.pub(404, del, "q/job_key/k1", "", nil, nil)
	o.pub(404, get, "q/job/"+keyed, "", nil, nil)

	// Consume: one job, with a receipt, a batch, nothing, bad parameters.
	j := o.pub(200, get, "q", "ttr=30", nil, nil)
	o.pub(204, del, "q/job/"+jsonField(t, j, "job_id"), "", nil, nil)
	jx := o.pub(200, get, "q", "ttr_ms=30000", nil, ext)
	xid, receipt := jsonField(t, jx, "job_id"), jsonField(t, jx, "receipt")
	o.pub(200, put, "q/job/"+xid+"/touch", "receipt="+receipt+"&ttr_ms=60000", nil, nil)
	o.pub(409, put, "q/job/"+xid+"/touch", "receipt=0000000000000000", nil, nil)
	o.pub(400, put, "q/job/"+xid+"/touch", "", nil, nil)
	o.pub(204, put, "q/job/"+xid+"/release", "receipt="+receipt+"&keep_try=true", nil, nil)
	o.pub(400, put, "q/job/"+xid+"/release", "receipt=xyz", nil, nil)
	o.pub(409, del, "q/job/"+xid, "receipt="+receipt, nil, nil)
	o.pub(400, del, "q/job/"+xid, "receipt=", nil, nil)
	o.pub(200, get, "q,other", "count=10", nil, nil)
	o.pub(404, get, "q", "timeout_ms=10", nil, nil)
	o.pub(400, get, "q", "count=0", nil, nil)
	o.pub(400, get, "q,_bad", "", nil, nil)

	// Dead letter: a job consumed on its last try with a 1 ms TTR dies.
	dead := jsonField(t, o.pub(201, put, "dlq", "tries=1", []byte("doomed"), nil), "job_id")
	o.pub(200, get, "dlq", "ttr_ms=1", nil, nil)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(o.pub(200, get, "dlq/deadletter", "", nil, nil).Body), dead) {
		if time.Now().After(deadline) {
			t.Fatal("the job did not reach the dead letter within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.do(200, get, k.API+"/api/oa/dlq/deadletter/size", "", nil, nil)
	o.pub(200, get, "dlq/deadletter/jobs", "limit=10", nil, nil)
	o.pub(400, get, "dlq/deadletter/jobs", "offset=-1", nil, nil)
	o.pub(204, put, "dlq/deadletter/job/"+dead, "ttl=60", nil, nil)
	o.pub(404, put, "dlq/deadletter/job/"+dead, "", nil, nil)
	o.pub(400, put, "dlq/deadletter/job/"+dead, "ttl=x", nil, nil)
	o.pub(200, get, "dlq", "ttr_ms=1", nil, nil)
	for !strings.Contains(string(o.pub(200, get, "dlq/deadletter", "", nil, nil).Body), dead) {
		if time.Now().After(deadline) {
			t.Fatal("the respawned job did not die again within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.pub(200, put, "dlq/deadletter", "limit=all&ttl=60", nil, nil)
	o.pub(400, put, "dlq/deadletter", "limit=0", nil, nil)
	o.pub(204, del, "dlq/deadletter", "limit=all", nil, nil)
	o.pub(400, del, "dlq/deadletter", "limit=x", nil, nil)
	o.pub(404, del, "dlq/deadletter/job/"+dead, "", nil, nil)
	// Released on its last try, a job dies at once.
	dead2 := jsonField(t, o.pub(201, put, "dlq2", "tries=1", []byte("doomed too"), nil), "job_id")
	r := o.pub(200, get, "dlq2", "", nil, ext)
	o.pub(400, put, "dlq2/job/"+dead2+"/release", "receipt="+jsonField(t, r, "receipt"), []byte("{nope"), nil)
	o.pub(204, put, "dlq2/job/"+dead2+"/release", "receipt="+jsonField(t, r, "receipt"), []byte(`{"error":"db timeout"}`),
		map[string]string{"Content-Type": "application/json"})
	o.pub(200, get, "dlq2/deadletter/jobs", "", nil, nil)
	o.pub(200, get, "dlq2/deadletter/jobs", "error=timeout&reason=nacked", nil, nil)
	o.pub(200, get, "dlq2/job/"+dead2, "", nil, ext)
	json := map[string]string{"Content-Type": "application/json"}
	o.pub(200, "POST", "dlq2/deadletter/jobs/respawn", "", []byte(`{"job_ids":["`+dead2+`"],"ttl":60}`), json)
	r = o.pub(200, get, "dlq2", "", nil, ext)
	o.pub(204, put, "dlq2/job/"+dead2+"/release", "receipt="+jsonField(t, r, "receipt")+"&error=again", nil, nil)
	o.pub(400, "POST", "dlq2/deadletter/jobs/delete", "", []byte(`{}`), json)
	o.pub(200, "POST", "dlq2/deadletter/jobs/delete", "", []byte(`{"match":{"error":"nothing like it"}}`), json)
	o.pub(400, "POST", "dlq2/deadletter/jobs/respawn", "", []byte(`{"match":{"reason":"sad"}}`), json)
	o.pub(204, del, "dlq2/deadletter/job/"+dead2, "", nil, nil)
	o.pub(200, "POST", "dlq2/deadletter/jobs/delete", "", []byte(`{"job_ids":["`+dead2+`"]}`), json) // missing: [dead2]

	// Schedules: create (a full template, and an @every 1s one with an
	// empty body that fires), replace, list, get, pause, resume, delete,
	// and the refusals.
	vers := map[string]string{"Enable-Job-Version": "YES", "Job-Attr-Trace": "t1"}
	o.pub(200, put, "sq/schedule/nightly", "cron=0+2+*+*+*&tz=Europe/Berlin&ttl=3600&tries=3&priority=5&missed=last", []byte(`{"report":"daily"}`), vers)
	o.pub(200, put, "sq/schedule/nightly", "cron=0+3+*+*+*&ttl_ms=1500", []byte("replaced"), nil)
	o.pub(200, put, "sq/schedule/tick.1s", "cron=@every+1s", nil, nil)
	for _, q := range []string{"", "cron=", "cron=0+25+*+*+*", "cron=@every+100ms", "cron=0+0+30+2+*",
		"cron=@daily&tz=Europe/Berln", "cron=@daily&missed=maybe", "cron=@daily&delay=1", "cron=@daily&delay_ms=1",
		"cron=@daily&due_at=1700000000000", "cron=@daily&job_key=k", "cron=@daily&tries=0", "cron=@daily&ttl=x",
		"cron=@daily&priority=256"} {
		o.pub(400, put, "sq/schedule/bad", q, []byte("x"), nil)
	}
	o.pub(400, put, "sq/schedule/bad", "cron=@daily", []byte("x"), map[string]string{"Idempotency-Key": "k"})
	o.pub(400, put, "sq/schedule/bad!name", "cron=@daily", []byte("x"), nil)
	o.pub(413, put, "sq/schedule/bad", "cron=@daily", make([]byte, 1<<20+1), nil)
	o.pub(404, get, "sq/schedule/bad", "", nil, nil) // nothing was stored
	o.do(401, put, k.API+"/api/oa/sq/schedule/bad?cron=@daily", "", []byte("x"), nil)
	o.do(403, put, k.API+"/api/oa/sq/schedule/bad?cron=@daily", consumer, []byte("x"), nil)
	o.do(404, put, k.API+"/api/oa/sq/schedule/bad?cron=@daily", "nopool:"+o.token, []byte("x"), nil)
	o.pub(200, get, "sq/schedule", "", nil, nil)
	o.pub(200, get, "noschedules/schedule", "", nil, nil)
	o.do(403, get, k.API+"/api/oa/sq/schedule", consumer, nil, nil)
	o.pub(400, get, "_sq/schedule", "", nil, nil)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(string(o.pub(200, get, "sq/schedule/tick.1s", "", nil, nil).Body), `"fired":1`); {
		if time.Now().After(deadline) {
			t.Fatal("the @every 1s schedule did not fire within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	o.pub(400, get, "sq/schedule/bad!name", "", nil, nil)
	o.pub(404, get, "sq/schedule/nope", "", nil, nil)
	o.pub(200, put, "sq/schedule/tick.1s/pause", "", nil, nil)
	o.pub(200, put, "sq/schedule/tick.1s/pause", "", nil, nil)
	o.pub(404, put, "sq/schedule/nope/pause", "", nil, nil)
	o.pub(400, put, "sq/schedule/bad!name/pause", "", nil, nil)
	o.pub(200, put, "sq/schedule/tick.1s/resume", "", nil, nil)
	o.pub(404, put, "sq/schedule/nope/resume", "", nil, nil)
	o.pub(400, put, "sq/schedule/bad!name/resume", "", nil, nil)
	o.do(403, put, k.API+"/api/oa/sq/schedule/tick.1s/pause", consumer, nil, nil)
	o.pub(204, del, "sq/schedule/tick.1s", "", nil, nil)
	o.pub(404, del, "sq/schedule/tick.1s", "", nil, nil)
	o.pub(400, del, "sq/schedule/bad!name", "", nil, nil)
	o.pub(204, del, "sq/schedule/nightly", "", nil, nil)

	// Pause, resume, destroy; the scoped token may not.
	o.pub(204, put, "q/pause", "", nil, nil)
	o.pub(404, get, "q", "", nil, nil)
	o.pub(204, put, "q/resume", "", nil, nil)
	o.do(403, put, k.API+"/api/oa/q/pause", consumer, nil, nil)
	o.do(403, put, k.API+"/api/oa/q/resume", consumer, nil, nil)
	o.pub(204, del, "q", "", nil, nil)
	o.do(403, del, k.API+"/api/oa/q", consumer, nil, nil)

	// Rate limits: a token allowed one publish a minute.
	limited := jsonField(t, o.adm(201, post, "/token/oa?description=limited", "", nil), "token")
	lim := "/token/oa/" + limited + "/limit"
	o.adm(404, get, lim, "", nil)
	o.adm(201, post, lim, `{"read":0,"write":1,"interval":60}`, nil)
	o.adm(409, post, lim, `{"read":0,"write":1,"interval":60}`, nil)
	o.adm(200, get, lim, "", nil)
	o.adm(400, put, lim, `{"read":0,"write":0,"interval":60}`, nil)
	o.adm(400, put, lim, `{"read":"x"}`, nil)
	o.adm(200, put, lim, `{"read":0,"write":1,"interval":60}`, nil)
	o.adm(200, get, "/limits", "", nil)
	o.adm(200, get, "/limits?force_update=true", "", nil)
	// The audit log (holds the token and limit changes above by now).
	o.adm(200, get, "/audit", "", nil)
	o.adm(200, get, "/audit?limit=2&account=admin&namespace=oa", "", nil)
	o.adm(400, get, "/audit?limit=0", "", nil)
	o.do(401, get, k.Admin+"/audit", "", nil, nil)
	o.do(201, put, k.API+"/api/oa/q", limited, []byte("1"), nil)
	o.do(429, put, k.API+"/api/oa/q", limited, []byte("2"), nil)
	o.adm(200, del, lim, "", nil)
	o.adm(400, del, "/token/bad.ns/"+limited+"/limit", "", nil)
	o.adm(204, del, "/token/oa/"+limited, "", nil)
	o.adm(400, del, "/token/oa/nope:"+limited, "", nil)

	// Queue settings.
	o.adm(200, get, "/queue/oa/q/config", "", nil)
	o.adm(200, put, "/queue/oa/q/config", `{"backoff":"fixed:1s","dead_ttl_ms":60000}`, nil)
	o.adm(400, put, "/queue/oa/q/config", `{"backoff":"every minute"}`, nil)
	o.adm(400, get, "/queue/oa/q/config?pool=nope", "", nil)

	// Groups and in-flight limits (issue #32): a grouped job's JSON, the
	// limits in the config, the groups route.
	o.adm(200, put, "/queue/oa/grp/config", `{"max_in_flight":3,"group_max_in_flight":2,"group_weights":{"vip":2}}`, nil)
	o.adm(400, put, "/queue/oa/grp/config", `{"group_weights":{"vip":0}}`, nil)
	o.pub(201, put, "grp", "group=vip", []byte("g"), nil)
	o.pub(400, put, "grp", "group=a.b", []byte("g"), nil)
	if r := o.pub(200, get, "grp", "timeout=0", nil, nil); !strings.Contains(string(r.Body), `"group":"vip"`) {
		t.Fatalf("consume of a grouped job: %v", r)
	}
	o.adm(200, get, "/queue/oa/grp/groups?limit=5", "", nil)
	o.adm(400, get, "/queue/oa/grp/groups?limit=0", "", nil)

	// Webhooks, to a receiver that checks each delivery against the
	// description's jobDelivery webhook and accepts it.
	delivered := make(chan error, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = tr.Validator.CheckWebhook("jobDelivery", r, b)
		}
		select {
		case delivered <- err:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	o.adm(200, put, "/webhook/oa/hooked", `{"url":"`+recv.URL+`","secret":"s3cret","concurrency":2}`, nil)
	o.pub(201, put, "hooked", "", []byte("pushed"), nil)
	select {
	case err := <-delivered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook delivery within 10 s")
	}
	o.adm(400, put, "/webhook/oa/hooked", `{"url":"ftp://x","secret":"s"}`, nil)
	o.adm(200, get, "/webhook/oa/hooked", "", nil)
	o.adm(200, get, "/webhooks", "", nil)
	o.adm(204, del, "/webhook/oa/hooked", "", nil)
	o.adm(404, get, "/webhook/oa/hooked", "", nil)
	o.adm(404, del, "/webhook/oa/hooked", "", nil)

	// Operations endpoints behind basic auth.
	o.adm(200, get, "/info", "", nil)
	o.adm(400, get, "/info?pool=nope", "", nil)
	o.do(401, get, k.Admin+"/info", "", nil, nil)
	o.adm(200, get, "/metrics", "", nil)
	o.do(401, get, k.Admin+"/metrics", "", nil, nil)
	o.adm(200, post, "/accesslog?status=enable", "", nil)
	o.adm(400, post, "/accesslog?status=maybe", "", nil)
	o.adm(200, get, "/debug/pprof/", "", nil)
	o.adm(200, get, "/debug/pprof/cmdline", "", nil)
	o.adm(404, get, "/debug/pprof/nosuchprofile", "", nil)
	o.do(401, get, k.Admin+"/debug/pprof/", "", nil, nil)
	for _, m := range []string{put, post, del, http.MethodOptions, http.MethodHead, http.MethodPatch, http.MethodTrace} {
		o.adm(200, m, "/debug/pprof/cmdline", "", nil)
		o.do(401, m, k.Admin+"/debug/pprof/cmdline", "", nil, nil)
	}

	// The dashboard's data (doc/dashboard.md).
	dashID := jsonField(t, o.pub(201, put, "dash", "delay=60", []byte("later"), nil), "job_id")
	o.adm(200, get, "/overview", "", nil)
	o.do(401, get, k.Admin+"/overview", "", nil, nil)
	o.adm(200, get, "/history?range=24h&step=300", "", nil)
	o.adm(400, get, "/history?range=2h", "", nil)
	o.do(401, get, k.Admin+"/history", "", nil, nil)
	o.adm(200, get, "/history/oa", "", nil)
	o.adm(400, get, "/history/oa?step=30", "", nil)
	o.adm(200, get, "/history/oa/dash?range=15m", "", nil)
	o.adm(400, get, "/history/oa/dash?from=x", "", nil)
	o.adm(200, get, "/queues/oa?sort=ready&order=desc", "", nil)
	o.adm(400, get, "/queues/oa?limit=0", "", nil)
	o.adm(200, get, "/queue/oa/dash/jobs?state=delayed", "", nil)
	o.adm(400, get, "/queue/oa/dash/jobs?state=dead", "", nil)
	o.adm(200, get, "/queue/oa/dash/job/"+dashID, "", nil)
	o.adm(404, get, "/queue/oa/dash/job/01M00000000000000000000000", "", nil)
	o.adm(200, get, "/queue/oa/dash/deadletter/jobs", "", nil)
	o.adm(400, get, "/queue/oa/dash/deadletter/jobs?limit=0", "", nil)
	o.adm(200, get, "/job/"+dashID, "", nil)
	o.adm(400, get, "/job/nope", "", nil)
	o.adm(404, get, "/job/01M00000000000000000000000", "", nil)

	// The web dashboard (doc/dashboard.md): every page, the static files,
	// one valid POST per action with the CSRF cookie and token a page
	// gives, and the refusals. Redirects are not followed: the 303s are
	// what is checked.
	ui := &oaClient{t: t, tr: tr, admin: k.Admin, basic: o.basic,
		c: &http.Client{Timeout: 30 * time.Second, Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	uiDo := func(status int, method, path string, form url.Values, hdr map[string]string) *response {
		t.Helper()
		var body string
		if form != nil {
			body = form.Encode()
			hdr = maps.Clone(hdr)
			if hdr == nil {
				hdr = map[string]string{}
			}
			hdr["Content-Type"] = "application/x-www-form-urlencoded"
		}
		return ui.adm(status, method, path, body, hdr)
	}
	home := uiDo(200, get, "/ui/", nil, nil)
	var csrf string
	for _, c := range (&http.Response{Header: home.Header}).Cookies() {
		if c.Name == "kairos_csrf" {
			csrf = c.Value
		}
	}
	if csrf == "" || !strings.Contains(string(home.Body), `name="pool"`) {
		t.Fatalf("GET /ui/: no kairos_csrf cookie or no page: %v", home.Header)
	}
	cookie := map[string]string{"Cookie": "kairos_csrf=" + csrf}
	withCSRF := func(f url.Values) url.Values {
		f.Set("_csrf", csrf)
		return f
	}
	wantLocation := func(r *response, want string) {
		t.Helper()
		if got := r.Header.Get("Location"); got != want {
			t.Fatalf("%v: Location %q, want %q", r, got, want)
		}
	}
	o.do(401, get, k.Admin+"/ui/", "", nil, nil)
	o.do(401, get, k.Admin+"/ui/static/app.css", "", nil, nil)
	uiDo(200, get, "/ui/ns/default/oa?sort=ready&order=desc&per=10&page=1&filter=da", nil, nil)
	uiDo(400, get, "/ui/ns/default/bad.ns", nil, nil)
	uiDo(404, get, "/ui/ns/nopool/oa", nil, nil)
	uiDo(200, get, "/ui/queue/default/oa/dash?ready_cursor=0&delayed_cursor=0&in_flight_cursor=0&dead_offset=0", nil, map[string]string{"X-Kairos-Live": "1"})
	uiDo(400, get, "/ui/queue/default/oa/bad.q", nil, nil)
	if b := uiDo(200, get, "/ui/job/default/oa/dash/"+dashID+"?as=base64", nil, nil).Body; !strings.Contains(string(b), base64.StdEncoding.EncodeToString([]byte("later"))) {
		t.Fatalf("the job page does not show the body in base64:\n%s", b)
	}
	uiDo(404, get, "/ui/job/default/oa/dash/01M00000000000000000000000", nil, nil)
	uiDo(400, get, "/ui/job/default/bad.ns/dash/"+dashID, nil, nil)
	jobPage := "/ui/job/default/oa/dash/" + dashID
	wantLocation(uiDo(303, get, "/ui/lookup?id="+dashID, nil, nil), jobPage)
	wantLocation(uiDo(303, get, "/ui/lookup?pool=default&namespace=oa&queue=dash&id="+dashID, nil, nil), jobPage)
	uiDo(400, get, "/ui/lookup", nil, nil)
	uiDo(404, get, "/ui/lookup?id=01M00000000000000000000000", nil, nil)
	// A lookup says where it searched (issue #33 item 5): one queue is
	// not the pool.
	if b := string(uiDo(404, get, "/ui/lookup?pool=default&namespace=oa&queue=dash&id=01M00000000000000000000000", nil, nil).Body); !strings.Contains(b, "not found in queue oa/dash of pool default") {
		t.Fatalf("a lookup in one queue does not say so:\n%s", b)
	}
	if b := string(uiDo(404, get, "/ui/lookup?pool=default&namespace=oa&id=01M00000000000000000000000", nil, nil).Body); !strings.Contains(b, "not found in namespace oa (") {
		t.Fatalf("a lookup in one namespace does not say so:\n%s", b)
	}
	uiDo(404, get, "/ui/lookup?pool=nope&id="+dashID, nil, nil)
	uiDo(200, get, "/ui/tokens?pool=default&namespace=oa", nil, nil)
	uiDo(400, get, "/ui/tokens?namespace=bad.ns", nil, nil)
	uiDo(200, get, "/ui/audit", nil, nil)
	uiDo(200, get, "/ui/audit?before=3&limit=2&account=admin&namespace=oa", nil, nil)
	uiDo(400, get, "/ui/audit?before=x", nil, nil)
	uiDo(404, get, "/ui/tokens?pool=nope", nil, nil)
	for file, ct := range map[string]string{"app.css": "text/css", "app.js": "text/javascript", "charts.js": "text/javascript",
		"vendor/uplot/uPlot.iife.min.js": "text/javascript", "vendor/uplot/uPlot.min.css": "text/css", "vendor/uplot/LICENSE": "text/plain"} {
		if r := uiDo(200, get, "/ui/static/"+file, nil, nil); !strings.HasPrefix(r.Header.Get("Content-Type"), ct) || len(r.Body) == 0 {
			t.Fatalf("GET /ui/static/%s: Content-Type %q, %d bytes; want %s", file, r.Header.Get("Content-Type"), len(r.Body), ct)
		}
	}
	if r := uiDo(206, get, "/ui/static/app.js", nil, map[string]string{"Range": "bytes=0-9"}); len(r.Body) != 10 {
		t.Fatalf("a range of app.js: %d bytes, want 10", len(r.Body))
	}
	uiDo(416, get, "/ui/static/app.js", nil, map[string]string{"Range": "bytes=99999999-"})
	uiDo(301, get, "/ui/static/vendor", nil, nil)
	uiDo(404, get, "/ui/static/vendor/", nil, nil)
	uiDo(404, get, "/ui/static/nope.js", nil, nil)

	// Queue actions, on a queue with two dead jobs (released on their last try).
	var uiDead []string
	for range 2 {
		id := jsonField(t, o.pub(201, put, "uiq", "tries=1", []byte("to die"), nil), "job_id")
		r := o.pub(200, get, "uiq", "", nil, ext)
		o.pub(204, put, "uiq/job/"+jsonField(t, r, "job_id")+"/release", "receipt="+jsonField(t, r, "receipt"), nil, nil)
		uiDead = append(uiDead, id)
	}
	uiq := "/ui/queue/default/oa/uiq"
	for _, a := range []struct {
		action string
		form   url.Values
	}{
		{"pause", url.Values{}},
		{"resume", url.Values{}},
		{"backoff", url.Values{"backoff": {"fixed:2s"}}},
		{"respawn-all", url.Values{}}, // both dead jobs ready again
	} {
		wantLocation(uiDo(303, post, uiq+"/"+a.action, withCSRF(a.form), cookie), uiq)
	}
	o.adm(200, get, "/queue/oa/uiq/config", "", nil).wantBody(t, `{"backoff":"fixed:2s","dead_ttl_ms":0,"paused":false,"shards":1}`)
	// Job actions: the respawned jobs die again, one is respawned back to
	// its page, one deleted from the dead letter, then the first deleted.
	for range uiDead {
		r := o.pub(200, get, "uiq", "", nil, ext)
		o.pub(204, put, "uiq/job/"+jsonField(t, r, "job_id")+"/release", "receipt="+jsonField(t, r, "receipt"), nil, nil)
	}
	o.pub(200, get, "uiq/deadletter/size", "", nil, nil).wantBody(t, `{"namespace":"oa","queue":"uiq","size":2}`)
	job0 := "/ui/job/default/oa/uiq/" + uiDead[0]
	wantLocation(uiDo(303, post, job0+"/respawn", withCSRF(url.Values{"back": {"job"}}), cookie), job0)
	wantLocation(uiDo(303, post, "/ui/job/default/oa/uiq/"+uiDead[1]+"/delete-dead", withCSRF(url.Values{}), cookie), uiq)
	wantLocation(uiDo(303, post, job0+"/delete", withCSRF(url.Values{}), cookie), uiq)
	o.pub(404, get, "uiq/job/"+uiDead[0], "", nil, nil)
	o.pub(200, get, "uiq/deadletter/size", "", nil, nil).wantBody(t, `{"namespace":"oa","queue":"uiq","size":0}`)
	wantLocation(uiDo(303, post, uiq+"/delete-all", withCSRF(url.Values{}), cookie), uiq)
	o.pub(201, put, "uiq", "", []byte("destroyed soon"), nil)
	wantLocation(uiDo(303, post, uiq+"/destroy", withCSRF(url.Values{"confirm": {"uiq"}}), cookie), uiq)
	o.pub(404, get, "uiq/peek", "", nil, nil)
	hooked := "/ui/queue/default/oa/uihook"
	wantLocation(uiDo(303, post, hooked+"/webhook", withCSRF(url.Values{"url": {recv.URL}, "secret": {"s3cret"}, "concurrency": {"1"}, "ttr_ms": {""}, "timeout_ms": {"5000"}}), cookie), hooked)
	o.adm(200, get, "/webhook/oa/uihook", "", nil)
	wantLocation(uiDo(303, post, hooked+"/unsubscribe", withCSRF(url.Values{}), cookie), hooked)
	o.adm(404, get, "/webhook/oa/uihook", "", nil)
	uiDo(404, post, uiq+"/explode", withCSRF(url.Values{}), cookie)
	uiDo(404, post, "/ui/job/default/oa/uiq/"+uiDead[0]+"/explode", withCSRF(url.Values{}), cookie)
	uiDo(400, post, "/ui/queue/default/oa/bad.q/pause", withCSRF(url.Values{}), cookie)
	uiDo(400, post, "/ui/job/default/bad.ns/uiq/"+uiDead[0]+"/delete", withCSRF(url.Values{}), cookie)
	uiDo(404, post, "/ui/queue/nopool/oa/uiq/pause", withCSRF(url.Values{}), cookie)
	// Schedule actions from the queue page's Schedules section.
	o.pub(200, put, "uisq/schedule/ui.nightly", "cron=0+3+*+*+*&tz=Asia/Tokyo", []byte("ui"), nil)
	uisq := "/ui/queue/default/oa/uisq"
	if b := uiDo(200, get, uisq, nil, nil).Body; !strings.Contains(string(b), `data-schedule="ui.nightly"`) {
		t.Errorf("queue page lacks the schedule ui.nightly")
	}
	uiSched := "/ui/schedule/default/oa/uisq/ui.nightly/"
	wantLocation(uiDo(303, post, uiSched+"pause", withCSRF(url.Values{}), cookie), uisq+"#schedules")
	if !strings.Contains(string(o.pub(200, get, "uisq/schedule/ui.nightly", "", nil, nil).Body), `"paused":true`) {
		t.Errorf("ui.nightly not paused by the dashboard")
	}
	wantLocation(uiDo(303, post, uiSched+"resume", withCSRF(url.Values{}), cookie), uisq+"#schedules")
	wantLocation(uiDo(303, post, uiSched+"delete", withCSRF(url.Values{}), cookie), uisq+"#schedules")
	o.pub(404, get, "uisq/schedule/ui.nightly", "", nil, nil)
	uiDo(404, post, uiSched+"explode", withCSRF(url.Values{}), cookie)
	uiDo(400, post, "/ui/schedule/default/oa/uisq/bad!name/pause", withCSRF(url.Values{}), cookie)
	uiDo(403, post, uiSched+"pause", url.Values{}, cookie)
	wantLocation(uiDo(303, post, uisq+"/schedule", withCSRF(url.Values{"name": {"ui.made"}, "cron": {"@hourly"}, "tz": {"Europe/Berlin"}, "missed": {"last"}, "body": {"from the page"}}), cookie), uisq+"#schedules")
	if !strings.Contains(string(o.pub(200, get, "uisq/schedule/ui.made", "", nil, nil).Body), `"cron":"@hourly","tz":"Europe/Berlin","missed":"last"`) {
		t.Errorf("ui.made not created by the dashboard as asked")
	}
	o.pub(204, del, "uisq/schedule/ui.made", "", nil, nil)

	// Tokens: create (post/redirect/get: shown once, on the next page),
	// revoke by fingerprint.
	createdAt := uiDo(303, post, "/ui/tokens/create?pool=default", withCSRF(url.Values{"namespace": {"oa"}, "description": {"ui-made"},
		"queues": {"uiq"}, "roles": {"publish", "consume"}, "read": {""}, "write": {""}, "interval": {"1"}}), cookie)
	wantLocation(createdAt, "/ui/tokens/created")
	oneShot := maps.Clone(cookie)
	for _, c := range (&http.Response{Header: createdAt.Header}).Cookies() {
		if c.Name == "kairos_new_token" {
			oneShot["Cookie"] += "; kairos_new_token=" + c.Value
		}
	}
	created := uiDo(200, get, "/ui/tokens/created", nil, oneShot)
	uiDo(404, get, "/ui/tokens/created", nil, cookie) // shown once
	_, uiToken, ok := strings.Cut(string(created.Body), `<pre class="token" id="new-token">`)
	uiToken, _, _ = strings.Cut(uiToken, "<")
	if !ok || uiToken == "" {
		t.Fatalf("POST /ui/tokens/create: no token shown:\n%s", created.Body)
	}
	o.do(201, put, k.API+"/api/oa/uiq", uiToken, []byte("with the dashboard's token"), nil)
	tokensOA := "/ui/tokens?namespace=oa&pool=default"
	wantLocation(uiDo(303, post, "/ui/tokens/create?pool=default", withCSRF(url.Values{"namespace": {"oa"}, "description": {""}}), cookie), tokensOA)
	uiDo(404, post, "/ui/tokens/create?pool=nope", withCSRF(url.Values{"namespace": {"oa"}, "description": {"x"}}), cookie)
	wantLocation(uiDo(303, post, "/ui/tokens/revoke?pool=default", withCSRF(url.Values{"namespace": {"oa"}, "fingerprint": {auth.Fingerprint(uiToken)}}), cookie), tokensOA)
	o.do(401, put, k.API+"/api/oa/uiq", uiToken, []byte("revoked"), nil)
	uiDo(404, post, "/ui/tokens/revoke?pool=nope", withCSRF(url.Values{"namespace": {"oa"}, "fingerprint": {auth.Fingerprint(uiToken)}}), cookie)

	// CSRF refusals: nothing is done.
	for name, tc := range map[string]struct {
		form url.Values
		hdr  map[string]string
	}{
		"no token":     {url.Values{}, cookie},
		"wrong token":  {url.Values{"_csrf": {strings.Repeat("A", 43)}}, cookie},
		"no cookie":    {url.Values{"_csrf": {csrf}}, nil},
		"other origin": {url.Values{"_csrf": {csrf}}, map[string]string{"Cookie": "kairos_csrf=" + csrf, "Origin": "http://evil.example"}},
		"cross-site":   {url.Values{"_csrf": {csrf}}, map[string]string{"Cookie": "kairos_csrf=" + csrf, "Sec-Fetch-Site": "cross-site"}},
	} {
		for _, p := range []string{"/ui/queue/default/oa/dash/pause", "/ui/job/default/oa/dash/" + dashID + "/delete",
			"/ui/tokens/create?pool=default", "/ui/tokens/revoke?pool=default"} {
			// The cross-site ones are the admin door's (JSON), the others
			// the double-submit check's (text).
			want := "forbidden: "
			if name == "other origin" || name == "cross-site" {
				want = `{"error":"cross-site request refused: `
			}
			if r := uiDo(403, post, p, tc.form, tc.hdr); !strings.HasPrefix(string(r.Body), want) {
				t.Fatalf("POST %s, %s: %v", p, name, r)
			}
		}
	}
	o.do(401, post, k.Admin+"/ui/queue/default/oa/dash/pause", "", []byte("_csrf="+csrf), cookie)
	o.do(401, post, k.Admin+"/ui/tokens/revoke", "", []byte("_csrf="+csrf), cookie)
	o.adm(200, get, "/queue/oa/dash/config", "", nil).wantBody(t, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`)
	o.adm(200, get, "/queue/oa/dash/job/"+dashID, "", nil)

	// Bad names on every route that takes a namespace: 400 before anything
	// else (the names are checked before the token and the basic auth is
	// given), except the dashboard's form POSTs, CSRF-checked first (403).
	specDoc, err := openapitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for template, item := range specDoc.Paths.Map() {
		if !strings.Contains(template, "{namespace}") {
			continue
		}
		path := strings.NewReplacer("{namespace}", "bad.ns", "{queue}", "q", "{job_id}", "01M00000000000000000000000",
			"{key}", "k", "{name}", "s", "{token}", o.token, "{pool}", "default", "{action}", "delete").Replace(template)
		for method, op := range item.Operations() {
			base := k.API
			if slices.Contains(op.Tags, openapitest.Admin) {
				base = k.Admin
			}
			want := 400
			if slices.Contains(op.Tags, "dashboard") && method == post {
				want = 403
			}
			o.do(want, method, base+path, o.token, nil, map[string]string{"Authorization": o.basic})
		}
	}

	// Every operation answered with a 2xx (with a 3xx when it declares no
	// 2xx: the dashboard's redirects), and every one that declares a 400
	// answered with a 4xx.
	seen := map[string]bool{}
	for _, s := range tr.Validator.Seen() {
		f := strings.Fields(s) // listener method template status
		op := strings.Join(f[:3], " ")
		seen[op+" "+f[3][:1]+"xx"] = true
	}
	var missing []string
	for template, item := range specDoc.Paths.Map() {
		for method, op := range item.Operations() {
			for _, tag := range op.Tags {
				if tag != openapitest.Public && tag != openapitest.Admin {
					continue // a grouping tag (dashboard), not a listener
				}
				key := fmt.Sprintf("%s %s %s", tag, method, template)
				success := "2xx"
				if !slices.ContainsFunc(slices.Collect(maps.Keys(op.Responses.Map())), func(c string) bool { return c[0] == '2' }) {
					success = "3xx"
				}
				if !seen[key+" "+success] {
					missing = append(missing, key+": no "+success+" answer exercised")
				}
				if op.Responses.Status(400) != nil && !seen[key+" 4xx"] {
					missing = append(missing, key+": no 4xx answer exercised")
				}
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("operations of doc/openapi.yaml that this test does not exercise (add calls above):\n  %s", strings.Join(missing, "\n  "))
	}
}
