package rdb

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// On a cluster, go-redis follows MOVED and ASK redirections itself and
// retries TRYAGAIN and CLUSTERDOWN a few times (MaxRedirects, 3 by
// default: well under a second). A failover leaves a slot without a master
// for about cluster-node-timeout, and a slot migration answers TRYAGAIN to
// a script whose keys are split between two nodes until the move ends, so
// the engine retries these errors longer, within Options.ClusterRetry.
//
// go-redis gives up after MaxRedirects redirections and returns the last
// MOVED or ASK: while a slot moves the nodes disagree for a moment (a node
// that has not heard of the move yet redirects to the old owner, which
// redirects back), and a script of a slot being migrated goes from the
// source (ASK: a key is missing there) to the target, which answers
// TRYAGAIN until the move ends, and back. So MOVED and ASK are retried too,
// from the client's (reloaded) slot map.
//
// Only errors that Redis answers before running anything are retried:
// TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING, MOVED and ASK. A script that
// failed with one of them wrote nothing, so a retry never applies a job
// twice.
//
// (A script whose reply was lost to a timeout or a broken connection may
// have run; go-redis re-sends it, and the scripts are written for that: a
// publish finds its own job key (SET NX, ownEarlierWrite) and reports
// success, a consume takes other jobs while those of the lost reply come
// back after their TTR, an ACK or a nack with a receipt finds the job gone
// or the receipt spent.)
//
// A script never runs on half a slot: one whose keys are split between the
// source and the target of a migration is refused (TRYAGAIN on the source
// when some of its keys are there, ASK when none are; TRYAGAIN on the
// target while one is missing there), and the scripts that complete job
// key names (from a prefix and an ID read from a list or a timer) all have
// that prefix among their KEYS, a key that never exists, so they are
// refused for as long as the slot is migrating. Were they run, a job key
// already moved would fail the script half way ("Script attempted to
// access a non local key"), after its first writes: an entry popped, its
// job left behind.

// clusterRetryable reports whether err is a cluster error that Redis
// answers before running a command.
func clusterRetryable(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, p := range [...]string{"TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "MOVED ", "ASK "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// runRetry runs script s (EVALSHA, then EVAL on NOSCRIPT: go-redis's
// Script.Run, which a cluster client sends to the node of the keys' slot)
// and, while it fails with a clusterRetryable error, runs it again with a
// growing pause (10 ms to 250 ms), for at most limit in all (0: no retry).
func runRetry(ctx context.Context, c redis.Scripter, s *redis.Script, limit time.Duration, keys []string, args ...interface{}) *redis.Cmd {
	cmd := s.Run(ctx, c, keys, args...)
	if limit <= 0 || !clusterRetryable(cmd.Err()) {
		return cmd
	}
	deadline := time.Now().Add(limit)
	pause := 10 * time.Millisecond
	for clusterRetryable(cmd.Err()) && time.Now().Add(pause).Before(deadline) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return cmd
		case <-t.C:
		}
		pause = min(2*pause, 250*time.Millisecond)
		cmd = s.Run(ctx, c, keys, args...)
	}
	return cmd
}

// run runs script s in its own round trip, retrying cluster errors
// (runRetry) on a cluster.
func (e *Engine) run(ctx context.Context, s *redis.Script, keys []string, args ...interface{}) *redis.Cmd {
	return runRetry(ctx, e.rdb, s, e.retryFor, keys, args...)
}
