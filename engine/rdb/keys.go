package rdb

import (
	"strings"
	"sync/atomic"
)

// Every Redis key and channel Kairos uses is built here (the Kairos
// extensions' ones in keys_ext.go, the layout before slot groups, read only
// by the upgrade, in upgrade.go). Scripts get every key in KEYS; the only
// names a script completes are job body keys, a prefix from KEYS plus an
// ID it read from a structure of the same queue.
//
// Slot groups. Every queue belongs to one of slotGroups groups (FNV-1a of
// "ns/q", slotGroup), and every key of the queue carries its group's hash
// tag {T} (groupTags), as do the group's timer index, queue registry and
// wake-up channel. So on Redis Cluster each group is one hash slot, and a
// script of a queue touches one slot: its keys, and the index and registry
// entries its scripts update. The pump walks the groups. Standalone and
// Sentinel pools use the same layout (doc/keys.md).

// slotGroups is the number of slot groups of a pool. It is part of the key
// layout: changing it moves every queue (doc/keys.md says why 64).
const slotGroups = 64

// groupTags are the groups' hash tags: two letters each, to keep keys
// short (a delayed job costs no more memory than in lmstfy's layout). The
// tag of group g hashes to a slot in [256g, 256g+256), so that the groups
// spread evenly over the masters of a cluster whose slots were assigned in
// equal ranges (redis-cli --cluster create): 64 groups over 3 masters are
// 21, 21 and 22. Each is the first of "aa", "ab", …, "zz" whose CRC16
// lands there; TestGroupTags checks it.
var groupTags = [slotGroups]string{
	"bh", "bd", "by", "bq", "aa", "ai", "ap", "ax",
	"ea", "ds", "dj", "db", "fh", "fd", "fy", "fq",
	"bi", "ba", "bx", "bp", "ad", "ah", "aq", "ay",
	"dz", "dr", "dk", "dc", "fi", "fa", "fx", "fp",
	"bj", "bb", "ca", "bs", "ac", "ak", "ar", "az",
	"dy", "dq", "dh", "dd", "fj", "fb", "ga", "fs",
	"bk", "bc", "bz", "br", "ab", "aj", "as", "nz",
	"dx", "dp", "di", "da", "fk", "fc", "fz", "fr",
}

// slotGroup is the slot group of queue ns/q: FNV-1a (32 bits) of "ns/q",
// modulo slotGroups. For shard i of a sharded queue q (physical name
// "q~i", shards.go) it is (slotGroup(ns, q) + bitReverse6(i)) % slotGroups.
func slotGroup(ns, q string) int {
	base, shard := splitShard(q)
	h := uint32(2166136261)
	for _, s := range [3]string{ns, "/", base} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * 16777619
		}
	}
	return int((h%slotGroups + uint32(bitReverse6(shard))) % slotGroups)
}

// queueTag is the hash tag of queue ns/q's keys: "{T}".
func queueTag(ns, q string) string { return "{" + groupTags[slotGroup(ns, q)] + "}" }

// queueMember is a queue's name in its group's timer index and registry:
// "ns/q", "ns/q~i" for shard i >= 1 of a sharded queue (shard 0 is q).
func queueMember(ns, q string) string { return ns + "/" + keyName(q) }

// timerIndexKey is group g's timer index ti/{T}: a sorted set of the
// group's queues with timer entries, member "ns/q", score = the earliest
// due time (ms) in that queue's timer.
func timerIndexKey(g int) string { return "ti/{" + groupTags[g] + "}" }

// registryKey is group g's queue registry m/{T}: a hash of the group's
// queues, field "ns/q" → 1 (what lmstfy kept in m/ns and m/ns/NS).
func registryKey(g int) string { return "m/{" + groupTags[g] + "}" }

// wakeChannel carries "a job of group g falls due at <ms>" wake-ups to
// the pumps of every server instance sharing the pool: w/{T}.
func wakeChannel(g int) string { return "w/{" + groupTags[g] + "}" }

// queueBase is "{T}ns/q", what follows the type letter and slash in the
// names of the queue's keys. No slash after the tag: a job key stays 60
// bytes with typical names (j/{T}order-service/cancel-unpaid/ID), inside
// the allocator's 64-byte class, as lmstfy's j/ns/q/ID
// (TestMemoryPerDelayedJob).
func queueBase(ns, q string) string {
	// One concatenation: one allocation (an ACK builds its timer key).
	return "{" + groupTags[slotGroup(ns, q)] + "}" + ns + "/" + keyName(q)
}

// jobKeyPrefix is the prefix of the queue's job body keys: j/{T}ns/q/.
func jobKeyPrefix(ns, q string) string { return "j/" + queueBase(ns, q) + "/" }

