package rdb

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
