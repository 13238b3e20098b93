package main

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func TestNoisyBound(t *testing.T) {
	tests := []struct {
		base, want float64
	}{
		{2, 22},    // a tiny baseline: the floor decides
		{40, 60},   // both give 60
		{100, 150}, // a large baseline: the factor decides
	}
	for _, tc := range tests {
		if got := noisyBound(tc.base, 1.5, 20); got != tc.want {
			t.Errorf("noisyBound(%v) = %v, want %v", tc.base, got, tc.want)
		}
	}
}

// TestNoisyFigures checks that publishes are counted in the phase of their
// send time, delayed jobs in the phase of their due time, and that
// immediate, unacknowledged and undelivered jobs are left out of lateness.
func TestNoisyFigures(t *testing.T) {
	t0 := time.UnixMilli(100_000)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	phases := []noisyPhaseWindow{
		{name: "baseline", from: at(0), to: at(1000), mem: 1},
		{name: "flood", from: at(1000), to: at(2000), mem: 2},
	}
	w := newWorkload(workloadConfig{Queues: []string{"q"}}, nil)
	q := &quietTenant{w: w}
	q.samples = []pubSample{
		{at: at(10), latency: 2 * time.Millisecond, status: http.StatusCreated},
		{at: at(990), latency: 4 * time.Millisecond, status: http.StatusCreated},
		{at: at(1500), latency: 9 * time.Millisecond, status: http.StatusCreated},
		{at: at(1600), latency: 1 * time.Millisecond, status: http.StatusInsufficientStorage},
		{at: at(1700), status: 0},
		{at: at(2500), latency: time.Second, status: http.StatusCreated}, // after every phase
	}
	l := w.led
	// Delayed, sent in the baseline, due in the flood, 30 ms late.
	l.sent(1, at(500).UnixMilli(), at(1500).UnixMilli())
	l.published([]int64{1}, time.Millisecond)
	l.deliver(1, at(1530))
	// Delayed, due in the baseline, 7 ms late.
	l.sent(2, at(-200).UnixMilli(), at(800).UnixMilli())
	l.published([]int64{2}, time.Millisecond)
	l.deliver(2, at(807))
	// Immediate: not a delayed job.
	l.sent(3, at(100).UnixMilli(), at(100).UnixMilli())
	l.published([]int64{3}, time.Millisecond)
	l.deliver(3, at(900))
	// Delayed but never acknowledged, and acknowledged but not delivered.
	l.sent(4, at(0).UnixMilli(), at(1000).UnixMilli())
	l.deliver(4, at(1900))
	l.sent(5, at(0).UnixMilli(), at(1000).UnixMilli())
	l.published([]int64{5}, time.Millisecond)

	got := noisyFigures([]*quietTenant{q}, phases, noisyConfig{})
	if len(got) != 2 {
		t.Fatalf("%d phases, want 2", len(got))
	}
	b, f := got[0], got[1]
	if b.Publishes != 2 || b.Refused != 0 || b.PubP99Ms != 4 || b.Delayed != 1 || b.LateP99Ms != 7 || b.UsedMemory != 1 {
		t.Errorf("baseline = %+v", b)
	}
	if f.Publishes != 3 || f.Refused != 2 || f.RefusedBy["507"] != 1 || f.RefusedBy["err"] != 1 ||
		f.PubP99Ms != 9 || f.Delayed != 1 || f.LateP99Ms != 30 {
		t.Errorf("flood = %+v", f)
	}
}

