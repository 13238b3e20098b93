package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/redisretry"
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
// have run, so it is not retried here. The server's clients do not
// re-send it either (redisretry.Dialer: the caller gets a
// redisretry.LostError, a 503). go-redis's own dialer does, and the
// scripts are written for that: a publish finds its own job key (SET NX,
// ownEarlierWrite) and reports success, a consume takes other jobs while
// those of the lost reply come back after their TTR, an ACK or a nack with
// a receipt finds the job gone or the receipt spent.)
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
// answers before running a command (redisretry.Refused, shared with the
// token store and the throttler of the admin Redis).
func clusterRetryable(err error) bool { return redisretry.Refused(err) }

// runRetry runs script s (EVALSHA, then EVAL on NOSCRIPT: go-redis's
// Script.Run, which a cluster client sends to the node of the keys' slot)
// and, while it fails with a clusterRetryable error, runs it again with a
// growing pause (10 ms to 250 ms), for at most limit in all (0: no retry).
func runRetry(ctx context.Context, c redis.Scripter, s *redis.Script, limit time.Duration, keys []string, args ...interface{}) *redis.Cmd {
	var cmd *redis.Cmd
	_ = redisretry.Do(ctx, limit, clusterRetryable, func() error {
		cmd = s.Run(ctx, c, keys, args...)
		return cmd.Err()
	})
	return cmd
}

// run runs script s in its own round trip, retrying cluster errors
// (runRetry) on a cluster.
func (e *Engine) run(ctx context.Context, s *redis.Script, keys []string, args ...interface{}) *redis.Cmd {
	return runRetry(ctx, e.rdb, s, e.retryFor, keys, args...)
}

// The same holds for the engine's plain commands and pipelines (sizes,
// dead letters, the dashboard's and the history's reads and the history's
// HINCRBY flush, the registries, the shards hash): go-redis follows a
// pipeline's MOVED and ASK per command, but only MaxRedirects times, and
// retries TRYAGAIN or CLUSTERDOWN only when the first command of a node's
// batch got it. So the engine sends again, within Options.ClusterRetry,
// the commands of a pipeline that a cluster refused (clusterRetryable),
// and only those: the others ran and are not sent twice (a flush's
// HINCRBY that got MOVED did not run anywhere; the one beside it that ran
// is not repeated).

// retryCmds sends again, with a growing pause (as runRetry), the commands
// of cmds (a pipeline's, already sent) that failed with a
// clusterRetryable error, in one pipeline per pass, for at most limit in
// all, and returns the first error among cmds afterwards (as go-redis's
// Pipelined does: redis.Nil included): redisretry.Cmds.
func retryCmds(ctx context.Context, c redis.UniversalClient, limit time.Duration, cmds []redis.Cmder) error {
	return redisretry.Cmds(ctx, c, limit, clusterRetryable, cmds)
}

// firstErr is the first error among cmds.
func firstErr(cmds []redis.Cmder) error { return redisretry.FirstErr(cmds) }

// pipelined is e.rdb.Pipelined with the commands a cluster refused sent
// again (retryCmds).
func (e *Engine) pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	cmds, err := e.rdb.Pipelined(ctx, fn)
	if e.retryFor <= 0 || len(cmds) == 0 {
		return cmds, err
	}
	return cmds, retryCmds(ctx, e.rdb, e.retryFor, cmds)
}

// exec is p.Exec (p a pipeline of e.rdb) with the commands a cluster
// refused sent again (retryCmds).
func (e *Engine) exec(ctx context.Context, p redis.Pipeliner) ([]redis.Cmder, error) {
	cmds, err := p.Exec(ctx)
	if e.retryFor <= 0 || len(cmds) == 0 {
		return cmds, err
	}
	return cmds, retryCmds(ctx, e.rdb, e.retryFor, cmds)
}

// txPipelined is e.rdb.TxPipelined run again while a cluster refused it:
// a transaction refused when a command was queued (MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN: EXECABORT) ran none of its commands.
func (e *Engine) txPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	var cmds []redis.Cmder
	var err error
	_ = e.retryErr(ctx, func() error {
		cmds, err = e.rdb.TxPipelined(ctx, fn)
		return execAbortCause(cmds, err)
	})
	return cmds, err
}

// retryErr runs try, a command that fails with a clusterRetryable error
// only when it did not run, and runs it again while it does, as runRetry.
func (e *Engine) retryErr(ctx context.Context, try func() error) error {
	return redisretry.Do(ctx, e.retryFor, clusterRetryable, try)
}

// retried runs the single command that do sends (and returns) and sends
// it again while a cluster refuses it (retryErr).
func retried[C redis.Cmder](ctx context.Context, e *Engine, do func() C) C {
	var cmd C
	_ = e.retryErr(ctx, func() error {
		cmd = do()
		return cmd.Err()
	})
	return cmd
}
