package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// ErrInvalid is matched (with errors.Is) by every error about the content
// of a configuration: each *ValidationError and each *DecodeError.
var ErrInvalid = errors.New("config: invalid")

// maxSeconds is the largest value of a *Second key: the HTTP API carries
// these values as uint32 (lmstfy parses its defaults the same way).
const maxSeconds = math.MaxUint32

// ValidationError is one problem found by Validate: the key it concerns
// (dotted, as in the file: "Port", "Pool.b.DB", "Kairos.PumpBatch") and why
// its value is refused.
type ValidationError struct {
	Key    string
	Reason string
}

// Error returns "Key: reason".
func (e *ValidationError) Error() string { return e.Key + ": " + e.Reason }

// Is makes every ValidationError match ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Problems returns every *ValidationError inside err (as returned by
// Validate, Load or LoadWithWarnings), in order; nil when there is none.
func Problems(err error) []*ValidationError {
	var out []*ValidationError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *ValidationError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// problems collects ValidationErrors in the order the checks run.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, &ValidationError{Key: key, Reason: fmt.Sprintf(format, args...)})
}

// Validate checks the whole configuration and returns every problem found,
// joined with errors.Join, each a *ValidationError naming its key; nil when
// the configuration is usable. Pools with a non-empty Version are ignored
// (as lmstfy does). The Redis sections are checked as by ValidateStores.
func (c *Config) Validate() error {
	var p problems

	c.validateListeners(&p)

	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		p.add("LogLevel", "unknown level %q (want one of trace, debug, info, warn, error, fatal, panic)", c.LogLevel)
	}
	switch c.LogFormat {
	case "", "text", "json":
	default:
		p.add("LogFormat", `must be "" or "json" (or "text", the same as ""), not %q`, c.LogFormat)
	}

	c.validateStores(&p)
	c.validateDefaults(&p)
	c.validateKairos(&p)
	c.validateTLS(&p)
	c.validateAccounts(&p)
	if r := c.Dashboard.RefreshSecond; r < 1 || r > 3600 {
		p.add("Dashboard.RefreshSecond", "must be in [1, 3600], not %d", r)
	}

	return errors.Join(p...)
}

// embeddedHint ends the error of a section without Addr.
const embeddedHint = "set it, or [Kairos] Embedded = true for an in-memory store that loses everything on stop"

// ValidateStores checks the Redis sections alone (AdminRedis, the pools,
// Embedded against RequireDurableRedis), as Validate does, and returns
// every problem joined, each a *ValidationError. It is what decides
// whether a Redis is real or the embedded in-memory store, and app.New
// runs it on configurations built in code (which skip the listener checks
// of Validate), so that no path reaches the embedded store without
// [Kairos] Embedded = true.
func (c *Config) ValidateStores() error {
	var p problems
	c.validateStores(&p)
	return errors.Join(p...)
}

func (c *Config) validateStores(p *problems) {
	validateAdminReserve(p, c.AdminRedis)
	c.validateRedis(p, "AdminRedis", c.AdminRedis)
	if c.AdminRedis.LmstfyData != "" {
		p.add("AdminRedis.LmstfyData", "is a pool setting: lmstfy's tokens and limits in the admin Redis are read as they are")
	}
	validateAdminQuota(p, c.AdminRedis)
	c.validatePools(p)
	if c.Kairos.Embedded && c.Kairos.RequireDurableRedis {
		p.add("Kairos.Embedded", "cannot be combined with RequireDurableRedis = true: the embedded store is in memory and loses everything on stop")
	}
}

func (c *Config) validateListeners(p *problems) {
	validateHost(p, "Host", c.Host, "Port")
	validateHost(p, "AdminHost", c.AdminHost, "AdminPort")
	if c.Port < 1 || c.Port > 65535 {
		p.add("Port", "must be 1..65535, not %d", c.Port)
	}
	switch {
	case c.AdminPort == 0:
		p.add("AdminPort", "is required (1..65535)")
	case c.AdminPort < 0 || c.AdminPort > 65535:
		p.add("AdminPort", "must be 1..65535, not %d", c.AdminPort)
	case c.AdminPort == c.Port && hostsOverlap(c.Host, c.AdminHost):
		p.add("AdminPort", "must differ from Port (both are %d on overlapping hosts)", c.Port)
	}
}

func validateHost(p *problems, key, host, portKey string) {
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		p.add(key, "must be a host name or IP address without a port (set %s), not %q", portKey, host)
	}
}

