package config

import "math"

// The memory reserve of a pool (issue #31, doc/config.md "The memory
// reserve"): [Pool.NAME] MemoryReserve.

// DefaultMemoryReserve is the reserve of a pool that sets none: the last
// 10 % of each node's maxmemory.
const DefaultMemoryReserve = 0.10

// MaxMemoryReserve bounds MemoryReserve: a larger reserve would refuse
// the heaviest namespace with half of the pool still free.
const MaxMemoryReserve = 0.5

// Reserve is the pool's memory reserve (rdb.Options.MemoryReserve):
// MemoryReserve, or DefaultMemoryReserve when unset.
func (r RedisConf) Reserve() float64 {
	if r.MemoryReserve == nil {
		return DefaultMemoryReserve
	}
	return *r.MemoryReserve
}

// validateReserve checks a pool's MemoryReserve: a fraction from 0 (no
// reserve) to MaxMemoryReserve. A value such as 10 (meant as percent)
// would refuse every publish of the heaviest namespace: it stops the
// server instead.
func validateReserve(p *problems, key string, r RedisConf) {
	if r.MemoryReserve == nil {
		return
	}
	if v := *r.MemoryReserve; math.IsNaN(v) || v < 0 || v > MaxMemoryReserve {
		p.add(key+".MemoryReserve", "must be a fraction of maxmemory from 0 (no reserve) to %g, e.g. 0.1 for the last 10 %%, not %g", MaxMemoryReserve, v)
	}
}

// validateAdminReserve refuses a reserve on the admin Redis, which holds
// no jobs: the key was meant for a pool.
func validateAdminReserve(p *problems, r RedisConf) {
	if r.MemoryReserve != nil {
		p.add("AdminRedis.MemoryReserve", "is a pool setting: the admin Redis holds no jobs (set it in a [Pool.NAME] section)")
	}
}
