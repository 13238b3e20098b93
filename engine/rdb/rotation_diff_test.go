package rdb

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// The consume script moves a tracked queue's rotation in Lua and writes it
// once per call (rot_new … rot_save), and reads and writes the groups'
// in-flight counts once per call (inflight_reserve, inflight_flush,
// inflight_free_many), where it did an LMOVE and an HINCRBY per job
// before (issue #32 item 4). A fast path beside the plain one must be
// proven equal to it: TestRotationDifferential runs the same random
// publishes, consumes, ACKs and deletes on two engines, one with the
// scripts as they are and one whose consume and ACK scripts have those
// definitions replaced by the per-job commands of before (refDefs), and
// compares the jobs handed out and every group key after each step.

// refDefs are the definitions of before: the rotation moved by one
// command per step, a group's count by one HINCRBY per group and call.
var refDefs = map[string]string{
	"rot_new": `local function rot_new(rk, chunk) return {rk = rk, pos = 0, read = 0, buf = {}} end
`,
	"rot_next": `local function rot_next(r)
  local g = redis.call('LMOVE', r.rk, r.rk, 'LEFT', 'RIGHT')
  if not g then return nil end
  return g
end
`,
	"rot_drop": `local function rot_drop(r) redis.call('RPOP', r.rk) end
`,
	"rot_back": `local function rot_back(r) redis.call('LMOVE', r.rk, r.rk, 'RIGHT', 'LEFT') end
`,
	"rot_save": `local function rot_save(r) end
`,
	"inflight_new": `local function inflight_new(gp, gmif)
  return {gp = gp, gmif = gmif, cnt = {}, pend = {}, gs = {}, rec = {}}
end
`,
	"inflight_reserve": `local function inflight_reserve(t, g, r)
  local c = t.cnt[g]
  if not c then
    c = redis.call('HINCRBY', t.gp .. 'c', g, 1)
    if c > t.gmif then
      c = c - 1
      t.cnt[g] = c
      inflight_pend(t, g, -1)
      return false
    end
    t.cnt[g] = c
    return c
  end
  if c >= t.gmif then return false end
  t.cnt[g] = c + 1
  inflight_pend(t, g, 1)
  return c + 1
end
`,
	"inflight_unreserve": `local function inflight_unreserve(t, g)
  t.cnt[g] = t.cnt[g] - 1
  inflight_pend(t, g, -1)
end
`,
	"inflight_flush": `local function inflight_flush(t)
  for i = 1, #t.rec, 512 do redis.call('HSET', t.gp .. 'i', unpack(t.rec, i, math.min(i + 511, #t.rec))) end
  local zero = {}
  for _, g in ipairs(t.gs) do
    local d = t.pend[g]
    if d ~= 0 and redis.call('HINCRBY', t.gp .. 'c', g, d) <= 0 then zero[#zero + 1] = g end
  end
  if #zero > 0 then redis.call('HDEL', t.gp .. 'c', unpack(zero)) end
end
`,
	"inflight_free_many": `local function inflight_free_many(gp, ck, ids)
  local gs = redis.call('HMGET', gp .. 'i', unpack(ids))
  local del, per, order = {}, {}, {}
  for i = 1, #ids do
    local g = gs[i]
    if g then
      del[#del + 1] = ids[i]
      if not per[g] then
        per[g] = 0
        order[#order + 1] = g
      end
      per[g] = per[g] + 1
    end
  end
  if #del == 0 then return 0 end
  local cfg = inflight_cfg(ck)
  redis.call('HDEL', gp .. 'i', unpack(del))
  local wake, zero = 0, {}
  for _, g in ipairs(order) do wake = wake + inflight_drop(gp, cfg, g, per[g], zero) end
  if #zero > 0 then redis.call('HDEL', gp .. 'c', unpack(zero)) end
  return wake + inflight_room_freed(gp, cfg, #del)
end
`,
}

// refSource is script source src with its library, the definitions of
// refDefs in place of the current ones.
func refSource(t *testing.T, src string) string {
	t.Helper()
	text := libFor(src) + src
	for _, p := range libParts {
		def, ok := refDefs[p.name]
		if !ok || !strings.Contains(text, p.src) {
			continue
		}
		text = strings.Replace(text, p.src, def, 1)
	}
	for name := range refDefs {
		if usesName(src, name) && !strings.Contains(text, refDefs[name]) {
			t.Fatalf("reference of %s not in place", name)
		}
	}
	return text
}

// swapScripts is a hook that sends, in place of the scripts of from, those
// of to (same index): the engine it is added to runs the reference.
type swapScripts struct{ from, to []*redis.Script }

