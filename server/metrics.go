package server

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are lmstfy's HTTP metrics, with lmstfy's names and labels so
// that existing dashboards (Grafana 12748) keep working. The label api is
// the gin route template, e.g. /api/:namespace/:queue.
type metrics struct {
	latency   *prometheus.HistogramVec
	codes     *prometheus.CounterVec
	rateLimit *prometheus.CounterVec
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

	m := &metrics{}
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
