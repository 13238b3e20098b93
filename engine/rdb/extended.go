package rdb

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// The Kairos extensions of the Redis engine (engine.Extensions).

// decodeReceipt turns a receipt as clients see it (16 hex digits) into the
// 8 bytes stored in the job header.
func decodeReceipt(r string) (string, error) {
	b, err := hex.DecodeString(r)
	if err != nil || len(b) != 8 {
		return "", fmt.Errorf("receipt %q: %w", r, engine.ErrInvalid)
	}
	return string(b), nil
}

// receiptResult maps the scripts' -1/-2 codes to errors.
func receiptResult(op, ns, q, id string, code int64) error {
	switch code {
	case -1:
		return fmt.Errorf("%s %s/%s/%s: %w", op, ns, q, id, engine.ErrJobNotFound)
	case -2:
		return fmt.Errorf("%s %s/%s/%s: %w", op, ns, q, id, engine.ErrStaleReceipt)
	}
	return nil
}

// Ack implements engine.Extensions. An empty receipt is lmstfy's ACK: the job
// is deleted whatever its state, and an unknown job is not an error.
func (e *Engine) Ack(ctx context.Context, ns, q, id, receipt string) error {
	if err := checkNames(ns, q); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.ackSharded(ctx, sp, ns, q, id, receipt)
	}
	nonce := ""
	if receipt != "" {
		var err error
		if nonce, err = decodeReceipt(receipt); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	return ackResult(e.ackOne(ctx, ns, q, id, nonce))
}

// ackOne runs the ACK of one job (coalesced with concurrent ones of its
// queue) and returns its ackOp with the script's code.
func (e *Engine) ackOne(ctx context.Context, ns, q, id, nonce string) (ackOp, error) {
	op := ackOp{ns: ns, q: q, id: id, nonce: nonce}
	var err error
	if e.acks != nil {
		op, err = e.acks.do(ctx, e.names.get([3]string{ns, q}).timer, op)
	} else {
		// Not coalescing: the same script, for this job alone.
		call := &batchCall[ackOp]{in: op}
		e.ackCoalesced(ctx, []*batchCall[ackOp]{call})
		op, err = call.in, call.err
	}
	return op, err
}

// ackResult is the outcome of one ACK of a batch: the batch's error, or the
// ack script's code for it.
func ackResult(op ackOp, err error) error {
	if err != nil {
		return fmt.Errorf("ack %s/%s/%s: %w", op.ns, op.q, op.id, err)
	}
	return receiptResult("ack", op.ns, op.q, op.id, op.code)
}

// ackOp is one coalesced ACK: the job, its receipt nonce ("" for lmstfy's
// ACK) and the ack script's code for it.
type ackOp struct {
	ns, q, id, nonce string
	code             int64
}

// ackCoalesced runs ACKs of one queue (coalesced, or one alone) in one
// ackManyScript call.
func (e *Engine) ackCoalesced(ctx context.Context, batch []*batchCall[ackOp]) {
	ns, q := batch[0].in.ns, batch[0].in.q
	keys := make([]string, 3+len(batch))
	args := make([]interface{}, 2*len(batch)+2)
	qn := e.names.get([3]string{ns, q})
	keys[0] = qn.timer
	keys[1+len(batch)], keys[2+len(batch)] = qn.config, qn.usage
	for i, c := range batch {
		keys[1+i] = qn.jobPrefix + c.in.id
		args[2*i], args[2*i+1] = c.in.id, c.in.nonce
	}
	args[2*len(batch)], args[2*len(batch)+1] = e.argPub, qn.argChannel
	codes, err := e.runScript(ctx, ackManyScript, keys, args...).Int64Slice()
	if err == nil && len(codes) != len(batch) {
		err = fmt.Errorf("ack: %d results for %d jobs", len(codes), len(batch))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
			continue
		}
		c.in.code, c.err = codes[i], nil
	}
	if err == nil {
		e.metrics.acked(ns, q, qn, batch, e.now())
		if e.hist != nil {
			var n int64
			for _, c := range batch {
				if c.in.code == 1 {
					n++
				}
			}
			e.histAdd(ns, q, qn, hAcked, n)
		}
	}
}

