package rdb

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

// scheduleKey is a schedule's hash (schedule.go): sc/{ns/q}/NAME.
func scheduleKey(ns, q, name string) string { return "sc/{" + ns + "/" + q + "}/" + name }

// scheduleNamesKey is the set of the queue's schedule names: sn/{ns/q}.
func scheduleNamesKey(ns, q string) string { return "sn/{" + ns + "/" + q + "}" }

// scheduleIndexKey is the per-pool sorted set of active schedules: member
// "ns/q/NAME", score = the schedule's next tick (ms). Like timer_index it
// is a hint kept beside the per-queue keys, never in their scripts: the
// schedule's hash is the truth.
const scheduleIndexKey = "schedule_index"

// scheduleMember is a schedule's member in the schedule index.
func scheduleMember(ns, q, name string) string { return ns + "/" + q + "/" + name }
