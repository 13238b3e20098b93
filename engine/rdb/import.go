package rdb

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// Import writes jobs that another store held (engine/lmstfy imports
// lmstfy's) into the pool in the states they had there. It is the one
// part of the engine that knows nothing of where the jobs come from: the
// caller decodes them, Import lays them out as a publish, a consume or
// the pump would have.

// ImportJob is one job to import, in the state it had.
type ImportJob struct {
	ID string
	// Payload is the stored payload: the body for a v0 ID, JSON
	// {"body":"<base64>","attributes":{…}} for a v1 ID (lmstfy's and
	// Kairos's encoding alike).
	Payload []byte
	// TTL is what is left of the job's time to live; 0 = none.
	TTL time.Duration
	// State is StateReady, StateDelayed, StateInFlight or StateDead.
	State engine.JobState
	// Tries is the number of tries left (for an in-flight job, after the
	// delivery in progress).
	Tries uint16
	// Deliveries is how many times the job was delivered.
	Deliveries uint16
	// At is the due time of a delayed job, the TTR deadline of an
	// in-flight one and the time of death of a dead one.
	At time.Time
}

// importScript writes jobs of one queue, each unless its job key exists:
// ready ones to the consume end of the ready list, after every job there
// (they are older), delayed and in-flight ones into the timer, dead ones
// to the oldest end of the dead letter; it records the queue in its
// group's registry and timer index and wakes consumers and pumps as a
// publish does. A job whose key exists was written by an earlier call (an
// import run again after it was stopped): it is skipped, so that every
// job is imported once.
//
//	KEYS[1] ready list   KEYS[2] timer   KEYS[3] the group's timer index
//	KEYS[4] the group's registry   KEYS[5] dead letter   KEYS[5+i] job i's key
//	KEYS[#KEYS] the group's usage hash (the jobs written count as published)
//	ARGV[1] index member ns/q   ARGV[2] ready channel   ARGV[3] the group's wake-up channel
//	ARGV[4] the publish command (PUBLISH or SPUBLISH)
//	ARGV[5+5(i-1)..] per job i: kind (r ready, t timer, x dead), value
//	         (header + payload), ttl (ms, 0 = none), due time (ms, kind t;
//	         else 0), packed entry (tries and ID)
//
// Ready and dead jobs come in their list's order from its newest end, so
// that the oldest ends nearest the consume end. Returns the number of
// jobs written.
var importScript = script(`
local n = #KEYS - 6
local ready, dead, written, mindue, bytes = {}, {}, 0, nil, 0
for i = 1, n do
  local b = 5 + 5 * (i - 1)
  local ok
  if ARGV[b + 2] ~= '0' then
    ok = redis.call('SET', KEYS[5 + i], ARGV[b + 1], 'NX', 'PX', ARGV[b + 2])
  else
    ok = redis.call('SET', KEYS[5 + i], ARGV[b + 1], 'NX')
  end
  if ok then
    written = written + 1
    bytes = bytes + #ARGV[b + 1]
    local kind = ARGV[b]
    if kind == 'r' then
      ready[#ready + 1] = ARGV[b + 4]
    elseif kind == 'x' then
      dead[#dead + 1] = ARGV[b + 4]
    else
      local due = tonumber(ARGV[b + 3])
      redis.call('ZADD', KEYS[2], ARGV[b + 3], eid(ARGV[b + 4]))
      if not mindue or due < mindue then mindue = due end
    end
  end
end
for i = 1, #ready, 1000 do redis.call('RPUSH', KEYS[1], unpack(ready, i, math.min(i + 999, #ready))) end
for i = 1, #dead, 1000 do redis.call('RPUSH', KEYS[5], unpack(dead, i, math.min(i + 999, #dead))) end
redis.call('HSET', KEYS[4], ARGV[1], 1)
usage_add(KEYS[#KEYS], KEYS[1], written, bytes)
if mindue then lower_index(KEYS[3], ARGV[1], mindue, ARGV[3], ARGV[4]) end
if #ready > 0 then redis.call(ARGV[4], ARGV[2], #ready) end
return written
`)

// Import writes jobs of queue ns/q (a queue name, not a shard's) as
// importScript says, in calls of at most importBatch jobs, and returns how
// many it wrote; the others existed already. On a cluster every call
// touches the queue's slot group only.
func (e *Engine) Import(ctx context.Context, ns, q string, jobs []ImportJob) (int, error) {
	if !engine.ValidName(ns) || !engine.ValidName(q) {
		return 0, fmt.Errorf("import %s/%s: %w", ns, q, engine.ErrInvalid)
	}
	qn := e.names.get([3]string{ns, q})
	written := 0
	for len(jobs) > 0 {
		batch := jobs[:min(len(jobs), importBatch)]
		jobs = jobs[len(batch):]
		keys := []string{qn.ready, qn.timer, qn.index, qn.registry, qn.dead}
		args := []interface{}{qn.member, qn.channel, qn.wake, e.pub}
		for _, j := range batch {
			kind, due, v, err := importValue(j)
			if err != nil {
				return written, fmt.Errorf("import %s/%s job %s: %w", ns, q, j.ID, err)
			}
			keys = append(keys, qn.jobPrefix+j.ID)
			ttl := int64(0)
			if j.TTL > 0 {
				ttl = max(j.TTL.Milliseconds(), 1)
			}
			args = append(args, kind, v, ttl, due, packEntry(j.Tries, j.ID))
		}
		keys = append(keys, qn.usage)
		n, err := e.run(ctx, importScript, keys, args...).Int()
		if err != nil {
			return written, fmt.Errorf("import %s/%s: %w", ns, q, err)
		}
		written += n
	}
	qn.recorded.Store(true)
	return written, nil
}

// importBatch is the most jobs one importScript call writes: about a
// millisecond of Redis time.
const importBatch = 500

// importValue returns the script's kind of j, its due time (ms; 0 but
// for kind t) and its stored value.
func importValue(j ImportJob) (kind string, due int64, v []byte, err error) {
	if j.ID == "" || len(j.ID) > 0xffff {
		return "", 0, nil, engine.ErrInvalid
	}
	v = newValue(true, j.Tries, 0, 0, "", "", j.Payload)
	binary.LittleEndian.PutUint16(v[4:6], j.Deliveries)
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], uint64(j.At.UnixMilli()))
	switch j.State {
	case engine.StateReady:
		return "r", 0, v, nil
	case engine.StateDelayed:
		v[1] = 'd'
	case engine.StateInFlight:
		v[1] = 'f'
	case engine.StateDead:
		v[1] = 'x'
		v[7] = byte(reasonCode(engine.ReasonTTRExpired))
		copy(v[8:14], t[:6])
		return "x", 0, v, nil
	default:
		return "", 0, nil, fmt.Errorf("state %q: %w", j.State, engine.ErrInvalid)
	}
	copy(v[8:14], t[:6])
	return "t", j.At.UnixMilli(), v, nil
}
