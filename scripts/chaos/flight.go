package main

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// The in-flight ledger of the limits scenario (limits.go): for every
// delivery a consumer saw, the span of time during which the job was
// certainly in flight on the server, and the count of such spans open at
// every instant, per queue and per group, against the queue's limits.
//
// What a consumer can prove about one delivery, with t0 the moment its
// consume request was sent and t1 the moment the answer came back:
//
//   - the job was taken inside the consume script, after t0 (the request
//     left then) and before t1 (the answer says so): in flight at t1;
//   - its slot frees when the server handles the ACK or the release (not
//     before the consumer sent it: the first attempt's send time, since a
//     retried ACK may be the second try of one the server already did), or
//     when the pump hands the job back after its TTR, which runs from the
//     take (after t0), so not before t0 + TTR;
//   - so the job was in flight during [t1, min(end sent, t0 + TTR)). A job
//     a consumer lets go (it never ACKs) or whose ACK came too late (409:
//     the pump already returned it) holds its slot until t0 + TTR at least.
//
// Each span is inside the job's true time in flight, so the spans open at
// an instant are never more than the jobs truly in flight then: a count
// above a limit is a violation the server made, never an artefact of the
// ledger (a span may start late or end early, never the reverse). What the
// ledger cannot see it does not count: a job taken by a consume whose answer
// never arrived (the server was SIGKILLed with the answer unsent, or the
// connection broke) is in flight on the server until its TTR, unseen; it
// can only hide a violation, never invent one. ttrMargin absorbs the
// server's rounding of the TTR's end to the millisecond.

// ttrMargin is taken off t0 + TTR: the engine stores a delivery's end in
// whole milliseconds, the consumer's clock has nanoseconds.
const ttrMargin = 5 * time.Millisecond

// flightSpan is one delivery's certain time in flight, [from, to).
type flightSpan struct {
	queue, group string
	from, to     time.Time
}

// flightLedger collects the spans; safe for concurrent use.
type flightLedger struct {
	mu    sync.Mutex
	spans []flightSpan
	// empty counts deliveries whose certain span is empty: the answer came
	// back after t0 + TTR (a long-poll that waited most of the TTR before
	// the take), so the ledger cannot say when the job was in flight.
	empty int
}

// deliveryEnd is the end of a delivery's certain span: the first send of
// its ACK or release (zero: never sent), or t0 + TTR − ttrMargin, whichever
// is first.
func deliveryEnd(t0 time.Time, ttr time.Duration, endSent time.Time) time.Time {
	byTTR := t0.Add(ttr - ttrMargin)
	if !endSent.IsZero() && endSent.Before(byTTR) {
		return endSent
	}
	return byTTR
}

// add records a delivery of a job of queue and group, certainly in flight
// during [from, to).
func (f *flightLedger) add(queue, group string, from, to time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !to.After(from) {
		f.empty++
		return
	}
	f.spans = append(f.spans, flightSpan{queue: queue, group: group, from: from, to: to})
}

// FlightScope is one queue's, or one group's of a queue, figures.
type FlightScope struct {
	Queue string `json:"queue"`
	// Group is "" for the queue as a whole, "(default)" for the default
	// group.
	Group string `json:"group,omitempty"`
	// Limit is the limit checked (0: none, counted only).
	Limit      int `json:"limit"`
	Deliveries int `json:"deliveries"`
	// Peak is the most spans open at one instant.
	Peak int `json:"peak"`
	// AtLimitS is how long the count was at the limit (seconds).
	AtLimitS float64 `json:"at_limit_s"`
	// Violations counts the times the count went above the limit, OverMs
	// how long it stayed above in all, FirstOver when it first did.
	Violations int       `json:"violations"`
	OverMs     float64   `json:"over_ms"`
	FirstOver  time.Time `json:"first_over,omitzero"`
}

// flightEvent is a span's start (+1) or end (-1).
type flightEvent struct {
	at    time.Time
	delta int
}

// flightCount sweeps spans (all of one scope) and counts them against
// limit (0: no limit): the peak, the time at the limit, the violations.
// Spans are half-open: one that ends at the instant another starts does
// not overlap it, and the count is judged once every event of an instant
// is applied.
func flightCount(spans []flightSpan, limit int) FlightScope {
	evs := make([]flightEvent, 0, 2*len(spans))
	for _, s := range spans {
		evs = append(evs, flightEvent{s.from, +1}, flightEvent{s.to, -1})
	}
	// Ends before starts at the same instant.
	slices.SortFunc(evs, func(a, b flightEvent) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	sc := FlightScope{Limit: limit, Deliveries: len(spans)}
	var at, over time.Duration
	cur := 0
	above := false // the count was above the limit during the last stretch
	for i, e := range evs {
		cur += e.delta
		if i+1 < len(evs) && evs[i+1].at.Equal(e.at) {
			continue // more events at this instant
		}
		sc.Peak = max(sc.Peak, cur)
		if limit <= 0 || i+1 == len(evs) {
			continue
		}
		d := evs[i+1].at.Sub(e.at)
		switch {
		case cur == limit:
			at += d
		case cur > limit:
			over += d
			if !above {
				sc.Violations++
				if sc.FirstOver.IsZero() {
					sc.FirstOver = e.at
				}
			}
		}
		above = cur > limit
	}
	sc.AtLimitS = at.Seconds()
	sc.OverMs = float64(over) / float64(time.Millisecond)
	return sc
}

// flightLimits are the limits a queue was given.
type flightLimits struct {
	MaxInFlight, GroupMaxInFlight int
}

// defaultGroupLabel names the default group in the report.
const defaultGroupLabel = "(default)"

// check counts the ledger against each queue's limits: one scope per
// queue, then one per group of each queue, sorted.
func (f *flightLedger) check(limits map[string]flightLimits) (scopes []FlightScope, empty int) {
	f.mu.Lock()
	spans := slices.Clone(f.spans)
	empty = f.empty
	f.mu.Unlock()
	byQueue := map[string][]flightSpan{}
	byGroup := map[[2]string][]flightSpan{}
	for _, s := range spans {
		byQueue[s.queue] = append(byQueue[s.queue], s)
		byGroup[[2]string{s.queue, s.group}] = append(byGroup[[2]string{s.queue, s.group}], s)
	}
	for q := range limits {
		if _, ok := byQueue[q]; !ok {
			byQueue[q] = nil
		}
	}
	for q, ss := range byQueue {
		sc := flightCount(ss, limits[q].MaxInFlight)
		sc.Queue = q
		scopes = append(scopes, sc)
	}
	for k, ss := range byGroup {
		sc := flightCount(ss, limits[k[0]].GroupMaxInFlight)
		sc.Queue, sc.Group = k[0], k[1]
		if sc.Group == "" {
			sc.Group = defaultGroupLabel
		}
		scopes = append(scopes, sc)
	}
	slices.SortFunc(scopes, func(a, b FlightScope) int {
		if c := cmp.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return cmp.Compare(a.Group, b.Group)
	})
	return scopes, empty
}
