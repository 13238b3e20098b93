package bench

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
)

// TestScenariosOnCeiling runs every timed scenario briefly against the
// do-nothing server: the load generator itself must work and count.
func TestScenariosOnCeiling(t *testing.T) {
	srv := httptest.NewServer(&Ceiling{})
	t.Cleanup(srv.Close)
	cfg := Config{Addr: srv.URL, Concurrency: 4, Duration: 300 * time.Millisecond, Jobs: 200}
	for name, run := range map[string]func(context.Context, Config) (Result, error){
		"publish": Publish, "bulk": BulkPublish, "consume": ConsumeAck,
	} {
		r, err := run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Ops == 0 || r.Errors != 0 || r.PerSec <= 0 || r.P99MS < r.P50MS {
			t.Fatalf("%s: %+v", name, r)
		}
	}
}
