package server

import (
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
)

// TestReadinessWhileDraining: a closing server turns not-ready at once and
// keeps serving for Kairos.DrainDelaySecond before its listeners close.
func TestReadinessWhileDraining(t *testing.T) {
	env, _, addr := serveLoops(t, withConfig(func(c *config.Config) { c.Kairos.DrainDelaySecond = 1 }))
	if r := liveDo(t, "GET", "http://"+addr+"/readyz", nil, nil); r.status != 200 {
		t.Fatalf("/readyz before Close: %d %s", r.status, r.body)
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() { _ = env.srv.Close(); close(closed) }()
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		r := liveDo(t, "GET", "http://"+addr+"/readyz", nil, nil)
		if r.status == 503 {
			if r.body != `{"ready":false,"checks":{"server":"shutting down"}}` {
				t.Errorf("draining /readyz: %s", r.body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after Close began", r.status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still serving while draining: the API answers (the fake engine has
	// no job), and healthz too.
	if r := liveDo(t, "GET", "http://"+addr+"/healthz", nil, nil); r.status != 200 {
		t.Errorf("/healthz while draining: %d", r.status)
	}
	<-closed
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("Close returned after %v, before the 1 s drain delay", d)
	}
}
