package rdb

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// TestPublishMetrics: coalesced publishes over several queues count every
// job once in the pool's series and once in its queue's.
func TestPublishMetrics(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := startEngineOpts(t, client, Options{Now: newTestClock().Now, Metrics: metrics})
	const queues, per = 5, 40
	var wg sync.WaitGroup
	for i := 0; i < queues*per; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Publish(context.Background(), &engine.PublishRequest{Namespace: "pm", Queue: fmt.Sprintf("q%d", i%queues),
				Body: []byte("x"), TTL: time.Hour, Tries: 1})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := counterValue(t, metrics.publish.WithLabelValues(e.pool)); got != queues*per {
		t.Errorf("publish_jobs = %v, want %d", got, queues*per)
	}
	for i := 0; i < queues; i++ {
		q := fmt.Sprintf("q%d", i)
		if got := counterValue(t, metrics.publishQueue.WithLabelValues(e.pool, "pm", q)); got != per {
			t.Errorf("publish_queue_jobs of %s = %v, want %d", q, got, per)
		}
	}
}

// counterValue reads a counter (as the server tests' counterValue).
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
