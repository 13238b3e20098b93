package client_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// TestWorkerServedByLoops: the Worker's consumes (with receipts,
// X-Kairos-Extensions) and its ACKs (with ?receipt=) and the client's
// publishes are served by the server's event loops, not net/http (issue
// #34: they all went to net/http, at 2.7 times the server's CPU per job).
func TestWorkerServedByLoops(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loops run on Linux only")
	}
	e := newEnv(t)
	const n = 50
	for i := range n {
		publish(t, e.C, "q", "job"+string(rune('a'+i%26)))
	}
	var handled atomic.Int64
	startWorker(t, e.C, client.WorkerConfig{Queues: []string{"q"}, Concurrency: 4, PollTimeout: time.Second},
		func(context.Context, *client.Job) error { handled.Add(1); return nil })
	eventually(t, 20*time.Second, "every job handled and ACKed", func() bool {
		return handled.Load() == n && metric(t, e, `api="/api/:namespace/:queue/job/:job_id",code="204",method="DELETE"`, "loop") == n
	})
	for _, c := range []struct{ labels, by string }{
		{`api="/api/:namespace/:queue",code="201",method="PUT"`, "http"},
		{`api="/api/:namespace/:queue",code="200",method="GET"`, "http"},
		{`api="/api/:namespace/:queue/job/:job_id",code="204",method="DELETE"`, "http"},
	} {
		if got := metric(t, e, c.labels, c.by); got != 0 {
			t.Errorf("%s served by %s: %d, want 0", c.labels, c.by, got)
		}
	}
	if got := metric(t, e, `api="/api/:namespace/:queue",code="200",method="GET"`, "loop"); got < n {
		t.Errorf("consumes served by the loops: %d, want at least %d", got, n)
	}
	if st := metric(t, e, `api="/api/:namespace/:queue",code="201",method="PUT"`, "loop"); st != n {
		t.Errorf("publishes served by the loops: %d, want %d", st, n)
	}
}

// metric reads kairos_http_responses for labels (a prefix of the label
// set, in the exposition's order) and served_by from the admin /metrics.
func metric(t *testing.T, e *env, labels, by string) int {
	t.Helper()
	resp, err := http.Get(e.Srv.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "kairos_http_responses{"+labels) && strings.Contains(l, `served_by="`+by+`"`) {
			if i := strings.LastIndexByte(l, ' '); i > 0 {
				v, err := strconv.ParseFloat(l[i+1:], 64)
				if err != nil {
					t.Fatalf("metric line %q: %v", l, err)
				}
				total += int(v)
			}
		}
	}
	return total
}
