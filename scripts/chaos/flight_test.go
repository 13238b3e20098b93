package main

import (
	"testing"
	"time"
)

// TestFlightCount feeds the in-flight ledger spans with and without a
// violation: it must find exactly the ones there are, treat spans that
// touch as not overlapping, and count per queue and per group apart.
func TestFlightCount(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	span := func(group string, from, to int) flightSpan {
		return flightSpan{queue: "q", group: group, from: ms(from), to: ms(to)}
	}
	tests := []struct {
		name       string
		spans      []flightSpan
		limit      int
		peak, viol int
		overMs     float64
		atLimitS   float64
	}{
		{name: "at the limit, never above", limit: 2, peak: 2, atLimitS: 0.1,
			spans: []flightSpan{span("", 0, 100), span("", 0, 100), span("", 100, 200)}},
		{name: "a span that starts when another ends does not overlap it", limit: 1, peak: 1, atLimitS: 0.3,
			spans: []flightSpan{span("", 0, 100), span("", 100, 200), span("", 200, 300)}},
		{name: "one too many for 10 ms", limit: 2, peak: 3, viol: 1, overMs: 10, atLimitS: 0.09,
			spans: []flightSpan{span("", 0, 100), span("", 0, 100), span("", 50, 60)}},
		{name: "two separate violations", limit: 1, peak: 2, viol: 2, overMs: 20, atLimitS: 0.28,
			spans: []flightSpan{span("", 0, 300), span("", 50, 60), span("", 200, 210)}},
		{name: "one violation that grows is one", limit: 1, peak: 3, viol: 1, overMs: 40,
			spans: []flightSpan{span("", 0, 50), span("", 10, 50), span("", 20, 30)}, atLimitS: 0.01},
		{name: "no limit: counted only", limit: 0, peak: 3,
			spans: []flightSpan{span("", 0, 50), span("", 10, 50), span("", 20, 30)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := flightCount(tc.spans, tc.limit)
			if got.Peak != tc.peak || got.Violations != tc.viol || got.OverMs != tc.overMs ||
				got.Deliveries != len(tc.spans) || got.AtLimitS != tc.atLimitS {
				t.Errorf("got peak %d, violations %d, over %v ms, at limit %v s, deliveries %d; want %d, %d, %v, %v, %d",
					got.Peak, got.Violations, got.OverMs, got.AtLimitS, got.Deliveries, tc.peak, tc.viol, tc.overMs, tc.atLimitS, len(tc.spans))
			}
			if (tc.viol > 0) == got.FirstOver.IsZero() {
				t.Errorf("first over %v with %d violations", got.FirstOver, tc.viol)
			}
		})
	}

	// The ledger: a group limit broken while the queue's holds, spans
	// recorded from the consumers' times, an empty span counted apart.
	var f flightLedger
	f.add("fair", "g0", ms(0), ms(100))
	f.add("fair", "g0", ms(10), ms(90))
	f.add("fair", "g0", ms(20), ms(80)) // a third of g0: above group_max_in_flight 2
	f.add("fair", "", ms(0), ms(100))
	f.add("capped", "c0", ms(0), ms(100))
	f.add("capped", "c0", ms(0), ms(100))
	f.add("fair", "g1", ms(50), ms(50)) // empty
	scopes, empty := f.check(map[string]flightLimits{"fair": {MaxInFlight: 4, GroupMaxInFlight: 2}, "capped": {MaxInFlight: 1}})
	if empty != 1 {
		t.Errorf("empty spans %d, want 1", empty)
	}
	want := map[[2]string][3]int{ // peak, violations, limit
		{"capped", ""}: {2, 1, 1}, {"capped", "c0"}: {2, 0, 0},
		{"fair", ""}: {4, 0, 4}, {"fair", defaultGroupLabel}: {1, 0, 2}, {"fair", "g0"}: {3, 1, 2},
	}
	if len(scopes) != len(want) {
		t.Fatalf("scopes %+v, want %d", scopes, len(want))
	}
	for _, s := range scopes {
		w, ok := want[[2]string{s.Queue, s.Group}]
		if !ok || s.Peak != w[0] || s.Violations != w[1] || s.Limit != w[2] {
			t.Errorf("scope %s/%s: peak %d, violations %d, limit %d; want %v", s.Queue, s.Group, s.Peak, s.Violations, s.Limit, w)
		}
	}
}

// TestDeliveryEnd: a delivery is certainly in flight until its ACK or
// release is first sent, or until the TTR from the consume's send, less
// the margin, whichever is first.
func TestDeliveryEnd(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	ttr := time.Second
	if got, want := deliveryEnd(t0, ttr, time.Time{}), t0.Add(ttr-ttrMargin); !got.Equal(want) {
		t.Errorf("let go: %v, want %v", got, want)
	}
	if got, want := deliveryEnd(t0, ttr, t0.Add(300*time.Millisecond)), t0.Add(300*time.Millisecond); !got.Equal(want) {
		t.Errorf("ACKed in time: %v, want %v", got, want)
	}
	if got, want := deliveryEnd(t0, ttr, t0.Add(2*time.Second)), t0.Add(ttr-ttrMargin); !got.Equal(want) {
		t.Errorf("ACKed after the TTR: %v, want %v", got, want)
	}
}

// TestLimitsJudge: a clean report passes; a violation, a limit never
// reached, a count left after the drain or a lost job fails it.
func TestLimitsJudge(t *testing.T) {
	lc := limitsConfig{ServerKills: 2, RedisKills: 1}
	clean := func() Limits {
		return Limits{
			Queues:      []limitsQueue{{Name: "fair", MaxInFlight: 4, GroupMaxInFlight: 2}},
			ServerKills: 2, RedisKills: 1, ServerPeak: map[string]int{"fair": 4},
			Scopes: []FlightScope{{Queue: "fair", Limit: 4, Peak: 4}, {Queue: "fair", Group: "g0", Limit: 2, Peak: 2}},
		}
	}
	for _, tc := range []struct {
		name  string
		spoil func(*Limits)
		pass  bool
	}{
		{"clean", func(*Limits) {}, true},
		{"a group's violation", func(r *Limits) { r.Scopes[1].Violations, r.Scopes[1].Peak = 1, 3 }, false},
		{"the queue's limit never reached", func(r *Limits) { r.Scopes[0].Peak = 3 }, false},
		{"no group at its limit", func(r *Limits) { r.Scopes[1].Peak = 1 }, false},
		{"the server above the limit", func(r *Limits) { r.ServerPeak["fair"] = 5 }, false},
		{"the server's hash never seen", func(r *Limits) { r.ServerPeak = map[string]int{} }, false},
		{"a slot leaked", func(r *Limits) { r.ServerLeft = 1 }, false},
		{"the groups route counts one", func(r *Limits) { r.ReportedLeft = 1 }, false},
		{"no groups route (501)", func(r *Limits) { r.ReportedLeft = -1 }, true},
		{"a few deliveries unplaced", func(r *Limits) { r.Deliveries, r.EmptySpans = 100, 5 }, true},
		{"too many deliveries unplaced", func(r *Limits) { r.Deliveries, r.EmptySpans = 100, 6 }, false},
		{"a lost job", func(r *Limits) { r.Lost = 1 }, false},
		{"a fault not done", func(r *Limits) { r.RedisKills = 0 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := clean()
			tc.spoil(&r)
			r.judge(lc)
			if r.Pass != tc.pass {
				t.Errorf("pass %v, want %v; failures %q", r.Pass, tc.pass, r.Failures)
			}
		})
	}
}
