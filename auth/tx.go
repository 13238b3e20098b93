package auth

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/redisretry"
)

// txPipelined runs fn in a MULTI/EXEC like c.TxPipelined. When Redis
// refused a queued command (LOADING while it loads, READONLY on a replica,
// OOM, MASTERDOWN...), EXEC answers EXECABORT, which tells nothing of the
// cause; the error returned is then the refusal of the first refused
// command, so that the server can tell an outage (503) from a bug (500).
func txPipelined(ctx context.Context, c redis.Cmdable, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	cmds, err := c.TxPipelined(ctx, fn)
	return cmds, execAbortCause(cmds, err)
}

// execAbortCause returns, for an EXECABORT, the first error of cmds that is
// not itself EXECABORT; any other err unchanged.
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

// isCluster reports whether c is a Redis Cluster client, on which one
// command, script or MULTI/EXEC may only touch keys of one slot.
func isCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// retrier is the bounded retry (redisretry) of a cluster admin Redis; the
// zero value, for a standalone or Sentinel Redis, tries once.
type retrier struct {
	cc    *redis.ClusterClient
	limit time.Duration
}

// newRetrier returns c's retrier: limit 0 means DefaultClusterRetry,
// negative no retry.
func newRetrier(c redis.UniversalClient, limit time.Duration) retrier {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || limit < 0 {
		return retrier{}
	}
	if limit == 0 {
		limit = DefaultClusterRetry
	}
	return retrier{cc: cc, limit: limit}
}

// do runs try, and again while retryable accepts its error, within the
// limit (redisretry.Do). Before each retry it has the cluster client
// reload its slot map: after a failover, go-redis would otherwise keep
// dialling the dead master until its map is 10 s old, for nothing
// redirects it from a node that does not answer.
func (r retrier) do(ctx context.Context, retryable func(error) bool, try func() error) error {
	tried := false
	return redisretry.Do(ctx, r.limit, retryable, func() error {
		if tried {
			r.cc.ReloadState(ctx)
		}
		tried = true
		return try()
	})
}
