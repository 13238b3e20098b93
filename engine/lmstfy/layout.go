// Package lmstfy knows lmstfy's Redis layout (github.com/bitleak/lmstfy,
// engine/redis, v1.0.x): it tells whether a pool holds lmstfy's jobs
// (Detect), so that a Kairos server started on an lmstfy Redis refuses to
// serve it instead of hiding those jobs (issue #30), and it moves them into
// Kairos's layout when asked (Importer).
//
// lmstfy's layout, per pool (one Redis, standalone or Sentinel):
//
//	j/NS/Q/ID   string  the job's payload: the body (26-character v0 ID) or
//	                    JSON {"body":"<base64>","attributes":{…}} (v1 ID);
//	                    its TTL is the job's; PERSISTed in the dead letter
//	q/NS/Q      list    ready jobs, packed tries:u16 len:u16 id; LPUSH in,
//	                    RPOP out
//	d/NS/Q      list    dead letter, the same entries (tries 1)
//	timer_set   zset    every delayed and every consumed-not-ACKed job of
//	                    the pool: score = due time in Unix seconds, member =
//	                    len:u16 NS len:u16 Q tries:u16 len:u16 ID; at its due
//	                    time an entry goes to q/NS/Q, or, with tries 0, to
//	                    d/NS/Q; an ACK only deletes j/NS/Q/ID
//	m/ns        hash    registry: NS → 1
//	m/ns/NS     hash    registry: Q → 1
//
// Tokens (tk/POOL/NS) and rate limits (__throttler_keys__) live in the admin
// Redis in the layout Kairos reads itself (doc/keys.md): they need no
// import.
package lmstfy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Key names of lmstfy's layout.
const (
	timerSet   = "timer_set"
	namespaces = "m/ns"
)

func queuesKey(ns string) string     { return "m/ns/" + ns }
func readyKey(ns, q string) string   { return "q/" + ns + "/" + q }
func deadKey(ns, q string) string    { return "d/" + ns + "/" + q }
func jobPrefix(ns, q string) string  { return "j/" + ns + "/" + q + "/" }
func jobKey(ns, q, id string) string { return jobPrefix(ns, q) + id }
func queueName(ns, q string) string  { return ns + "/" + q }
func validPart(s string) bool        { return s != "" && !strings.ContainsAny(s, "/{}") }
func splitQueue(s string) (ns, q string, ok bool) {
	ns, q, ok = strings.Cut(s, "/")
	return ns, q, ok && validPart(ns) && validPart(q)
}

// listPattern matches lmstfy's ready lists and dead letters, q/NS/Q and
// d/NS/Q, and none of Kairos's keys (whose names have a hash tag right
// after the type letter: q/{T}ns/q).
const listPattern = "[qd]/[^{]*"

// Found is what Detect saw of lmstfy's layout in a pool.
type Found struct {
	// TimerEntries is the size of timer_set: delayed and in-flight jobs.
	TimerEntries int64
	// Queues are the queues "ns/q" with a ready list or a dead letter, sorted.
	Queues []string
	// Registered is the number of queues in lmstfy's registries (m/ns/NS).
	Registered int
	// Scanned: the keyspace was scanned for ready lists and dead letters
	// missing from the registries (a registry can be gone: Kairos before
	// issue #30 deleted lmstfy's).
	Scanned bool
}

// Jobs reports whether the pool holds lmstfy's jobs: a timer entry, a
// ready list or a dead letter. Registries alone hold no job.
func (f Found) Jobs() bool { return f.TimerEntries > 0 || len(f.Queues) > 0 }

// String describes what was found, for the message that names it.
func (f Found) String() string {
	var parts []string
	if f.TimerEntries > 0 {
		parts = append(parts, fmt.Sprintf("%s holds %d delayed or in-flight jobs", timerSet, f.TimerEntries))
	}
	if n := len(f.Queues); n > 0 {
		shown := f.Queues
		if n > 5 {
			shown = shown[:5]
		}
		s := fmt.Sprintf("%d queues have ready lists or dead letters (%s", n, strings.Join(shown, ", "))
		if n > 5 {
			s += ", …"
		}
		parts = append(parts, s+")")
	}
	if len(parts) == 0 {
		return "no lmstfy job"
	}
	return strings.Join(parts, "; ")
}

