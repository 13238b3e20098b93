package auth

import (
	"context"

	"github.com/redis/go-redis/v9"
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
