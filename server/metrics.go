package server

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are lmstfy's HTTP metrics, with lmstfy's names and labels so
// that existing dashboards (Grafana 12748) keep working. The label api is
// the gin route template, e.g. /api/:namespace/:queue. Kairos adds
// served: the responses by which path answered them (served_by "loop", an
// event loop, or "http", net/http and gin), since lmstfy's families must
// keep lmstfy's labels.
type metrics struct {
	latency   *prometheus.HistogramVec
	codes     *prometheus.CounterVec
	rateLimit *prometheus.CounterVec
	served    *prometheus.CounterVec

	// routes caches the latency and code series of each label set, so
	// that a request does not hash its labels twice in the vectors. It
	// grows as the vectors do: namespaces are labelled only once
	// authenticated, and no series is ever deleted.
	mu     sync.RWMutex
	routes map[routeLabels]routeSeries
}

// routeLabels are the labels of a response's series.
type routeLabels struct {
	pool, namespace, api, method string
	code                         int
	servedBy                     string // servedByLoop or servedByHTTP
}

// Values of the served_by label and of the access log's served_by field.
const (
	servedByLoop = "loop" // an event loop (fastpath.go)
	servedByHTTP = "http" // net/http and gin
)

type routeSeries struct {
	latency prometheus.Observer // nil for codes ≥ 300, which have none
	code    prometheus.Counter
	served  prometheus.Counter
}

// route returns the series of l, creating them at their first use.
func (m *metrics) route(l routeLabels) routeSeries {
	m.mu.RLock()
	r, ok := m.routes[l]
	m.mu.RUnlock()
	if ok {
		return r
	}
	code := strconv.Itoa(l.code)
	r = routeSeries{
		code:   m.codes.WithLabelValues(l.pool, l.namespace, l.api, l.method, code),
		served: m.served.WithLabelValues(l.pool, l.api, l.method, code, l.servedBy),
	}
	if l.code < 300 {
		r.latency = m.latency.WithLabelValues(l.pool, l.namespace, l.api, l.method)
	}
	m.mu.Lock()
	m.routes[l] = r
	m.mu.Unlock()
	return r
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "infra",
		Subsystem: "lmstfy_http",
		Name:      "latency_milliseconds",
		Help:      "Latency of successful (status < 300) API responses, in milliseconds.",
		Buckets:   prometheus.ExponentialBuckets(15, 2.5, 9),
	}, []string{"pool", "namespace", "api", "method"})
	codes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "infra",
		Subsystem: "lmstfy_http",
		Name:      "http_codes",
		Help:      "API responses by status code.",
	}, []string{"pool", "namespace", "api", "method", "code"})
	rateLimit := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "infra",
		Subsystem: "lmstfy_http",
		Name:      "rate_limit",
		Help:      "Requests refused by a token's rate limit (action consume or produce).",
	}, []string{"pool", "namespace", "token", "action"})

	served := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kairos_http_responses",
		Help: "API responses by status code and by the path that answered (served_by loop: an event loop; http: net/http).",
	}, []string{"pool", "api", "method", "code", "served_by"})

	m := &metrics{routes: make(map[routeLabels]routeSeries)}
	var err error
	if m.latency, err = register(reg, latency); err != nil {
		return nil, err
	}
	if m.codes, err = register(reg, codes); err != nil {
		return nil, err
	}
	if m.rateLimit, err = register(reg, rateLimit); err != nil {
		return nil, err
	}
	if m.served, err = register(reg, served); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the identical collector already
// registered (so that two servers can share one registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("server: register metrics: %w", err)
}
