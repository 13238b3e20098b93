package app

import (
	"context"
	"fmt"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/server"
)

// memoryReserve is pool name's rdb.Options.MemoryReserve: its
// [Pool.NAME] MemoryReserve, none for the embedded store (no maxmemory).
func memoryReserve(cfg *config.Config, name string) float64 {
	if cfg.UsesEmbedded(cfg.Pool[name]) {
		return 0
	}
	return cfg.Pool[name].Reserve()
}

// reserveCheck is a pool's /readyz check: check (its Redis), then, when
// that passes, whether engine e is refusing the heaviest namespaces'
// publishes for the pool's memory reserve (server.ErrReserve: still
// ready, the check reads "reserve"). A Redis at maxmemory reads "full"
// whatever the reserve.
func reserveCheck(check server.ReadyCheck, e *rdb.Engine) server.ReadyCheck {
	return server.ReadyCheck{Name: check.Name, Check: func(ctx context.Context) error {
		if err := check.Check(ctx); err != nil {
			return err
		}
		if e.InReserve() {
			return fmt.Errorf("%s: a node is in its memory reserve: %w", check.Name, server.ErrReserve)
		}
		return nil
	}}
}