// releaseOutcome is the history's letter for how a release ends its
// delivery: w a webhook's failure, r handed back keeping the try, n
// nacked (the try spent).
func releaseOutcome(r *engine.ReleaseRequest) string {
	switch {
	case r.Reason == engine.ReasonWebhookFailed:
		return "w"
	case r.KeepTry:
		return "r"
	}
	return "n"
}

// Release implements engine.Extensions.
func (e *Engine) Release(ctx context.Context, r *engine.ReleaseRequest) error {
	if err := checkNames(r.Namespace, r.Queue); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if sp := e.shardsOf(r.Namespace, r.Queue); sp != nil {
		_, err := byID(sp, r.ID, func(n string) (struct{}, error) {
			c := *r
			c.Queue = n
			return struct{}{}, e.Release(ctx, &c)
		})
		return err
	}
	nonce, err := decodeReceipt(r.Receipt)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if r.Delay < 0 {
		return fmt.Errorf("release: negative delay: %w", engine.ErrInvalid)
	}
	delay := durMS(r.Delay)
	if r.UsePolicy {
		delay = -1
	}
	keep := "0"
	if r.KeepTry {
		keep = "1"
	}
	reason := r.Reason
	if reason == "" {
		reason = engine.ReasonNacked
	}
	ns, q := r.Namespace, r.Queue
	qn := e.names.get([3]string{ns, q})
	keys := []string{qn.jobPrefix + r.ID, qn.timer, qn.ready, qn.prio, qn.config, qn.dead, qn.index}
	errText, _ := engine.ErrorText(r.Error)
	code, err := e.run(ctx, releaseScript, keys, r.ID, nonce, ceilMS(e.now()), delay, keep, reasonCode(reason),
		strconv.FormatFloat(rand.Float64(), 'f', 6, 64), qn.member, qn.channel, qn.wake, e.pub,
		releaseOutcome(r), errText).Int64()
	if err != nil {
		return fmt.Errorf("release %s/%s/%s: %w", ns, q, r.ID, err)
	}
	if code == 3 {
		e.wakePump()
	}
	switch code {
	case 1, 3:
		e.histAdd(ns, q, nil, hRetried, 1)
	case 2:
		e.histAdd(ns, q, nil, hDead, 1)
	}
	return receiptResult("release", ns, q, r.ID, code)
}

// Touch implements engine.Extensions.
func (e *Engine) Touch(ctx context.Context, ns, q, id, receipt string, ttr time.Duration) (time.Time, error) {
	if err := checkNames(ns, q); err != nil {
		return time.Time{}, fmt.Errorf("touch: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return byID(sp, id, func(n string) (time.Time, error) { return e.Touch(ctx, ns, n, id, receipt, ttr) })
	}
	nonce, err := decodeReceipt(receipt)
	if err != nil {
		return time.Time{}, fmt.Errorf("touch: %w", err)
	}
	if ttr < 0 {
		return time.Time{}, fmt.Errorf("touch: negative ttr: %w", engine.ErrInvalid)
	}
	due := ceilMS(e.now()) + durMS(ttr)
	qn := e.names.get([3]string{ns, q})
	code, err := e.run(ctx, touchScript, []string{qn.jobPrefix + id, qn.timer, qn.index},
		id, nonce, due, qn.member, qn.wake, e.pub).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("touch %s/%s/%s: %w", ns, q, id, err)
	}
	if err := receiptResult("touch", ns, q, id, code); err != nil {
		return time.Time{}, err
	}
	e.wakePump()
	return time.UnixMilli(due), nil
}