func (h *swapScripts) swap(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 || !strings.HasPrefix(cmd.Name(), "eval") {
		return
	}
	for i, s := range h.from {
		if args[1] == s.Hash() {
			args[1] = h.to[i].Hash()
		}
	}
}

func (h *swapScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *swapScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.swap(cmd)
		return next(ctx, cmd)
	}
}

func (h *swapScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.swap(c)
		}
		return next(ctx, cmds)
	}
}

// groupState is what a queue's group keys hold, in a form two engines'
// can be compared by.
func groupState(t *testing.T, c redis.UniversalClient, ns, q string, groups []string) string {
	t.Helper()
	gp := groupKeyPrefix(ns, q)
	var b strings.Builder
	rot, err := c.LRange(bg, gp+"r", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "rotation %q\n", rot)
	for _, k := range []string{"m", "c", "i"} {
		h, err := c.HGetAll(bg, gp+k).Result()
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 0, len(h))
		for f := range h {
			keys = append(keys, f)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%s:", k)
		for _, f := range keys {
			fmt.Fprintf(&b, " %q=%s", f, h[f])
		}
		b.WriteString("\n")
	}
	blocked, err := c.SMembers(bg, gp+"b").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(blocked)
	fmt.Fprintf(&b, "blocked %q\n", blocked)
	for _, g := range groups {
		ql, pk := readyKey(ns, q), "p/"+queueBase(ns, q)
		if g != "" {
			ql, pk = gp+"q:"+g, gp+"p:"+g
		}
		l, err := c.LRange(bg, ql, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.ZRangeWithScores(bg, pk, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "group %q: list %d %q, prio %v\n", g, len(l), l, p)
	}
	gn, _ := c.HGet(bg, configKey(ns, q), "gn").Result()
	fmt.Fprintf(&b, "gn %s\n", gn)
	return b.String()
}

func TestRotationDifferential(t *testing.T) {
	for _, tier := range coalesceTiers {
		t.Run(tier.name, func(t *testing.T) {
			for _, sc := range []struct {
				name    string
				cfg     engine.QueueConfig
				prio    bool
				changes bool // group_max_in_flight changes on the way
			}{
				{name: "groups", cfg: engine.QueueConfig{}},
				{name: "weights", cfg: engine.QueueConfig{GroupWeights: map[string]int{"g1": 3, "g2": 2}}, prio: true},
				{name: "limits", cfg: engine.QueueConfig{MaxInFlight: 12, GroupMaxInFlight: 2, GroupWeights: map[string]int{"g1": 3}}, changes: true},
				{name: "max_in_flight", cfg: engine.QueueConfig{MaxInFlight: 9}, prio: true},
				{name: "group_max_in_flight", cfg: engine.QueueConfig{GroupMaxInFlight: 3}, prio: true, changes: true},
			} {
				t.Run(sc.name, func(t *testing.T) {
					steps := 250
					if tier.name == "miniredis" {
						steps = 120
					}
					testRotationDifferential(t, tier.client, sc.cfg, sc.prio, sc.changes, steps)
				})
			}
		})
	}
}

func testRotationDifferential(t *testing.T, newClient func(*testing.T) redis.UniversalClient, cfg engine.QueueConfig, prio, changes bool, steps int) {
	ns, q := "diff", "q"
	groups := []string{"", "g0", "g1", "g2", "g3", "g4", "g5"}
	cur, ref := newClient(t), newClient(t)
	refConsume := redis.NewScript(refSource(t, consumeLua))
	refAck := redis.NewScript(refSource(t, ackManyLua))
	for _, s := range []*redis.Script{refConsume, refAck} {
		if err := s.Load(bg, ref).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if m, ok := ref.(*redis.Client); ok {
		m.AddHook(&swapScripts{from: []*redis.Script{consumeScript, ackManyScript}, to: []*redis.Script{refConsume, refAck}})
	} else {
		t.Fatal("not a single-Redis client")
	}
	// No Run: no reclaimer or pump beside the steps, so that both see
	// the same keys.
	engines := make([]*Engine, 2)
	for i, c := range []redis.UniversalClient{cur, ref} {
		e, err := New(bg, c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.SetQueueConfig(bg, ns, q, cfg); err != nil {
			t.Fatal(err)
		}
		engines[i] = e
	}
	rnd := rand.New(rand.NewSource(int64(len(groups)*steps) + int64(cfg.MaxInFlight*7+cfg.GroupMaxInFlight)))
	var ready, out []string // job IDs ready (published, not consumed or deleted), in flight
	next := 0
	gmif := cfg.GroupMaxInFlight
	for step := 0; step < steps; step++ {
		var what string
		switch r := rnd.Intn(20); {
		case r < 6: // publish
			n, g := 1+rnd.Intn(6), groups[rnd.Intn(len(groups))]
			reqs := make([]*engine.PublishRequest, n)
			for i := range reqs {
				next++
				reqs[i] = &engine.PublishRequest{Namespace: ns, Queue: q, ID: fmt.Sprintf("job%05d", next), Group: g, Body: []byte("x"), Tries: 3, TTL: time.Hour}
				if prio && rnd.Intn(4) == 0 {
					reqs[i].Priority = 1 + rnd.Intn(3)
				}
				ready = append(ready, reqs[i].ID)
			}
			what = fmt.Sprintf("publish %d to %q", n, g)
			for _, e := range engines {
				if _, err := e.PublishBatch(bg, reqs); err != nil {
					t.Fatalf("step %d, %s: %v", step, what, err)
				}
			}
		case r < 13: // consume
			n := 1 + rnd.Intn(15)
			what = fmt.Sprintf("consume %d", n)
			var got [2][]string
			for i, e := range engines {
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: n, TTR: time.Hour})
				if err != nil {
					t.Fatalf("step %d, %s: %v", step, what, err)
				}
				for _, j := range jobs {
					got[i] = append(got[i], j.ID+"/"+j.Group)
				}
			}
			if !slices.Equal(got[0], got[1]) {
				t.Fatalf("step %d, %s: handed out %q, the reference %q", step, what, got[0], got[1])
			}
			for _, s := range got[0] {
				id, _, _ := strings.Cut(s, "/")
				out = append(out, id)
				ready = slices.DeleteFunc(ready, func(x string) bool { return x == id })
			}
		case r < 18: // ACK some jobs in flight, one coalesced call
			if len(out) == 0 {
				continue
			}
			rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
			n := 1 + rnd.Intn(min(len(out), 8))
			refs := make([]engine.JobRef, n)
			for i := range refs {
				refs[i] = engine.JobRef{Namespace: ns, Queue: q, ID: out[i]}
			}
			out = out[n:]
			what = fmt.Sprintf("ACK %d", n)
			for _, e := range engines {
				errs := make([]error, n)
				e.DeleteEach(bg, refs, errs)
				for _, err := range errs {
					if err != nil {
						t.Fatalf("step %d, %s: %v", step, what, err)
					}
				}
			}
		case r < 19: // delete a ready job: a stale entry in its group's list
			if len(ready) == 0 {
				continue
			}
			i := rnd.Intn(len(ready))
			id := ready[i]
			ready = slices.Delete(ready, i, i+1)
			what = "delete ready " + id
			for _, e := range engines {
				if err := e.Delete(bg, ns, q, id); err != nil {
					t.Fatalf("step %d, %s: %v", step, what, err)
				}
			}
		default: // group_max_in_flight changes (blocked groups come back)
			if !changes {
				continue
			}
			gmif = 1 + (gmif % 3)
			c := cfg
			c.GroupMaxInFlight = gmif
			what = fmt.Sprintf("group_max_in_flight %d", gmif)
			for _, e := range engines {
				if err := e.SetQueueConfig(bg, ns, q, c); err != nil {
					t.Fatalf("step %d, %s: %v", step, what, err)
				}
			}
			// The blocked groups come back to the rotation in SPOP's
			// order, random: the same groups, then the reference takes
			// the order of the other.
			rk := groupKeyPrefix(ns, q) + "r"
			a, err := cur.LRange(bg, rk, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			b, err := ref.LRange(bg, rk, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			sa, sb := slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
			if !slices.Equal(sa, sb) {
				t.Fatalf("step %d, %s: rotation %q, the reference %q", step, what, a, b)
			}
			if _, err := ref.TxPipelined(bg, func(p redis.Pipeliner) error {
				p.Del(bg, rk)
				if len(a) > 0 {
					p.RPush(bg, rk, a)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		a, b := groupState(t, cur, ns, q, groups), groupState(t, ref, ns, q, groups)
		if a != b {
			t.Fatalf("step %d, %s: the keys differ\nnow:\n%s\nreference:\n%s", step, what, a, b)
		}
	}
	if len(out)+len(ready) == 0 || next < 50 {
		t.Fatalf("a scenario of %d jobs, %d in flight at the end: too little to compare", next, len(out))
	}
}