func TestNoisyJudge(t *testing.T) {
	nc := defaultNoisyConfig()
	good := func() Noisy {
		return Noisy{
			BurstJobs: nc.Burst, BurstReadyMs: 900, Acknowledged: 5000, Delivered: 5000,
			Phases: []NoisyPhase{
				{Name: "baseline", Publishes: 4000, PubP99Ms: 10, Delayed: 2000, LateP99Ms: 40},
				{Name: "burst", Publishes: 600, PubP99Ms: 29, Delayed: 300, LateP99Ms: 60},
			},
		}
	}
	tests := []struct {
		name     string
		mod      func(*Noisy)
		wantPass bool
		wantText string
	}{
		{"within the bounds", func(*Noisy) {}, true, ""},
		{"publish p99 over", func(r *Noisy) { r.Phases[1].PubP99Ms = 31 }, false, "publish p99"},
		{"lateness p99 over", func(r *Noisy) { r.Phases[1].LateP99Ms = 61 }, false, "lateness p99"},
		{"too few samples to judge", func(r *Noisy) { r.Phases[1].Delayed, r.Phases[1].LateP99Ms = 10, 5000 }, true, ""},
		{"a quiet publish refused", func(r *Noisy) { r.Phases[1].Refused = 1 }, false, "refused"},
		{"lost", func(r *Noisy) { r.Lost = 1 }, false, "lost"},
		{"residual", func(r *Noisy) { r.Residual = 3 }, false, "left"},
		{"burst short", func(r *Noisy) { r.BurstJobs = 64 }, false, "burst"},
		{"burst never ready", func(r *Noisy) { r.BurstReadyMs = -1 }, false, "ready"},
		{"empty baseline", func(r *Noisy) { r.Phases[0].Publishes = 10 }, false, "baseline"},
		// The second baseline's larger p99 is the one the bound starts
		// from: 1.5 × 30 = 45 ms for the publishes.
		{"after raises the bound", func(r *Noisy) {
			r.Phases[1].PubP99Ms = 44
			r.Phases = append(r.Phases, NoisyPhase{Name: "after", Publishes: 4000, PubP99Ms: 30, Delayed: 2000, LateP99Ms: 40})
		}, true, ""},
		{"after with refusals", func(r *Noisy) {
			r.Phases = append(r.Phases, NoisyPhase{Name: "after", Publishes: 4000, Refused: 3, Delayed: 2000})
		}, false, "after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.mod(&r)
			r.judge(nc)
			if r.Pass != tc.wantPass || !strings.Contains(strings.Join(r.Failures, "; "), tc.wantText) {
				t.Errorf("pass = %v, failures %q; want pass %v mentioning %q", r.Pass, r.Failures, tc.wantPass, tc.wantText)
			}
		})
	}
	// The strict bound, reported apart: the burst's 29 ms publish p99 and
	// 60 ms lateness pass the rule (floor) but miss 1.5 × 10 and 1.5 × 40.
	r := good()
	r.judge(nc)
	if !r.Pass || r.Strict || len(r.StrictMisses) != 1 || !strings.Contains(r.StrictMisses[0], "burst publish 29.0 > 15.0") {
		t.Errorf("strict: pass %v strict %v misses %q; want a pass with one strict miss, the burst's publish p99", r.Pass, r.Strict, r.StrictMisses)
	}
	within := good()
	within.Phases[1].PubP99Ms = 15
	within.judge(nc)
	if !within.Strict || len(within.StrictMisses) != 0 {
		t.Errorf("strict with p99s at 1.5×: %v %q, want met", within.Strict, within.StrictMisses)
	}
	var out bytes.Buffer
	writeNoisy(&out, r)
	for _, want := range []string{"baseline", "burst", "30.0", "PASS", "strict bound (1.5 × the baseline, no floor; reported, not judged): missed: burst publish"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestNoisyFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantNoisy bool
		wantErr   bool
	}{
		{nil, true, false},
		{[]string{"-scenario", "noisy"}, true, false},
		{[]string{"-scenario", "server-kill"}, false, false},
		{[]string{"-scenario", "noisy", "-noisy-phase", "1s"}, false, true},
		{[]string{"-scenario", "noisy", "-noisy-factor", "0.5"}, false, true},
	} {
		o, err := parseFlags(tc.args, &bytes.Buffer{})
		if (err != nil) != tc.wantErr {
			t.Errorf("%v: err = %v, wantErr %v", tc.args, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if o.wantNoisy() != tc.wantNoisy {
			t.Errorf("%v: wantNoisy = %v", tc.args, o.wantNoisy())
		}
		if scs, _ := o.selected(); tc.args != nil && len(scs) != 0 && tc.wantNoisy {
			t.Errorf("%v: noisy selected %d ordinary scenarios", tc.args, len(scs))
		}
	}
}

// TestNoisyCPU: the CPU figures of a phase, from two samples, and the
// reading of this process's own CPU time from /proc.
func TestNoisyCPU(t *testing.T) {
	a := cpuSample{server: 1, pool: 2, admin: 3, harness: 4}
	b := cpuSample{server: 1.5, pool: 2.25, admin: 3, harness: 5}
	got := cpuRate(a, b, 2)
	if got == nil || *got != (NoisyCPU{Server: 250, Pool: 125, Admin: 0, Harness: 500}) {
		t.Errorf("cpuRate = %+v", got)
	}
	if cpuRate(a, cpuSample{}, 2) != nil || cpuRate(a, cpuSample{server: -1, pool: 1, admin: 1, harness: 1}, 2) != nil {
		t.Error("cpuRate without figures: want nil")
	}
	if c := procCPU(os.Getpid()); c < 0 {
		t.Errorf("procCPU(self) = %v", c)
	}
	if c := procCPU(0); c != -1 {
		t.Errorf("procCPU(0) = %v, want -1", c)
	}
}

func TestSlowCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"evalsha", "5b76de", "6", "q/{fh}noisy/burst", "p/{fh}noisy/burst"}, "EVALSHA q/{fh}noisy/burst"},
		{[]string{"evalsha", "5b76de", "0", "x"}, "EVALSHA"},
		{[]string{"ZRANGEBYSCORE", "t/{fh}noisy/burst", "1796698305460", "+inf"}, "ZRANGEBYSCORE t/{fh}noisy/burst"},
		{[]string{"info"}, "INFO"},
		{nil, ""},
	} {
		if got := slowCommand(tc.args); got != tc.want {
			t.Errorf("slowCommand(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