// CancelKey implements engine.Extensions.
func (e *Engine) CancelKey(ctx context.Context, ns, q, key string) (string, error) {
	if err := checkNames(ns, q); err != nil {
		return "", fmt.Errorf("cancel: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.cancelKeySharded(ctx, sp, ns, q, key)
	}
	qn := e.names.get([3]string{ns, q})
	id, err := e.run(ctx, cancelKeyScript, []string{uniqueKey(ns, q, key), qn.timer, qn.jobPrefix, qn.usage, qn.config},
		e.pub, qn.argChannel).Text()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("cancel %s/%s key %q: %w", ns, q, key, engine.ErrJobNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("cancel %s/%s key %q: %w", ns, q, key, err)
	}
	return id, nil
}

// luaBackoff is a policy in the form the scripts read (scripts.go).
func luaBackoff(b *engine.Backoff) string {
	if b == nil {
		return ""
	}
	switch b.Kind {
	case "fixed":
		return "f:" + strconv.FormatInt(durMS(b.Base), 10)
	case "exponential":
		return fmt.Sprintf("e:%d:%g:%d:%g", durMS(b.Base), b.Factor, durMS(b.Max), b.Jitter)
	default:
		parts := make([]string, len(b.Steps))
		for i, d := range b.Steps {
			parts[i] = strconv.FormatInt(durMS(d), 10)
		}
		return "l:" + strings.Join(parts, ",")
	}
}

// QueueConfig implements engine.Extensions.
func (e *Engine) QueueConfig(ctx context.Context, ns, q string) (engine.QueueConfig, error) {
	var cfg engine.QueueConfig
	if err := checkNames(ns, q); err != nil {
		return cfg, fmt.Errorf("queue config: %w", err)
	}
	// The whole hash: it holds the group weights (w:G) beside the rest,
	// a few fields in all.
	h, err := retried(ctx, e, func() *redis.MapStringStringCmd {
		return e.rdb.HGetAll(ctx, configKey(ns, q))
	}).Result()
	if err != nil {
		return cfg, fmt.Errorf("queue config %s/%s: %w", ns, q, err)
	}
	if s := h["backoff_text"]; s != "" {
		if cfg.Backoff, err = engine.ParseBackoff(s); err != nil {
			return cfg, fmt.Errorf("queue config %s/%s: stored backoff: %w", ns, q, err)
		}
	}
	if s, ok := h["dead_ttl"]; ok {
		ms, _ := strconv.ParseInt(s, 10, 64)
		cfg.DeadTTL = time.Duration(ms) * time.Millisecond
	}
	cfg.Paused = h["paused"] == "1"
	readLimits(h, &cfg)
	if isShardName(q) {
		return cfg, nil
	}
	sp, err := e.readShards(ctx, ns, q)
	if err != nil {
		return cfg, fmt.Errorf("queue config %s/%s: %w", ns, q, err)
	}
	cfg.Shards = sp.k
	return cfg, nil
}

// SetQueueConfig implements engine.Extensions.
func (e *Engine) SetQueueConfig(ctx context.Context, ns, q string, cfg engine.QueueConfig) error {
	if err := checkNames(ns, q); err != nil {
		return fmt.Errorf("queue config: %w", err)
	}
	if cfg.DeadTTL < 0 {
		return fmt.Errorf("queue config: negative dead ttl: %w", engine.ErrInvalid)
	}
	if cfg.Shards < 0 || cfg.Shards > engine.MaxShards {
		return fmt.Errorf("queue config: shards must be 1..%d: %w", engine.MaxShards, engine.ErrInvalid)
	}
	if err := checkLimits(cfg); err != nil {
		return err
	}
	if isShardName(q) {
		return e.setShardConfig(ctx, ns, q, cfg, cfg.MaxInFlight)
	}
	// Every shard the queue may have (all of its span, and the new K's)
	// gets the settings before a new K takes effect, as the scripts read
	// them from the shard's own config key.
	for attempt := 0; ; attempt++ {
		sp, err := e.readShards(ctx, ns, q)
		if err != nil {
			return fmt.Errorf("queue config %s/%s: %w", ns, q, err)
		}
		k := sp.k
		if cfg.Shards > 0 {
			k = cfg.Shards
		}
		if cfg.MaxInFlight > 0 && cfg.MaxInFlight < k {
			return fmt.Errorf("queue config: max_in_flight must be at least the queue's shards (%d): %w", k, engine.ErrInvalid)
		}
		for i := range max(sp.span, k) {
			sc := cfg
			sc.MaxInFlight = shardLimit(cfg.MaxInFlight, k, i)
			if err := e.setShardConfig(ctx, ns, shardName(q, i), sc, cfg.MaxInFlight); err != nil {
				return err
			}
		}
		if k == sp.k {
			e.loadShards(ctx, e.shards.m.Load())
			return nil
		}
		err = e.setShards(ctx, ns, q, sp, k)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errShardsRace) || attempt >= 3 {
			return fmt.Errorf("queue config %s/%s: %w", ns, q, err)
		}
	}
}