// hostsOverlap reports whether two bind hosts may share addresses.
func hostsOverlap(a, b string) bool {
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return a == b || wildcard(a) || wildcard(b)
}

func (c *Config) validatePools(p *problems) {
	active := c.activePools()
	if _, ok := active[DefaultPoolName]; !ok {
		key := "Pool." + DefaultPoolName
		switch _, legacy := c.Pool[DefaultPoolName]; {
		case legacy:
			p.add(key, "is required, and ignored because its Version is set (lmstfy ignores such pools too)")
		default:
			reason := `is required: add a [Pool.default] table with Addr = "host:port"`
			if other := c.caseVariant(DefaultPoolName); other != "" {
				reason += fmt.Sprintf(" (Pool.%s is another pool: pool names are case-sensitive)", other)
			}
			p.add(key, "%s", reason)
		}
	}
	names := make([]string, 0, len(active))
	for name := range active {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pool := active[name]
		key := "Pool." + name
		validateReserve(p, key, pool)
		if !engine.ValidName(name) {
			key = "Pool." + strconv.Quote(name)
			p.add(key, "invalid pool name: want 1..%d characters of [-_A-Za-z0-9]", engine.MaxNameLength)
		}
		c.validateRedis(p, key, pool)
		validateDefaultQuota(p, key, pool)
		switch pool.LmstfyData {
		case "", LmstfyRefuse:
		case LmstfyImport:
			if pool.IsCluster() {
				p.add(key+".LmstfyData", "a Redis Cluster cannot hold lmstfy's data (lmstfy runs on one Redis): set it on lmstfy's standalone or Sentinel pool, with MigrateTo naming this one to import into it")
			}
		default:
			p.add(key+".LmstfyData", "must be %q (the default: refuse to start on lmstfy's data) or %q (move lmstfy's jobs into Kairos's layout at start), not %q", LmstfyRefuse, LmstfyImport, pool.LmstfyData)
		}
		switch to := pool.MigrateTo; {
		case to == "":
		case to == name:
			p.add(key+".MigrateTo", "must not name the pool itself")
		default:
			if _, ok := active[to]; !ok {
				p.add(key+".MigrateTo", "unknown pool %q", to)
			}
		}
	}
}

// caseVariant returns the name of a pool that spells name in another case,
// or "".
func (c *Config) caseVariant(name string) string {
	for other := range c.Pool {
		if other != name && strings.EqualFold(other, name) {
			return other
		}
	}
	return ""
}

// validateRedis checks one Redis section; key is its dotted prefix.
func (c *Config) validateRedis(p *problems, key string, r RedisConf) {
	if r.DB < 0 {
		p.add(key+".DB", "must be >= 0, not %d", r.DB)
	}
	if r.PoolSize < 0 {
		p.add(key+".PoolSize", "must be >= 0 (0 picks the default), not %d", r.PoolSize)
	}
	if r.WaitReplicas < 0 {
		p.add(key+".WaitReplicas", "must be >= 0 (0 does not wait), not %d", r.WaitReplicas)
	}
	if r.WaitTimeoutMs < 0 {
		p.add(key+".WaitTimeoutMs", "must be >= 0 (0 means 100), not %d", r.WaitTimeoutMs)
	}
	if r.Addrs != nil && !r.IsCluster() {
		hint := "a plain Redis takes one host:port in Addr"
		if r.IsSentinel() {
			hint = "list the Sentinels in Addr"
		}
		p.add(key+".Addrs", "needs Cluster = true (it lists the seed nodes of a Redis Cluster); %s", hint)
		return
	}
	if r.IsCluster() {
		if r.IsSentinel() {
			p.add(key+".Cluster", "cannot be combined with MasterName (Sentinel): a Redis Cluster fails over by itself; remove one of them")
		}
		if r.DB != 0 {
			p.add(key+".DB", "must be 0 with Cluster = true (a Redis Cluster has one database), not %d", r.DB)
		}
		if strings.TrimSpace(r.Addr) != "" && r.Addrs != nil {
			p.add(key+".Addrs", "set the seed nodes in Addrs or in Addr, not both")
		}
	}
	if !r.HasAddr() {
		switch {
		case r.IsCluster() && r.Addrs != nil:
			p.add(key+".Addrs", `is empty: list the cluster's seed nodes, e.g. Addrs = ["10.0.0.1:7000", "10.0.0.2:7000"]`)
		case r.IsCluster():
			p.add(key+".Addrs", `is required with Cluster = true: list the cluster's seed nodes, e.g. Addrs = ["10.0.0.1:7000", "10.0.0.2:7000"] (the embedded store is not a cluster)`)
		case r.IsSentinel():
			p.add(key+".MasterName", "needs Addr (the Sentinel addresses)")
		case !c.Kairos.Embedded:
			p.add(key+".Addr", "is required (%s)", embeddedHint)
		}
		return
	}
	if r.Addrs == nil {
		addrs := r.Endpoints()
		if len(addrs) == 0 {
			p.add(key+".Addr", "no address in %q", r.Addr)
			return
		}
		if len(addrs) > 1 && !r.IsSentinel() && !r.IsCluster() {
			p.add(key+".Addr", "a list of addresses needs MasterName (Sentinel) or Cluster = true; a plain Redis takes one host:port")
		}
		for _, a := range addrs {
			if err := checkHostPort(a); err != nil {
				p.add(key+".Addr", "%q: %v", a, err)
			}
		}
		return
	}
	for i, a := range r.Addrs {
		if err := checkHostPort(strings.TrimSpace(a)); err != nil {
			p.add(fmt.Sprintf("%s.Addrs[%d]", key, i), "%q: %v", a, err)
		}
	}
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if host == "" {
		return errors.New("want host:port (the host is empty)")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return errors.New("the port must be 1..65535")
	}
	return nil
}

