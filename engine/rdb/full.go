package rdb

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// A full pool: a Redis at maxmemory under the noeviction policy refuses
// the commands that may grow memory (SET, LPUSH, ZADD, ...: "denyoom")
// with an error that starts with "OOM ", and keeps serving the others
// (reads, DEL, LREM, ZREM, ...).
//
// That is not an outage: the same publish fails until consumers make
// room, so a publish refused for memory returns engine.ErrPoolFull
// naming the pool (fullOn), which the server answers 507 rather than the
// 503 "retry later" of an outage.
//
// A script without a shebang (all of Kairos's) is checked command by
// command: a denyoom command is refused only while the script has written
// nothing yet (Redis 7's scriptVerifyOOM), and once it wrote, the rest of
// it runs. So no script stops half way for memory: a publish, whose first
// write is its SET NX of the job (or of its key), is refused whole, and
// the drain side (consume, ACK, release, delete, dead-letter delete),
// whose first writes take a job out of a list or an index, runs to the
// end, its ZADD of the in-flight timer included, which frees more than it
// takes. TestFullPoolDrains holds both on a real redis-server.

// isOOM reports whether err is Redis's refusal of a write for memory.
func isOOM(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "OOM ")
}

// fullOn turns *err, when Redis refused it for memory, into an
// engine.PoolFullError for this pool; a publish method defers it.
func (e *Engine) fullOn(err *error) {
	if isOOM(*err) && !errors.Is(*err, engine.ErrPoolFull) {
		*err = &engine.PoolFullError{Pool: e.pool, Err: *err}
	}
}

// fullOnEach is fullOn for each of errs.
func (e *Engine) fullOnEach(errs []error) {
	for i := range errs {
		e.fullOn(&errs[i])
	}
}
