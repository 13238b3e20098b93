package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBodyCarriesTimes checks that a body is JSON of the asked size and
// gives back the publish and due times every latency figure is made of.
func TestBodyCarriesTimes(t *testing.T) {
	sent := time.Unix(1_795_000_000, 123_456_789)
	due := sent.Add(3 * time.Second)
	b := body(100, sent, due)
	if len(b) != 100 || b[0] != '"' || b[99] != '"' {
		t.Fatalf("body %q: want a 100-byte JSON string", b)
	}
	s, d := stamps(b)
	if s != sent.UnixNano() || d != due.UnixNano() {
		t.Fatalf("stamps = %d, %d; want %d, %d", s, d, sent.UnixNano(), due.UnixNano())
	}
	if _, d := stamps(body(100, sent, time.Time{})); d != 0 {
		t.Fatalf("due of a job due now = %d, want 0", d)
	}
}

// TestTableMedians checks that a cell is the median round with the min-max.
func TestTableMedians(t *testing.T) {
	dir := t.TempDir()
	lines := `{"peer":"asynq","version":"v0.26.0","scenario":"enqueue","round":1,"jobs":10,"seconds":1,"rate":9000,"cpu_us":{"client":20,"store":10}}
{"peer":"asynq","version":"v0.26.0","scenario":"enqueue","round":2,"jobs":10,"seconds":1,"rate":12000,"cpu_us":{"client":30,"store":10}}
{"peer":"asynq","version":"v0.26.0","scenario":"enqueue","round":3,"jobs":10,"seconds":1,"rate":10000,"cpu_us":{"client":25,"store":10}}
{"peer":"asynq","version":"v0.26.0","scenario":"bulk","round":1,"note":"no batch API"}
{"peer":"asynq","version":"v0.26.0","scenario":"delayed","round":1,"jobs":10,"seconds":1,"rate":10,"p50_ms":2500,"p99_ms":4900,"max_ms":5010,"min_ms":12}
`
	f := filepath.Join(dir, "asynq.jsonl")
	if err := os.WriteFile(f, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := table(&out, []string{f}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| enqueue, one job a call | **10.0k/s** (9.0–12.0k); CPU µs/job client 25 + store 10 = 35 |",
		"| enqueue, batches of 64 | — (no batch API) |",
		"p50 2.50 s, **p99 4.90 s** (4.90 s–4.90 s), max 5.01 s, earliest 12.0 ms",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestTreeCPUCountsThisProcess checks /proc parsing on this process: it
// spins until its own CPU time shows (ticks of 10 ms) or 10 s pass.
func TestTreeCPUCountsThisProcess(t *testing.T) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if treeCPU(os.Getpid()) > 0 {
			return
		}
	}
	t.Fatal("treeCPU of this busy process stayed 0 for 10 s")
}