func (c *Config) validateDefaults(p *problems) {
	if c.TriesNum < 1 || c.TriesNum > engine.MaxTries {
		p.add("TriesNum", "must be 1..%d, not %d", engine.MaxTries, c.TriesNum)
	}
	for _, s := range []struct {
		key string
		v   int
	}{
		{"TTLSecond", c.TTLSecond},
		{"DelaySecond", c.DelaySecond},
		{"TTRSecond", c.TTRSecond},
		{"TimeoutSecond", c.TimeoutSecond},
	} {
		validateSeconds(p, s.key, s.v, 0)
	}
	if c.TTLSecond > 0 && c.DelaySecond > c.TTLSecond {
		p.add("DelaySecond", "must not exceed TTLSecond (%d) unless TTLSecond is 0: every publish without ttl and delay would be refused", c.TTLSecond)
	}
}

// validateSeconds checks a second-valued key against min..maxSeconds.
func validateSeconds(p *problems, key string, v, min int) {
	switch {
	case v < min && min == 0:
		p.add(key, "must be >= 0, not %d", v)
	case v < min:
		p.add(key, "must be > 0, not %d", v)
	case int64(v) > maxSeconds:
		p.add(key, "must be <= %d, not %d", int64(maxSeconds), v)
	}
}

func (c *Config) validateKairos(p *problems) {
	k := c.Kairos
	for _, s := range []struct {
		key string
		v   int
	}{
		{"Kairos.MaxTimeoutSecond", k.MaxTimeoutSecond},
		{"Kairos.ReadTimeoutSecond", k.ReadTimeoutSecond},
		{"Kairos.WriteTimeoutSecond", k.WriteTimeoutSecond},
		{"Kairos.IdleTimeoutSecond", k.IdleTimeoutSecond},
		{"Kairos.ShutdownTimeoutSecond", k.ShutdownTimeoutSecond},
		{"Kairos.ReadHeaderTimeoutSecond", k.ReadHeaderTimeoutSecond},
	} {
		validateSeconds(p, s.key, s.v, 1)
	}
	validateSeconds(p, "Kairos.DrainDelaySecond", k.DrainDelaySecond, 0)
	if k.PumpBatch < 1 {
		p.add("Kairos.PumpBatch", "must be > 0, not %d", k.PumpBatch)
	}
	if g := k.TokenGraceOnFailureMs; g < 0 || g > MaxTokenGraceMs {
		p.add("Kairos.TokenGraceOnFailureMs", "must be in [0, %d] (0 turns the grace off), not %d", MaxTokenGraceMs, g)
	}
	if k.AuditMaxEntries < 1 || k.AuditMaxEntries > MaxAuditEntries {
		p.add("Kairos.AuditMaxEntries", "must be in [1, %d], not %d", MaxAuditEntries, k.AuditMaxEntries)
	}
	if k.MaxTimeoutSecond > 0 && k.MaxTimeoutSecond < c.TimeoutSecond {
		p.add("Kairos.MaxTimeoutSecond", "must be >= TimeoutSecond (%d), not %d", c.TimeoutSecond, k.MaxTimeoutSecond)
	}
}
