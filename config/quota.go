package config

import "github.com/kairos-dev/kairos/engine"

// The default quota of a pool's namespaces (issue #31, doc/config.md):
// [Pool.NAME] DefaultMaxJobs and DefaultMaxBytes.

// DefaultQuota is the quota of the pool's namespaces that have none of
// their own (rdb.Options.DefaultQuota); the zero Quota limits nothing.
func (r RedisConf) DefaultQuota() engine.Quota {
	return engine.Quota{MaxJobs: r.DefaultMaxJobs, MaxBytes: r.DefaultMaxBytes}
}

// validateDefaultQuota checks a pool's default quota: a negative value is
// refused rather than read as "no limit", which it would silently be.
func validateDefaultQuota(p *problems, key string, r RedisConf) {
	if r.DefaultMaxJobs < 0 {
		p.add(key+".DefaultMaxJobs", "must be >= 0 (0: no limit), not %d", r.DefaultMaxJobs)
	}
	if r.DefaultMaxBytes < 0 {
		p.add(key+".DefaultMaxBytes", "must be >= 0 (0: no limit), not %d", r.DefaultMaxBytes)
	}
}

// validateAdminQuota refuses a default quota on the admin Redis, which
// holds no jobs: the key was meant for a pool.
func validateAdminQuota(p *problems, r RedisConf) {
	const why = "is a pool setting: the admin Redis holds no jobs (set it in a [Pool.NAME] section)"
	if r.DefaultMaxJobs != 0 {
		p.add("AdminRedis.DefaultMaxJobs", why)
	}
	if r.DefaultMaxBytes != 0 {
		p.add("AdminRedis.DefaultMaxBytes", why)
	}
}
