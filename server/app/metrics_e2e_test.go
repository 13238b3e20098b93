package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// These tests hold /metrics to what lmstfy exports, to what the Grafana
// dashboard (docker/grafana/dashboards/kairos.json) queries and to what
// doc/API.md documents, on a running server after traffic that makes every
// labelled series exist.

// lmstfyFamilies is every metric family lmstfy exports (bitleak/lmstfy:
// server/handlers/metrics.go, engine/redis/metrics.go and
// engine/redis/hooks/init.go), with its type and labels. lmstfy also
// registers infra_lmstfy_redis_consume_jobs, but has not counted it since
// 2020 (its Consume became ConsumeMulti), so a family without series never
// appears in its /metrics; Kairos does not export it either.
var lmstfyFamilies = map[string]struct {
	typ    dto.MetricType
	labels []string
}{
	"infra_lmstfy_http_latency_milliseconds":     {dto.MetricType_HISTOGRAM, []string{"pool", "namespace", "api", "method"}},
	"infra_lmstfy_http_http_codes":               {dto.MetricType_COUNTER, []string{"pool", "namespace", "api", "method", "code"}},
	"infra_lmstfy_http_rate_limit":               {dto.MetricType_COUNTER, []string{"pool", "namespace", "token", "action"}},
	"infra_lmstfy_redis_publish_jobs":            {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_consume_multi_jobs":      {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_pool_add_jobs":           {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_pool_get_jobs":           {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_pool_delete_jobs":        {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_timer_add_jobs":          {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_timer_due_jobs":          {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_timer_full_batches":      {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_queue_direct_push_jobs":  {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_queue_pop_jobs":          {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_deadletter_respawn_jobs": {dto.MetricType_COUNTER, []string{"pool"}},
	"infra_lmstfy_redis_publish_queue_jobs":      {dto.MetricType_COUNTER, []string{"pool", "namespace", "queue"}},
	"infra_lmstfy_redis_consume_queue_jobs":      {dto.MetricType_COUNTER, []string{"pool", "namespace", "queue"}},
	"infra_lmstfy_redis_job_elapsed_ms":          {dto.MetricType_HISTOGRAM, []string{"pool", "namespace", "queue"}},
	"infra_lmstfy_redis_job_ack_elapsed_ms":      {dto.MetricType_HISTOGRAM, []string{"pool", "namespace", "queue"}},
	"infra_lmstfy_redis_timer_sizes":             {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_queue_sizes":             {dto.MetricType_GAUGE, []string{"pool", "namespace", "queue"}},
	"infra_lmstfy_redis_deadletter_sizes":        {dto.MetricType_GAUGE, []string{"pool", "namespace", "queue"}},
	"infra_lmstfy_redis_max_mem_bytes":           {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_used_mem_bytes":          {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_connections":             {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_blocking_connections":    {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_total_keys":              {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_total_ttl_keys":          {dto.MetricType_GAUGE, []string{"pool"}},
	"infra_lmstfy_redis_latency":                 {dto.MetricType_HISTOGRAM, []string{"node", "command", "status"}},
	"infra_lmstfy_redis_qps":                     {dto.MetricType_COUNTER, []string{"node", "command", "status"}},
}

// TestE2EMetrics runs a server on a real Redis, drives every kind of
// traffic a metric counts (publish, delayed publish, consume, ACK, peek, a
// dead letter and its respawn, a refused rate limit, a webhook delivery),
// scrapes the admin /metrics and checks it against lmstfy's families, the
// dashboard's queries and doc/API.md.
func TestE2EMetrics(t *testing.T) {
	e := startE2E(t)
	metricsTraffic(t, e)
	fams := scrapeMetrics(t, e)

	t.Run("lmstfy families", func(t *testing.T) {
		for name, want := range lmstfyFamilies {
			f := fams[name]
			if f == nil {
				t.Errorf("%s: not served", name)
				continue
			}
			if f.GetType() != want.typ {
				t.Errorf("%s: type %v, want %v", name, f.GetType(), want.typ)
			}
			if got := familyLabels(f); !slices.Equal(got, sorted(want.labels)) {
				t.Errorf("%s: labels %v, want %v", name, got, sorted(want.labels))
			}
		}
	})

	// No Redis command failed during that traffic, so none may count as
	// one (go-redis's connection handshake once did, on Redis < 7.2).
	t.Run("redis errors", func(t *testing.T) {
		for _, m := range fams["infra_lmstfy_redis_qps"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() != "ok" {
					t.Errorf("infra_lmstfy_redis_qps %v = %v", m.GetLabel(), m.GetCounter().GetValue())
				}
			}
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		exprs := dashboardExprs(t, "../../docker/grafana/dashboards/kairos.json")
		if len(exprs) < 20 {
			t.Fatalf("%d queries in the dashboard: the parse missed some", len(exprs))
		}
		seen := map[string]bool{}
		for _, expr := range exprs {
			sels := promSelectors(expr)
			if len(sels) == 0 {
				t.Errorf("no metric in %q", expr)
			}
			for _, s := range sels {
				seen[s.name] = true
				f := servedFamily(fams, s.name)
				if f == nil {
					t.Errorf("%s (in %q): not served", s.name, expr)
					continue
				}
				have := familyLabels(f)
				for _, l := range s.labels {
					if l != "job" && l != "instance" && !slices.Contains(have, l) { // job and instance: Prometheus's
						t.Errorf("%s (in %q): no label %s (has %v)", s.name, expr, l, have)
					}
				}
			}
		}
		t.Logf("the dashboard queries %d metric names", len(seen))
	})

	// The "dead" queue holds one ready job, respawned from the dead
	// letter at least 1 s after its publish (its TTR); "work" holds only a
	// delayed one.
	t.Run("oldest ready", func(t *testing.T) {
		ages := map[string]float64{}
		for _, m := range fams["kairos_queue_oldest_ready_seconds"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					ages[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		if a, ok := ages["dead"]; !ok || a < 1 || a > 120 {
			t.Errorf("kairos_queue_oldest_ready_seconds of dead = %v (served: %v), want 1..120 s", a, ok)
		}
		if a, ok := ages["work"]; !ok || a != 0 {
			t.Errorf("kairos_queue_oldest_ready_seconds of work = %v (served: %v), want 0: no job is ready", a, ok)
		}
	})

	t.Run("alert rules", func(t *testing.T) {
		b, err := os.ReadFile("../../docker/prometheus-alerts.yml")
		if err != nil {
			t.Fatal(err)
		}
		var rules struct {
			Groups []struct {
				Rules []struct {
					Alert string `yaml:"alert"`
					Expr  string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &rules); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				n++
				sels := promSelectors(r.Expr)
				if len(sels) == 0 {
					t.Errorf("%s: no metric in %q", r.Alert, r.Expr)
				}
				for _, s := range sels {
					f := servedFamily(fams, s.name)
					if f == nil {
						t.Errorf("%s: %s not served", r.Alert, s.name)
						continue
					}
					have := familyLabels(f)
					for _, l := range s.labels {
						if !slices.Contains(have, l) {
							t.Errorf("%s: %s has no label %s (has %v)", r.Alert, s.name, l, have)
						}
					}
				}
			}
		}
		if n == 0 {
			t.Error("no alert rule")
		}
	})

	t.Run("doc/API.md", func(t *testing.T) {
		documented := docFamilies(t, "../../doc/API.md")
		for _, d := range documented {
			if prefix, ok := strings.CutSuffix(d.name, "*"); ok {
				n := 0
				for name := range fams {
					if strings.HasPrefix(name, prefix) {
						n++
					}
				}
				if n == 0 {
					t.Errorf("%s documented, none served", d.name)
				}
				continue
			}
			f := fams[d.name]
			if f == nil {
				t.Errorf("%s documented, not served", d.name)
				continue
			}
			if typ := strings.ToLower(f.GetType().String()); d.typ != typ {
				t.Errorf("%s documented as %s, served as %s", d.name, d.typ, typ)
			}
			if got := familyLabels(f); !slices.Equal(got, d.labels) {
				t.Errorf("%s documented with labels %v, served with %v", d.name, d.labels, got)
			}
		}
		for name := range fams {
			if !slices.ContainsFunc(documented, func(d docFamily) bool {
				p, wild := strings.CutSuffix(d.name, "*")
				return d.name == name || wild && strings.HasPrefix(name, p)
			}) {
				t.Errorf("%s served, not documented in doc/API.md's Metrics section", name)
			}
		}
	})
}

// metricsTraffic makes every labelled series of /metrics exist.
func metricsTraffic(t *testing.T, e *e2e) {
	t.Helper()
	// A namespace with a quota of one job (and a bytes quota): its second
	// publish is refused. First, before any scrape reads the usage.
	capped := e.newToken(t, "capped")
	e.admin(t, http.MethodPut, "/quota/capped", `{"max_jobs":1,"max_bytes":1000000}`).wantStatus(t, http.StatusOK)
	doHTTP(t, http.MethodPut, e.API+"/api/capped/q", capped, []byte("1"), nil).wantStatus(t, http.StatusCreated)
	doHTTP(t, http.MethodPut, e.API+"/api/capped/q", capped, []byte("2"), nil).wantStatus(t, http.StatusTooManyRequests)

	// A queue with a max_in_flight (issue #32): its in flight and limit.
	e.admin(t, http.MethodPut, "/queue/"+e.NS+"/limited-q/config", `{"max_in_flight":2}`).wantStatus(t, http.StatusOK)
	e.publish(t, "limited-q", "", "l")
	e.consume(t, "limited-q", "ttr=600")

	e.publish(t, "work", "", "a")
	delayed := e.publish(t, "work", "delay=60", "later")
	j := e.consume(t, "work", "ttr=30")
	e.ack(t, "work", j.JobID)
	e.do(t, http.MethodGet, "work/job/"+delayed, "", nil, nil).wantStatus(t, http.StatusOK)

	// One try, a TTR of 1 s: the pump moves the job to the dead letter.
	e.publish(t, "dead", "tries=1", "d")
	e.consume(t, "dead", "ttr=1")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(e.do(t, http.MethodGet, "dead/deadletter", "", nil, nil).Body), `"deadletter_size":1`) {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter 10 s after a TTR of 1 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	want(t, e.do(t, http.MethodPut, "dead/deadletter", "limit=1&ttl=60", nil, nil), http.StatusOK, `{"count":1,"msg":"respawned"}`)

	// A token allowed one publish a minute: the second is refused.
	limited := e.newToken(t, e.NS)
	e.admin(t, http.MethodPost, "/token/"+e.NS+"/"+limited+"/limit", `{"read":0,"write":1,"interval":60}`).wantStatus(t, http.StatusCreated)
	u := e.url("limited", "")
	doHTTP(t, http.MethodPut, u, limited, []byte("1"), nil).wantStatus(t, http.StatusCreated)
	doHTTP(t, http.MethodPut, u, limited, []byte("2"), nil).wantStatus(t, http.StatusTooManyRequests)

	// A webhook delivery.
	rcv := newReceiver(t, "s3cret", 0)
	e.admin(t, http.MethodPut, "/webhook/e2e/hook", `{"url":"`+rcv.URL+`","secret":"s3cret"}`).wantStatus(t, http.StatusOK)
	e.publish(t, "hook", "", "push")
	rcv.waitAttempts(t, 1)
	for e.metricValue(t, "kairos_webhook_deliveries_total", `queue="hook"`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("webhook delivery not counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrapeMetrics parses the admin /metrics.
func scrapeMetrics(t *testing.T, e *e2e) map[string]*dto.MetricFamily {
	t.Helper()
	r := e.admin(t, http.MethodGet, "/metrics", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", r.Status, r.Body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// familyLabels returns the sorted label names of f's series.
func familyLabels(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	var out []string
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// servedFamily returns the family of a metric name as PromQL spells it:
// histogram series carry _bucket, _sum and _count suffixes.
func servedFamily(fams map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if f := fams[name]; f != nil {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f := fams[base]; f != nil && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY && suffix != "_bucket") {
				return f
			}
		}
	}
	return nil
}

// dashboardExprs returns the PromQL of every panel target (rows' nested
// panels included) and of every template variable.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Type    string  `json:"type"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Query struct {
					Query string `json:"query"`
				} `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		out = append(out, v.Query.Query)
	}
	return out
}

// promSelector is a metric name in a query, with its matchers' labels.
type promSelector struct {
	name   string
	labels []string
}

var (
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promLabelArg = regexp.MustCompile(`\blabel_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)
	promToken    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})|[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	promKeywords = map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}
)

// promSelectors returns the metric names of a PromQL query (or of a
// Grafana label_values(metric, label) variable query): identifiers that
// are neither functions, aggregations nor keywords, after ranges and
// groupings are removed.
func promSelectors(expr string) []promSelector {
	expr = promLabelArg.ReplaceAllString(expr, "$1$2")
	expr = promGrouping.ReplaceAllString(promRange.ReplaceAllString(expr, ""), "")
	var out []promSelector
	for _, m := range promToken.FindAllStringSubmatch(expr, -1) {
		tok := m[0]
		if m[2] != "" { // name{matchers} or {matchers}
			if m[1] == "" {
				continue
			}
			s := promSelector{name: m[1]}
			for _, mm := range promMatcher.FindAllStringSubmatch(m[2], -1) {
				s.labels = append(s.labels, mm[1])
			}
			out = append(out, s)
			continue
		}
		if strings.HasSuffix(tok, "(") || promKeywords[strings.ToLower(strings.TrimSpace(tok))] {
			continue // a function or an aggregation
		}
		out = append(out, promSelector{name: strings.TrimSpace(tok)})
	}
	return out
}

// docFamily is one row of doc/API.md's metric tables.
type docFamily struct {
	name, typ string
	labels    []string
}

// docFamilies returns the rows "| `name` | type | labels | meaning |" of
// doc/API.md's Metrics section; labels are comma-separated, "—" for none.
func docFamilies(t *testing.T, path string) []docFamily {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatalf("%s: no Metrics section", path)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var out []docFamily
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("%s: metric row with %d cells: %q", path, len(cells)-2, line)
		}
		d := docFamily{name: strings.Trim(strings.TrimSpace(cells[1]), "`"), typ: strings.TrimSpace(cells[2])}
		if l := strings.TrimSpace(cells[3]); l != "—" && l != "" {
			for _, name := range strings.Split(l, ",") {
				d.labels = append(d.labels, strings.Trim(strings.TrimSpace(name), "`"))
			}
		}
		sort.Strings(d.labels)
		out = append(out, d)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no metric rows in the Metrics section", path)
	}
	return out
}

// TestPromSelectors checks the test's PromQL reading on the shapes the
// dashboard uses.
func TestPromSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string
	}{
		{`sum by (pool) (rate(a_total{pool=~"$pool"}[$__rate_interval]))`, "[{a_total [pool]}]"},
		{`histogram_quantile(0.99, sum by (le, api) (rate(h_bucket{pool=~"$pool", code=~"5.."}[5m])))`, "[{h_bucket [pool code]}]"},
		{`topk(10, g{namespace=~"$namespace"}) > 0 or up`, "[{g [namespace]} {up []}]"},
		{`label_values(x_jobs{pool=~"$pool"}, namespace)`, "[{x_jobs [pool]}]"},
		{`process_resident_memory_bytes`, "[{process_resident_memory_bytes []}]"},
	} {
		if got := fmt.Sprint(promSelectors(tc.expr)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.expr, got, tc.want)
		}
	}
}
