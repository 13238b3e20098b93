package rdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/kairos-dev/kairos/engine"
)

// In-flight limits and group weights in a queue's configuration (issue
// #32; the scripts in groups_scripts.go). The config hash c/{T}ns/q holds
// them as the consume script reads them: mif (this physical queue's part
// of max_in_flight), mifq (the queue's max_in_flight as set, which
// QueueConfig reports), gmif (group_max_in_flight) and w:G (group G's
// weight). A queue with mif or gmif records its jobs in flight
// (groups_scripts.go); grp = '1' (set by grouped publishes only) puts it
// through the rotation.

// maxGroupWeights bounds the weights one queue's configuration may name,
// so that writing (and reading) it stays one small step.
const maxGroupWeights = 1000

// checkLimits validates cfg's limits and weights.
func checkLimits(cfg engine.QueueConfig) error {
	if cfg.MaxInFlight < 0 {
		return fmt.Errorf("queue config: negative max_in_flight: %w", engine.ErrInvalid)
	}
	if cfg.GroupMaxInFlight < 0 {
		return fmt.Errorf("queue config: negative group_max_in_flight: %w", engine.ErrInvalid)
	}
	if len(cfg.GroupWeights) > maxGroupWeights {
		return fmt.Errorf("queue config: more than %d group weights: %w", maxGroupWeights, engine.ErrInvalid)
	}
	for g, w := range cfg.GroupWeights {
		if !engine.ValidGroup(g) {
			return fmt.Errorf("queue config: group weight for invalid group name %q: %w", g, engine.ErrInvalid)
		}
		if w < 1 || w > engine.MaxGroupWeight {
			return fmt.Errorf("queue config: weight of group %q must be 1..%d: %w", g, engine.MaxGroupWeight, engine.ErrInvalid)
		}
	}
	return nil
}

// shardLimit is shard i's part of a queue's max_in_flight limit over k
// shards: the parts of shards 0..k-1 add up to limit (the first limit%k
// get one more). A draining shard (i >= k, after the queue shrank) gets 1,
// enough to hand out its remaining jobs one at a time: while it drains the
// queue may have up to one job per draining shard beyond its limit
// (doc/design.md). 0 (no limit) stays 0.
func shardLimit(limit, k, i int) int {
	if limit <= 0 {
		return 0
	}
	if i >= k {
		return 1
	}
	n := limit / k
	if i < limit%k {
		n++
	}
	return n
}

// limitArgs are setLimitsScript's ARGV for cfg (cfg.MaxInFlight this
// physical queue's part of the queue's limit mifq).
func limitArgs(cfg engine.QueueConfig, mifq int) []interface{} {
	args := make([]interface{}, 0, 3+2*len(cfg.GroupWeights))
	args = append(args, cfg.MaxInFlight, mifq, cfg.GroupMaxInFlight)
	for g, w := range cfg.GroupWeights {
		args = append(args, g, w)
	}
	return args
}

// readLimits reads the limits and weights of config hash h into cfg.
func readLimits(h map[string]string, cfg *engine.QueueConfig) {
	atoi := func(s string) int {
		n, _ := strconv.Atoi(s)
		return max(n, 0)
	}
	if s, ok := h["mifq"]; ok {
		cfg.MaxInFlight = atoi(s)
	} else {
		cfg.MaxInFlight = atoi(h["mif"])
	}
	cfg.GroupMaxInFlight = atoi(h["gmif"])
	for f, v := range h {
		if g, ok := strings.CutPrefix(f, "w:"); ok {
			if cfg.GroupWeights == nil {
				cfg.GroupWeights = make(map[string]int)
			}
			cfg.GroupWeights[g] = atoi(v)
		}
	}
}

// unblockBatch is how many blocked groups one unblockScript call moves.
const unblockBatch = 1000

// unblockGroups puts physical queue ns/q's blocked groups back into its
// rotation after its limits were written (a raised or removed
// group_max_in_flight frees them; consume blocks again the ones still at
// the limit), a bounded batch per call.
func (e *Engine) unblockGroups(ctx context.Context, ns, q string) error {
	gp := groupKeyPrefix(ns, q)
	keys := []string{gp + "r", gp + "b", configKey(ns, q)}
	for {
		n, err := e.run(ctx, unblockScript, keys, unblockBatch).Int64()
		if err != nil {
			return fmt.Errorf("queue config %s/%s: unblock groups: %w", ns, q, err)
		}
		if n < unblockBatch {
			return nil
		}
	}
}

// recordBatch is how many timer entries one recordInFlightScript call
// looks at.
const recordBatch = 1000

// recordInFlight records the jobs in flight of physical queue ns/q, which
// has just become tracked, delivered before it was (recordInFlightScript):
// a limit set on a queue with jobs in flight counts them. It reads the
// queue's whole timer (delayed jobs too), a bounded window per call.
func (e *Engine) recordInFlight(ctx context.Context, ns, q string) error {
	keys := []string{timerKey(ns, q), jobKeyPrefix(ns, q)}
	score, member := "-inf", ""
	for {
		res, err := e.run(ctx, recordInFlightScript, keys, score, member, recordBatch).Slice()
		if err != nil || len(res) != 3 {
			return fmt.Errorf("queue config %s/%s: record the jobs in flight: %v %w", ns, q, res, err)
		}
		score, _ = res[1].(string)
		member, _ = res[2].(string)
		if score == "" {
			return nil
		}
	}
}