// Detect looks for lmstfy's jobs in the Redis behind c: the size of
// timer_set, and the ready lists and dead letters of the queues of
// lmstfy's registries, plus, with scan, those a SCAN of the keyspace
// finds (one pass over every key: the first start of a pool, or an
// import). It changes nothing. A Redis Cluster never holds lmstfy's data
// (lmstfy does not run on one): Detect returns nothing for one.
func Detect(ctx context.Context, c redis.UniversalClient, scan bool) (Found, error) {
	var f Found
	if _, ok := c.(*redis.ClusterClient); ok {
		return f, nil
	}
	queues, registered, err := registryQueues(ctx, c)
	if err != nil {
		return f, err
	}
	f.Registered = len(registered)
	if scan {
		f.Scanned = true
		if err := scanLists(ctx, c, queues); err != nil {
			return f, err
		}
	}
	f.TimerEntries, err = c.ZCard(ctx, timerSet).Result()
	if err != nil {
		return f, fmt.Errorf("lmstfy: %s: %w", timerSet, err)
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	sort.Strings(names)
	exists := make([]*redis.IntCmd, len(names))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			ns, q, _ := splitQueue(name)
			exists[i] = p.Exists(ctx, readyKey(ns, q), deadKey(ns, q))
		}
		return nil
	}); err != nil {
		return f, fmt.Errorf("lmstfy: queues: %w", err)
	}
	for i, name := range names {
		if exists[i].Val() > 0 {
			f.Queues = append(f.Queues, name)
		}
	}
	return f, nil
}

// registryQueues returns the queues of lmstfy's registries m/ns and
// m/ns/NS, as a set of "ns/q", and the same as a list.
func registryQueues(ctx context.Context, c redis.UniversalClient) (map[string]bool, []string, error) {
	set := map[string]bool{}
	var list []string
	nss, err := c.HKeys(ctx, namespaces).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("lmstfy: %s: %w", namespaces, err)
	}
	for _, ns := range nss {
		qs, err := c.HKeys(ctx, queuesKey(ns)).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("lmstfy: %s: %w", queuesKey(ns), err)
		}
		for _, q := range qs {
			if validPart(ns) && validPart(q) && !set[queueName(ns, q)] {
				set[queueName(ns, q)] = true
				list = append(list, queueName(ns, q))
			}
		}
	}
	return set, list, nil
}

// scanLists adds to queues every queue whose ready list or dead letter a
// SCAN of the keyspace finds.
func scanLists(ctx context.Context, c redis.UniversalClient, queues map[string]bool) error {
	iter := c.Scan(ctx, 0, listPattern, 10000).Iterator()
	for iter.Next(ctx) {
		if ns, q, ok := splitQueue(iter.Val()[2:]); ok {
			queues[queueName(ns, q)] = true
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("lmstfy: scan: %w", err)
	}
	return nil
}

// timerEntry is a decoded member of timer_set.
type timerEntry struct {
	ns, q, id string
	tries     uint16
}

var errBadEntry = errors.New("lmstfy: malformed entry")

// decodeTimer decodes a timer_set member: len:u16 NS len:u16 Q tries:u16
// len:u16 ID (struct.pack("Hc0Hc0HHc0", …) in lmstfy's Lua).
func decodeTimer(m string) (timerEntry, error) {
	var e timerEntry
	b := []byte(m)
	str := func() (string, bool) {
		if len(b) < 2 {
			return "", false
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return "", false
		}
		s := string(b[2 : 2+n])
		b = b[2+n:]
		return s, true
	}
	var ok bool
	if e.ns, ok = str(); !ok {
		return e, errBadEntry
	}
	if e.q, ok = str(); !ok || len(b) < 2 {
		return e, errBadEntry
	}
	e.tries = binary.LittleEndian.Uint16(b)
	b = b[2:]
	if e.id, ok = str(); !ok || len(b) != 0 || e.id == "" || !validPart(e.ns) || !validPart(e.q) {
		return e, errBadEntry
	}
	return e, nil
}

// decodeEntry decodes a ready list or dead letter entry: tries:u16
// len:u16 ID.
func decodeEntry(v string) (tries uint16, id string, err error) {
	if len(v) < 4 {
		return 0, "", errBadEntry
	}
	n := int(binary.LittleEndian.Uint16([]byte(v[2:4])))
	if len(v) != 4+n || n == 0 {
		return 0, "", errBadEntry
	}
	return binary.LittleEndian.Uint16([]byte(v[0:2])), v[4:], nil
}
