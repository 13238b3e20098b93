package rdb

import (
	"strconv"
	"strings"
)

// Keys of the Kairos extensions (see keys.go for the lmstfy-shaped ones).

// prioKey is the queue's ready set of jobs with a priority > 0: score =
// (255-priority)·2^40 + sequence, member = packed entry. Queues that never
// see a priority never have this key.
func prioKey(ns, q string) string { return "p/{" + ns + "/" + q + "}" }

// configKey is the queue's settings hash: backoff (Lua form), backoff_text,
// dead_ttl (ms), paused ("1"), seq (the priority sequence).
func configKey(ns, q string) string { return "c/{" + ns + "/" + q + "}" }

// uniqueKey maps an idempotency key to the job published with it; it lives
// as long as the job's TTL.
func uniqueKey(ns, q, key string) string { return "u/{" + ns + "/" + q + "}/" + key }

// History keys (history.go): one hash per block B of historyBlock minutes
// (B = Unix minute / historyBlock) with the counters of its minutes, for a
// queue (with the queue's hash tag, beside its other keys), a namespace
// (tag {ns}; a queue's tag always holds a "/") and the pool. They expire
// historyRetention after their block.

// queueHistoryKey is h/{ns/q}/B: the queue's ready list's name with h for
// q, so that it follows the queue's keys wherever their layout puts them.
func queueHistoryKey(ns, q string, block int64) string {
	return "h" + strings.TrimPrefix(readyKey(ns, q), "q") + "/" + strconv.FormatInt(block, 10)
}

// namespaceHistoryKey is h/{ns}/B.
func namespaceHistoryKey(ns string, block int64) string {
	return "h/{" + ns + "}/" + strconv.FormatInt(block, 10)
}

// poolHistoryKey is h/B.
func poolHistoryKey(block int64) string { return "h/" + strconv.FormatInt(block, 10) }