// groupKeyPrefix is the prefix of the queue's group keys: g/{T}ns/q/
// (issue #32; groups_scripts.go lists them). Scripts build it from the
// job key prefix (gpfx), as this does from the queue's base.
func groupKeyPrefix(ns, q string) string { return "g/" + queueBase(ns, q) + "/" }

// jobKey is a job's body key: j/{T}ns/q/ID (string, SET NX with PX ttl).
func jobKey(ns, q, id string) string { return jobKeyPrefix(ns, q) + id }

// readyKey is the ready list: q/{T}ns/q (LPUSH in, RPOP out).
func readyKey(ns, q string) string { return "q/" + queueBase(ns, q) }

// timerKey is the queue's timer: t/{T}ns/q, delayed and in-flight entries
// scored by due time in milliseconds.
func timerKey(ns, q string) string { return "t/" + queueBase(ns, q) }

// deadKey is the dead letter list: d/{T}ns/q.
func deadKey(ns, q string) string { return "d/" + queueBase(ns, q) }

// readyChannel is published to when jobs become ready in the queue; the
// payload is how many. Servers subscribe only while consumers wait on it.
// It carries the group's tag, so that on a cluster it is a sharded channel
// of the queue's slot: n/{T}ns/q.
func readyChannel(ns, q string) string { return "n/" + queueBase(ns, q) }

// queueNames are the names a queue's scripts use, built once per queue
// (Engine.names, keyed {ns, q, ""}) rather than concatenated for every
// call, and what the engine remembers of the queue, so that a publish
// looks a queue up once.
type queueNames struct {
	group int
	// shard is the shard of a physical shard name "q~i" (shards.go), whose
	// job IDs carry it (engine.NewShardJobID); -1 for a plain queue name.
	shard                                                        int
	member, ready, timer, prio, config, dead, channel, jobPrefix string
	// index, registry and wake are the group's timer index, queue
	// registry and wake-up channel; usage its usage hash (tenancy.go).
	index, registry, wake, usage string
	// argMember, argChannel and argWake are member, channel and wake as
	// script arguments, boxed once rather than at every call.
	argMember, argChannel, argWake interface{}

	// recorded: this engine has recorded the queue in its group's
	// registry. While it is false, a publish script records the queue in
	// the same round trip, and it is set once that succeeded; Destroy
	// clears it. Lost when the memo is emptied: the next publish records
	// the queue again, which is harmless.
	recorded atomic.Bool
	// publishes is the queue's publish counter (a prometheus.Counter), set
	// at its first publish (poolMetrics.publishedQueue), and acks its ACK
	// histogram (a prometheus.Observer), at its first ACK.
	publishes, acks atomic.Value
	// hist is the queue's history counters (history.go), set at its first
	// counted event.
	hist atomic.Pointer[histCounters]
	// shardPub and shardCon take a sharded queue's shards in turn: the
	// shard of its next publish, the shard its next consume starts with
	// (shards.go).
	shardPub, shardCon atomic.Uint32
}

func newQueueNames(ns, q string) *queueNames {
	g := slotGroup(ns, q)
	_, shard := splitShard(q)
	if !isShardName(q) {
		shard = -1
	}
	qn := &queueNames{
		group:     g,
		shard:     shard,
		member:    queueMember(ns, q),
		ready:     readyKey(ns, q),
		timer:     timerKey(ns, q),
		prio:      prioKey(ns, q),
		config:    configKey(ns, q),
		dead:      deadKey(ns, q),
		channel:   readyChannel(ns, q),
		jobPrefix: jobKeyPrefix(ns, q),
		index:     timerIndexKey(g),
		registry:  registryKey(g),
		wake:      wakeChannel(g),
		usage:     usageKey(g),
	}
	qn.argMember, qn.argChannel, qn.argWake = qn.member, qn.channel, qn.wake
	return qn
}

var tagGroups = func() map[string]int {
	m := make(map[string]int, slotGroups)
	for g, t := range groupTags {
		m[t] = g
	}
	return m
}()

// channelGroup returns the slot group of a channel built here (its tag),
// or 0.
func channelGroup(c string) int {
	i := strings.IndexByte(c, '{')
	if i < 0 {
		return 0
	}
	j := strings.IndexByte(c[i:], '}')
	if j < 0 {
		return 0
	}
	return tagGroups[c[i+1:i+j]]
}

// isWakeChannel reports whether c is a group's wake-up channel.
func isWakeChannel(c string) bool { return strings.HasPrefix(c, "w/{") }

// JobKey is the Redis key of job id of queue ns/q, for tools and tests
// that look at a pool's Redis directly (doc/keys.md).
func JobKey(ns, q, id string) string { return jobKey(ns, q, id) }

// ReadyKey is the Redis key of the ready list of queue ns/q.
func ReadyKey(ns, q string) string { return readyKey(ns, q) }

// TimerKey is the Redis key of the timer of queue ns/q.
func TimerKey(ns, q string) string { return timerKey(ns, q) }
