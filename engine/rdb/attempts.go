package rdb

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// A job's attempt history is a list at a/{T}ns/q/ID (the job key with
// 'a' for 'j', doc/keys.md), newest first, its last engine.MaxAttempts
// deliveries, with the job's TTL. Each entry is text:
//
//	outcome|delivery|start ms|end ms|worker|error
//
// outcome is a letter (f in flight, r released, n nacked, t TTR expired,
// w webhook failed); start is 0 when unknown, end 0 in flight; the error
// is last, so it may hold '|'. Consume opens an entry (hist_open in
// scripts.go), release and the pump close it (hist_close), and every
// script that deletes a job deletes its history.

var outcomes = map[byte]string{
	'f': engine.OutcomeInFlight,
	'r': engine.OutcomeReleased,
	'n': engine.OutcomeNacked,
	't': engine.OutcomeTTRExpired,
	'w': engine.OutcomeWebhookFailed,
}

// parseAttempt decodes one history entry.
func parseAttempt(s string) (engine.Attempt, bool) {
	f := strings.SplitN(s, "|", 6)
	if len(f) != 6 || len(f[0]) != 1 {
		return engine.Attempt{}, false
	}
	out, ok := outcomes[f[0][0]]
	if !ok {
		return engine.Attempt{}, false
	}
	deliv, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseInt(f[2], 10, 64)
	end, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return engine.Attempt{}, false
	}
	a := engine.Attempt{Delivery: deliv, Outcome: out, Worker: f[4], Error: f[5]}
	if start > 0 {
		a.Start = time.UnixMilli(start)
	}
	if end > 0 {
		a.End = time.UnixMilli(end)
	}
	return a, true
}

// currentDelivery is the in-flight delivery of a job whose consumer gave no
// worker name (a named one has its open entry in the history): peek job
// shows it from the header, its start read from the receipt (bytes 19-22,
// the start in ms mod 2^32: the latest such time before now).
func currentDelivery(j *engine.Job, value string, now time.Time) (engine.Attempt, bool) {
	if j.State != engine.StateInFlight || len(value) < 22 || j.Deliveries < 1 {
		return engine.Attempt{}, false
	}
	return engine.Attempt{Delivery: j.Deliveries, Outcome: engine.OutcomeInFlight,
		Start: time.UnixMilli(receiptStart(value, now.UnixMilli()))}, true
}

// receiptStart reads a delivery's start from the header's receipt bytes
// 19-22 (1-based), relative to t (ms): the latest time with those low 32
// bits before t plus a minute (the consume's clock, rounded up, or another
// server's, may be ahead of t).
func receiptStart(value string, t int64) int64 {
	low := int64(binary.LittleEndian.Uint32([]byte(value[18:22])))
	const m, slack = 1 << 32, 60000
	return t + slack - ((t+slack-low)%m+m)%m
}