// setShardConfig writes the settings of cfg but its shards to the config
// key of physical queue q (a shard, or q itself); cfg.MaxInFlight is this
// physical queue's part of the queue's max_in_flight mifq (shardLimit).
func (e *Engine) setShardConfig(ctx context.Context, ns, q string, cfg engine.QueueConfig, mifq int) error {
	k := configKey(ns, q)
	var ready, prio *redis.IntCmd
	limits := limitArgs(cfg, mifq)
	var tracked *redis.Cmd
	cmds, err := e.txPipelined(ctx, func(p redis.Pipeliner) error {
		gp := groupKeyPrefix(ns, q)
		tracked = p.EvalSha(ctx, setLimitsScript.Hash(), []string{k, gp + "i", gp + "c"}, limits...)
		if cfg.Backoff != nil {
			p.HSet(ctx, k, "backoff", luaBackoff(cfg.Backoff), "backoff_text", cfg.Backoff.String())
		} else {
			p.HDel(ctx, k, "backoff", "backoff_text")
		}
		if cfg.DeadTTL > 0 {
			p.HSet(ctx, k, "dead_ttl", durMS(cfg.DeadTTL))
		} else {
			p.HDel(ctx, k, "dead_ttl")
		}
		if cfg.Paused {
			p.HSet(ctx, k, "paused", "1")
		} else {
			p.HDel(ctx, k, "paused")
			ready = p.LLen(ctx, readyKey(ns, q))
			prio = p.ZCard(ctx, prioKey(ns, q))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue config %s/%s: %w", ns, q, execAbortCause(cmds, err))
	}
	if n, _ := tracked.Int64(); n == 2 {
		// Limited from now on: the jobs already in flight count too.
		if err := e.recordInFlight(ctx, ns, q); err != nil {
			return err
		}
	}
	if err := e.unblockGroups(ctx, ns, q); err != nil {
		return err
	}
	if !cfg.Paused {
		// Consumers waiting on a resumed queue must look again: as many
		// as there were ready jobs when it resumed (jobs made ready since
		// send their own message), and at least one, as the message also
		// tells the servers that the queue is no longer known empty.
		n := max(ready.Val()+prio.Val(), 1)
		if err := e.publishMsg(ctx, readyChannel(ns, q), n); err != nil {
			e.log.WithError(err).Warn("resume: wake-up not published; waiting consumers look at the next sweep")
		}
	}
	return nil
}

// ListDeadLetter implements engine.Extensions.
func (e *Engine) ListDeadLetter(ctx context.Context, ns, q string, offset, limit int64) ([]*engine.Job, error) {
	if err := checkNames(ns, q); err != nil {
		return nil, fmt.Errorf("list dead letter: %w", err)
	}
	if offset < 0 || limit < 1 || limit > 1000 {
		return nil, fmt.Errorf("list dead letter: %w", engine.ErrInvalid)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.listDeadLetterSharded(ctx, sp, ns, offset, limit)
	}
	res, err := e.run(ctx, listDeadScript, []string{deadKey(ns, q), jobKeyPrefix(ns, q)}, offset, limit).Slice()
	if err != nil {
		return nil, fmt.Errorf("list dead letter %s/%s: %w", ns, q, err)
	}
	now := e.now()
	jobs := make([]*engine.Job, 0, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		id, _ := res[i].(string)
		v, _ := res[i+1].(string)
		pttl, _ := res[i+2].(int64)
		j, err := makeStoredJob(ns, q, id, []byte(v), pttl, now)
		if err != nil {
			e.log.WithError(err).WithField("job_id", id).Warn("list dead letter: undecodable job")
			continue
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// ListDeadLetterPage implements engine.Extensions.
func (e *Engine) ListDeadLetterPage(ctx context.Context, ns, q string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
	if err := checkNames(ns, q); err != nil {
		return engine.DeadLetterPage{}, fmt.Errorf("list dead letter: %w", err)
	}
	if !dq.Valid() {
		return engine.DeadLetterPage{}, fmt.Errorf("list dead letter: %w", engine.ErrInvalid)
	}
	if dq.Scan <= 0 || dq.Scan > engine.MaxDeadScan {
		dq.Scan = engine.MaxDeadScan
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.listDeadLetterPageSharded(ctx, sp, ns, dq)
	}
	code, newest := 0, "0"
	if dq.Reason != "" {
		code = reasonCode(dq.Reason)
	}
	if dq.Newest {
		newest = "1"
	}
	res, err := e.run(ctx, listDeadPageScript, []string{deadKey(ns, q), jobKeyPrefix(ns, q)}, dq.Offset, dq.Limit, newest, code, dq.Scan, dq.Error).Slice()
	if err != nil || len(res) < 2 {
		return engine.DeadLetterPage{}, fmt.Errorf("list dead letter %s/%s: %w", ns, q, err)
	}
	out := engine.DeadLetterPage{}
	out.Size, _ = res[0].(int64)
	out.Next, _ = res[1].(int64)
	now := e.now()
	out.Jobs = make([]*engine.Job, 0, (len(res)-2)/4)
	for i := 2; i+3 < len(res); i += 4 {
		id, _ := res[i].(string)
		v, _ := res[i+1].(string)
		pttl, _ := res[i+2].(int64)
		j, err := makeStoredJob(ns, q, id, []byte(v), pttl, now)
		if err != nil {
			e.log.WithError(err).WithField("job_id", id).Warn("list dead letter: undecodable job")
			continue
		}
		j.LastError, _ = res[i+3].(string)
		out.Jobs = append(out.Jobs, j)
	}
	return out, nil
}

// RespawnDeadJob implements engine.Extensions.
func (e *Engine) RespawnDeadJob(ctx context.Context, ns, q, id string, ttl time.Duration) error {
	if err := checkNames(ns, q); err != nil {
		return fmt.Errorf("respawn: %w", err)
	}
	if ttl < 0 {
		return fmt.Errorf("respawn: negative ttl: %w", engine.ErrInvalid)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		_, err := byID(sp, id, func(n string) (struct{}, error) { return struct{}{}, e.RespawnDeadJob(ctx, ns, n, id, ttl) })
		return err
	}
	keys := []string{jobKey(ns, q, id), deadKey(ns, q), readyKey(ns, q), prioKey(ns, q), configKey(ns, q)}
	code, err := e.run(ctx, respawnOneScript, keys, id, durMS(ttl), readyChannel(ns, q), e.pub).Int64()
	if err != nil {
		return fmt.Errorf("respawn %s/%s/%s: %w", ns, q, id, err)
	}
	if code == 1 {
		e.metrics.respawned(1)
	}
	return receiptResult("respawn", ns, q, id, code)
}

// DeleteDeadJob implements engine.Extensions.
func (e *Engine) DeleteDeadJob(ctx context.Context, ns, q, id string) error {
	if err := checkNames(ns, q); err != nil {
		return fmt.Errorf("delete dead job: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		_, err := byID(sp, id, func(n string) (struct{}, error) { return struct{}{}, e.DeleteDeadJob(ctx, ns, n, id) })
		return err
	}
	code, err := e.run(ctx, deleteDeadOneScript, []string{jobKey(ns, q, id), deadKey(ns, q), usageKey(slotGroup(ns, q))}, id).Int64()
	if err != nil {
		return fmt.Errorf("delete dead job %s/%s/%s: %w", ns, q, id, err)
	}
	return receiptResult("delete dead job", ns, q, id, code)
}

// execAbortCause returns, for the EXECABORT of a MULTI/EXEC whose queued
// command Redis refused (LOADING, READONLY, OOM, MASTERDOWN...), that
// refusal, which says why (an outage the server answers 503, or a full
// Redis: 507), and any
// other err unchanged.
func execAbortCause(cmds []redis.Cmder, err error) error {
	if err == nil || !redis.IsExecAbortError(err) {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !redis.IsExecAbortError(e) {
			return e
		}
	}
	return err
}
