package rdb

import "sync/atomic"

// Every Redis key and channel Kairos uses is built here. Keys of one queue
// share the hash tag {ns/q}, so that on Redis Cluster every per-queue script
// touches one slot (doc/keys.md).

const (
	// timerIndexKey is the per-pool sorted set of queues with timer entries:
	// member "ns/q", score = the earliest due time (ms) in that queue's timer.
	timerIndexKey = "timer_index"
	// timerChannel carries "a job falls due at <ms>" wake-ups to the pumps of
	// every server instance sharing the pool.
	timerChannel = "kairos/timer"
	// metaNamespacesKey is lmstfy's hash of known namespaces (ns → 1).
	metaNamespacesKey = "m/ns"
)

// queueMember is a queue's name in the timer index and in key tags.
func queueMember(ns, q string) string { return ns + "/" + q }

// jobKeyPrefix is the prefix of the queue's job body keys: j/{ns/q}/.
func jobKeyPrefix(ns, q string) string { return "j/{" + ns + "/" + q + "}/" }

// jobKey is a job's body key: j/{ns/q}/ID (string, SET NX with PX ttl).
func jobKey(ns, q, id string) string { return jobKeyPrefix(ns, q) + id }

// readyKey is the ready list: q/{ns/q} (LPUSH in, RPOP out).
func readyKey(ns, q string) string { return "q/{" + ns + "/" + q + "}" }

// timerKey is the queue's timer: t/{ns/q}, delayed and in-flight entries
// scored by due time in milliseconds.
func timerKey(ns, q string) string { return "t/{" + ns + "/" + q + "}" }

// deadKey is the dead letter list: d/{ns/q}.
func deadKey(ns, q string) string { return "d/{" + ns + "/" + q + "}" }

// readyChannel is published to when jobs become ready in the queue; the
// payload is how many. Servers subscribe only while consumers wait on it.
func readyChannel(ns, q string) string { return "n/" + ns + "/" + q }

// metaQueuesKey is lmstfy's hash of a namespace's queues (q → 1).
func metaQueuesKey(ns string) string { return "m/ns/" + ns }

// queueNames are the names a queue's hot-path scripts use, built once per
// queue (Engine.names, keyed {ns, q, ""}) rather than concatenated for
// every call, and what the engine remembers of the queue, so that a
// publish looks a queue up once.
type queueNames struct {
	member, ready, timer, prio, config, channel, jobPrefix, metaQueues string

	// recorded: this engine has recorded the queue in lmstfy's registries
	// (m/ns, m/ns/NS). While it is false, a publish script records the
	// queue in the same round trip, and it is set once that succeeded;
	// Destroy clears it. Lost when the memo is emptied: the next publish
	// records the queue again, which is harmless.
	recorded atomic.Bool
	// publishes is the queue's publish counter (a prometheus.Counter), set
	// at its first publish (poolMetrics.publishedQueue), and acks its ACK
	// histogram (a prometheus.Observer), at its first ACK.
	publishes, acks atomic.Value
	// hist is the queue's history counters (history.go), set at its first
	// counted event.
	hist atomic.Pointer[histCounters]
}

func newQueueNames(ns, q string) *queueNames {
	return &queueNames{
		member:     queueMember(ns, q),
		ready:      readyKey(ns, q),
		timer:      timerKey(ns, q),
		prio:       prioKey(ns, q),
		config:     configKey(ns, q),
		channel:    readyChannel(ns, q),
		jobPrefix:  jobKeyPrefix(ns, q),
		metaQueues: metaQueuesKey(ns),
	}
}
