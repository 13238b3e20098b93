package rdb

import (
	"strconv"
	"strings"
)

// Keys of the Kairos extensions (see keys.go for the lmstfy-shaped ones).

// prioKey is the queue's ready set of jobs with a priority > 0: score =
// (255-priority)·2^40 + sequence, member = packed entry. Queues that never
// see a priority never have this key: p/{T}ns/q.
func prioKey(ns, q string) string { return "p/" + queueBase(ns, q) }

// configKey is the queue's settings hash: backoff (Lua form), backoff_text,
// dead_ttl (ms), paused ("1"), seq (the priority sequence): c/{T}ns/q.
func configKey(ns, q string) string { return "c/" + queueBase(ns, q) }

// uniqueKey maps an idempotency key to the job published with it; it lives
// as long as the job's TTL: u/{T}ns/q/KEY.
func uniqueKey(ns, q, key string) string { return "u/" + queueBase(ns, q) + "/" + key }

// scheduleKey is a schedule's hash (schedule.go): sc/{T}ns/q/NAME, in the
// queue's slot group, as fireScheduleScript touches it with the queue's
// keys.
func scheduleKey(ns, q, name string) string { return "sc/" + queueBase(ns, q) + "/" + name }

// scheduleNamesKey is the set of the queue's schedule names: sn/{T}ns/q.
func scheduleNamesKey(ns, q string) string { return "sn/" + queueBase(ns, q) }

// scheduleIndexKey is group g's schedule index si/{T}: a sorted set of the
// group's active schedules, member "ns/q/NAME", score = the schedule's
// next tick (ms). It shares the group's slot, so the scripts that change a
// schedule keep its entry in the same atomic step; the schedulers walk
// the groups' indexes as the pump walks the timer indexes.
func scheduleIndexKey(g int) string { return "si/{" + groupTags[g] + "}" }

// scheduleMember is a schedule's member in its group's schedule index.
func scheduleMember(ns, q, name string) string { return ns + "/" + q + "/" + name }

// History keys (history.go): one hash per block B of historyBlock minutes
// (B = Unix minute / historyBlock) with the counters of its minutes, for a
// queue (with the queue's group tag, in its slot beside its other keys), a
// namespace (tag {ns}: "}" then "/B", where a queue's key has "}ns/q/B")
// and the pool. They expire
// historyRetention after their block.

// queueHistoryKey is h/{T}ns/q/B: the queue's ready list's name with h for
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
