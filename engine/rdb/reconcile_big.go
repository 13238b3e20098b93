package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Chunked recounts of the queues too big for one recountScript call
// (issue #31; doc/design.md "Usage and quotas"). A queue of more than
// reconcileMax entries is recounted by a pass of recountPartScript calls,
// each reading at most reconcileBigChunk entries of one structure (a few
// milliseconds of Redis), at most reconcileBigEntries entries a step, and
// its sum is applied by recountApplyScript — only if the queue held still
// meanwhile:
//
//   - the pass runs on one connection that WATCHes the queue's four
//     structures before its first chunk, and applies its sum in a
//     MULTI/EXEC, which Redis refuses when any script pushed, popped,
//     moved, trimmed, tombstoned or removed an entry since: the chunks then
//     read, index by index, the same entries an atomic recount would have;
//   - recountApplyScript writes only when the queue's count is the one the
//     first chunk read: the deletes that leave an entry behind (an ACK of a
//     waiting job) change no structure, only the count, and no script adds
//     to a count without a structure (a publish pushes an entry);
//   - job keys only go: a job counted live by its chunk may expire before
//     the sum is applied, so the sum is between the live jobs at the WATCH
//     and at the EXEC — never below what Redis holds, and the jobs that
//     expired meanwhile are corrected by the next pass, as after an atomic
//     recount.
//
// So a pass applies what an atomic recount would have, or nothing; a pass
// given up (the queue changed) is tried again when the big queues come
// round. A queue that never holds still for a pass (about its size over
// reconcileBigEntries seconds) keeps the scripts' counts, whose expiries
// the expiry ledger takes off one by one (reconcile_ledger.go). A grouped
// queue's pass reads its groups' lists after its own structures, in the
// order of its rotation and blocked set, which the WATCH holds still.

const (
	// reconcileBigChunk is the most entries one recountPartScript call
	// reads: 1,000 entries took 1.2-4.5 ms of Redis time on a machine at
	// load average 27 (3-4.5 µs an entry of a ready list: three commands;
	// less for a timer).
	reconcileBigChunk = 1000
	// reconcileBigEntries bounds the entries one step's chunked passes
	// read: a pass over a million entries takes 100 steps.
	reconcileBigEntries = 10000
	// reconcileBigAgain is how long a queue whose pass applied waits for
	// its next one (its expiries in timers are counted meanwhile by the
	// pump, the others wait): a pool whose big queues hold still costs
	// Redis little more than their passes once in that time.
	reconcileBigAgain = 30 * time.Second
	// reconcileBigRetry is how long a queue whose pass was given up (it
	// changed meanwhile) waits for its next one: a queue published to
	// without pause gives up every pass, and retrying at once cost a
	// publish benchmark 8 % of its rate (round P, doc/performance.md).
	reconcileBigRetry = 5 * time.Second
)

// bigPass is the state of a chunked recount under way: the connection
// holding its WATCH, where it reads next, what the first chunk saw and
// what the chunks found.
type bigPass struct {
	q      [2]string
	opened time.Time // when its WATCH was set (reconGate.applied)
	conn   *redis.Conn
	s      int   // structure read next, 0..5 (ready, priority, timer, dead, expiry ledger, the groups')
	off    int64 // offset in it
	gi     int64 // the groups': the group read next (recountPartScript's order)
	sub    int64 // the groups': its list (1) or priority set (2)
	chunks int
	// At the first chunk: the five lengths, the count (jobs, bytes), the
	// config's gn and the lengths of the rotation and the blocked set.
	seen  [10]int64
	jobs  int64
	bytes int64
}

// errBigGone says a chunked pass was given up: its queue changed.
var errBigGone = errors.New("queue changed under the recount")

