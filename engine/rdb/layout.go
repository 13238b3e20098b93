package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The layout version marker. Every pool an engine has served holds the
// string key kairos/layout with the number of the key layout it wrote
// (doc/keys.md, doc/upgrade.md). An engine refuses a pool whose marker is
// higher than its own LayoutVersion: a server of an older version would
// otherwise misread keys it does not know (as the engine before slot
// groups would have read none of the slot-group layout's jobs). A pool
// without the marker is either new, or was written before the marker
// existed (layout 1, before slot groups, or layout 2 by a server of the
// releases before the marker): New moves layout 1's queues and then writes
// the marker.

// LayoutVersion is the key layout this engine reads and writes:
//
//	1  queues tagged {ns/q}, one timer_index (Kairos before issue #22)
//	2  64 slot groups (doc/keys.md), the marker kairos/layout
//
// A change of the layout that an older server would misread increments
// it, and doc/upgrade.md says what the upgrade needs.
const LayoutVersion = 2

// layoutKey is the pool's layout version marker (a plain key, in no slot
// group: read once at start).
const layoutKey = "kairos/layout"

// ErrNewerLayout is returned by New (wrapped in a *LayoutError) for a pool
// written by a newer Kairos.
var ErrNewerLayout = errors.New("rdb: the pool holds a newer key layout")

// LayoutError names the layout a pool holds and the one this engine knows.
type LayoutError struct {
	Pool          string
	Found, Served int
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("pool %s holds Kairos's key layout %d (%s = %d), newer than layout %d of this server: "+
		"run a Kairos version that serves layout %d (doc/upgrade.md); this server changed nothing",
		e.Pool, e.Found, layoutKey, e.Found, e.Served, e.Found)
}

// Unwrap makes errors.Is(err, ErrNewerLayout) true.
func (e *LayoutError) Unwrap() error { return ErrNewerLayout }

// ReadLayout returns the layout version marker of the pool behind client:
// 0 when it has none (a new pool, or one written before the marker).
func ReadLayout(ctx context.Context, client redis.UniversalClient) (int, error) {
	v, err := client.Get(ctx, layoutKey).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s holds %q, not a layout version", layoutKey, v)
	}
	return n, nil
}

// checkLayout refuses a newer layout, moves layout 1's queues when the
// pool has no marker, and writes the marker. It returns the queues moved.
func (e *Engine) checkLayout(ctx context.Context) (int, error) {
	v, err := ReadLayout(ctx, e.rdb)
	if err != nil {
		return 0, err
	}
	switch {
	case v > LayoutVersion:
		return 0, &LayoutError{Pool: e.pool, Found: v, Served: LayoutVersion}
	case v == LayoutVersion:
		return 0, nil
	}
	n, err := e.upgrade(ctx)
	if err != nil {
		return n, err
	}
	// Raised, never lowered: a newer server that wrote its marker since
	// the GET above keeps it, and this one refuses it.
	got, err := markLayoutScript.Run(ctx, e.rdb, []string{layoutKey}, LayoutVersion).Int()
	if err != nil {
		return n, err
	}
	if got > LayoutVersion {
		return n, &LayoutError{Pool: e.pool, Found: got, Served: LayoutVersion}
	}
	return n, nil
}

// markLayoutScript raises the layout marker to ARGV[1] unless it is
// higher already.
//
//	KEYS[1] kairos/layout   ARGV[1] this engine's layout version
//
// Returns the marker's value after the call.
var markLayoutScript = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local want = tonumber(ARGV[1])
if v >= want then return v end
redis.call('SET', KEYS[1], ARGV[1])
return want
`)