// bigStep runs chunked recounts of the big queues for at most budget
// entries: the pass under way, then the next big queues in turn but those
// whose pass applied after since. It adds what it did to st and the
// groups of the queues it corrected to groups.
func (e *Engine) bigStep(ctx context.Context, budget int, since time.Time, st *ReconcileStats, groups map[int]bool) error {
	r := &e.ten.recon
	for tried := 0; budget > 0 && len(r.big) > 0; {
		if r.pass == nil {
			if tried >= len(r.big) {
				return nil
			}
			tried++
			q := r.big[r.bigNext%len(r.big)]
			r.bigNext = (r.bigNext + 1) % len(r.big)
			if at, ok := r.bigAt[q]; ok && at.After(since) {
				continue
			}
			if err := e.openPass(ctx, q); err != nil {
				return err
			}
			if r.pass == nil {
				continue // not a client the recount can hold a connection of
			}
		}
		done, read, err := e.passChunk(ctx, r.pass, min(budget, reconcileBigChunk))
		budget -= max(read, 1)
		if err == nil && done {
			var res []int64
			res, err = e.applyPass(ctx, r.pass)
			if err == nil {
				st.Passes++
				if r.bigAt == nil {
					r.bigAt = map[[2]string]time.Time{}
				}
				r.bigAt[r.pass.q] = time.Now()
				r.gate.passed(r.pass.q, r.pass.opened)
				if res[1] != 0 || res[2] != 0 {
					st.Corrected++
					st.Jobs += res[1]
					st.Bytes += res[2]
					groups[slotGroup(r.pass.q[0], r.pass.q[1])] = true
				}
			}
		}
		if errors.Is(err, errBigGone) || errors.Is(err, redis.TxFailedErr) {
			st.Aborted++
			err = nil
			done = true
			if r.bigAt == nil {
				r.bigAt = map[[2]string]time.Time{}
			}
			// As if it had applied reconcileBigRetry before the usual wait ends.
			r.bigAt[r.pass.q] = time.Now().Add(reconcileBigRetry - reconcileBigAgain)
			r.gate.passed(r.pass.q, r.pass.opened)
		}
		if err != nil || done {
			e.closePass()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// openPass starts a pass over queue q: a connection of its own (the
// master of q's slot on a cluster) and a WATCH of its structures.
func (e *Engine) openPass(ctx context.Context, q [2]string) error {
	qn := e.names.get([3]string{q[0], q[1]})
	var c *redis.Client
	switch cl := e.rdb.(type) {
	case *redis.Client:
		c = cl
	case *redis.ClusterClient:
		var err error
		if c, err = cl.MasterForKey(ctx, qn.ready); err != nil {
			return fmt.Errorf("reconcile pool %s: %w", e.pool, err)
		}
	default:
		return nil
	}
	p := &bigPass{q: q, opened: time.Now(), conn: c.Conn(), sub: 1}
	// The config too: every push to or pop from a group's lists counts
	// its entries there (gn); and the groups' order (recountPartScript).
	gp := groupKeyPrefix(q[0], q[1])
	if err := p.conn.Do(ctx, "watch", qn.ready, qn.prio, qn.timer, qn.dead, qn.config, ledgerKey(qn.jobPrefix),
		gp+"r", gp+"b", gp+"m", gp+"a").Err(); err != nil {
		_ = p.conn.Close()
		return fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	e.ten.recon.pass = p
	return nil
}

// passChunk reads the next chunk of at most most entries; done once every
// structure was read to its end.
func (e *Engine) passChunk(ctx context.Context, p *bigPass, most int) (done bool, read int, err error) {
	qn := e.names.get([3]string{p.q[0], p.q[1]})
	keys := []string{qn.ready, qn.prio, qn.timer, qn.dead, qn.jobPrefix, qn.usage, qn.config, ledgerKey(qn.jobPrefix)}
	v, err := recountPartScript.EvalSha(ctx, p.conn, keys, p.s+1, p.off, most, p.gi, p.sub).Int64Slice()
	if err != nil {
		if strings.Contains(err.Error(), "NOSCRIPT") {
			_ = recountPartScript.Load(ctx, e.rdb).Err()
		}
		return false, 0, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	if len(v) != 18 {
		return false, 0, fmt.Errorf("reconcile pool %s: unexpected reply %v", e.pool, v)
	}
	var seen [10]int64
	copy(seen[:7], v[3:10])
	copy(seen[7:], v[11:14])
	if v[10] == 1 {
		// The rotation of the layout before: its groups are not read in
		// chunks (a rolling upgrade).
		return false, int(v[0]), errBigGone
	}
	if p.chunks == 0 {
		p.seen = seen
	} else if seen != p.seen {
		return false, int(v[0]), errBigGone
	}
	p.chunks++
	p.jobs += v[1]
	p.bytes += v[2]
	if p.s == 5 {
		p.gi, p.sub, p.off = v[14], v[15], v[16]
		if v[17] == 1 {
			p.s = 6
		}
		return p.s == 6, int(v[0]), nil
	}
	p.off += v[0]
	for p.s < 5 && p.off >= p.seen[p.s] {
		p.s, p.off = p.s+1, 0
	}
	return false, int(v[0]), nil
}

// applyPass applies a finished pass's sum in the MULTI/EXEC of its WATCH.
func (e *Engine) applyPass(ctx context.Context, p *bigPass) ([]int64, error) {
	qn := e.names.get([3]string{p.q[0], p.q[1]})
	var cmd *redis.Cmd
	_, err := p.conn.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		cmd = recountApplyScript.EvalSha(ctx, tx, []string{qn.jobPrefix, qn.usage}, p.seen[5], p.seen[6], p.jobs, p.bytes)
		return nil
	})
	if err != nil {
		if strings.Contains(err.Error(), "NOSCRIPT") {
			_ = recountApplyScript.Load(ctx, e.rdb).Err()
		}
		if errors.Is(err, redis.TxFailedErr) {
			return nil, err
		}
		return nil, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	res, err := cmd.Int64Slice()
	if err != nil || len(res) != 3 {
		return nil, fmt.Errorf("reconcile pool %s: unexpected reply %v: %v", e.pool, res, err)
	}
	if res[0] == 0 {
		return nil, errBigGone
	}
	return res, nil
}

// closePass ends the pass under way, if any, and gives its connection
// back (without its WATCH).
func (e *Engine) closePass() {
	p := e.ten.recon.pass
	if p == nil {
		return
	}
	e.ten.recon.pass = nil
	_ = p.conn.Do(context.Background(), "unwatch").Err()
	_ = p.conn.Close()
}

// noteBig records the queues of a step too big for recountScript.
func (r *reconciler) noteBig(q [2]string) {
	for _, b := range r.big {
		if b == q {
			return
		}
	}
	r.big = append(r.big, q)
}

// keepBig drops the big queues (and the pass) of queues no longer listed.
func (e *Engine) keepBig(listed map[[2]string]bool) {
	r := &e.ten.recon
	big := r.big[:0]
	for _, q := range r.big {
		if listed[q] {
			big = append(big, q)
		}
	}
	r.big = big
	for q := range r.bigAt {
		if !listed[q] {
			delete(r.bigAt, q)
		}
	}
	if r.pass != nil && !listed[r.pass.q] {
		e.closePass()
	}
}
