// Package config reads Kairos's TOML configuration. An lmstfy config file
// is a valid Kairos config file: every lmstfy key keeps its name, meaning
// and default; Kairos's own keys are additions with defaults that keep
// lmstfy's behaviour.
//
// Use Load (or LoadWithWarnings, which also returns warnings such as the
// keys the file sets but neither Kairos nor lmstfy uses) to read a file;
// both start from Default and end with Validate. A mistyped key (a
// near-miss of a known key, a key in the wrong table, any unknown key in
// [Kairos]) is an error, and so is a Redis section without Addr unless
// [Kairos] Embedded asks for the in-memory store. Every such problem is a
// *ValidationError naming its key, and every error about the content of a
// file satisfies errors.Is(err, ErrInvalid).
package config

import (
	"sort"
	"strings"
	"time"
)

// DefaultPoolName is the pool every config must have (lmstfy: "default").
const DefaultPoolName = "default"

// The values of a pool's LmstfyData.
const (
	LmstfyRefuse = "refuse"
	LmstfyImport = "import"
)

// RedisConf is one Redis (or Sentinel master set, or Redis Cluster): a pool
// or the admin Redis.
type RedisConf struct {
	// Addr is host:port; for Sentinel (MasterName set) a comma-separated
	// list of Sentinel addresses; for a Redis Cluster (Cluster set) one
	// seed node, or a comma-separated list of them. It (or Addrs, for a
	// cluster) is required, unless [Kairos] Embedded is set: then a section
	// without Addr uses the embedded in-memory store (development only:
	// nothing is durable).
	Addr string `toml:"Addr"`
	// Cluster (Kairos) makes this section a Redis Cluster: Addrs (or Addr)
	// are seed nodes, from which go-redis's cluster client learns every
	// node and follows slot moves. It cannot be combined with MasterName,
	// a DB other than 0, or the embedded store.
	Cluster bool `toml:"Cluster"`
	// Addrs (Kairos) are the seed nodes of a Redis Cluster, host:port each;
	// only with Cluster = true, instead of Addr.
	Addrs    []string `toml:"Addrs"`
	Password string   `toml:"Password"`
	DB       int      `toml:"DB"`
	// PoolSize is the go-redis connection pool size; 0 picks the default.
	PoolSize         int    `toml:"PoolSize"`
	MigrateTo        string `toml:"MigrateTo"`
	MasterName       string `toml:"MasterName"`
	SentinelPassword string `toml:"SentinelPassword"`
	// WaitReplicas (Kairos) makes every publish to this pool wait until
	// that many replicas have it (Redis WAIT), for at most WaitTimeoutMs
	// (default 100); otherwise the publish answers 503 "publish not
	// replicated". 0 (the default) does not wait.
	WaitReplicas  int `toml:"WaitReplicas"`
	WaitTimeoutMs int `toml:"WaitTimeoutMs"`
	// MemoryReserve (Kairos, pools only) is the fraction of each Redis
	// node's maxmemory, 0 to 0.5, kept for the namespaces holding less
	// than their share: the others' publishes to a node that close to
	// maxmemory answer 507. nil means DefaultMemoryReserve; 0 keeps no
	// reserve. Use Reserve to read it; see reserve.go.
	MemoryReserve *float64 `toml:"MemoryReserve"`
	// LmstfyData (Kairos, pools only) says what a server does at start
	// when the pool's Redis holds lmstfy's jobs (its timer_set, ready
	// lists or dead letters, engine/lmstfy): "" or "refuse" (the default)
	// refuses to start, naming this key, and changes nothing; "import"
	// moves every lmstfy job into Kairos's layout before serving
	// (doc/upgrade.md), into the MigrateTo pool when the pool has one.
	LmstfyData string `toml:"LmstfyData"`
	// DefaultMaxJobs and DefaultMaxBytes (Kairos, pools only) are the
	// quota of the pool's namespaces that have none of their own (PUT
	// /quota/:namespace): the jobs and stored bytes a namespace may hold;
	// 0 (the default) is no limit. See quota.go.
	DefaultMaxJobs  int64 `toml:"DefaultMaxJobs"`
	DefaultMaxBytes int64 `toml:"DefaultMaxBytes"`
	// Version is lmstfy's legacy engine selector; a pool with a non-empty
	// Version is ignored, as lmstfy does.
	Version string `toml:"Version"`
}

// IsSentinel reports whether this Redis is reached through Sentinel
// (MasterName is set), in which case Addrs are the Sentinel addresses.
func (r RedisConf) IsSentinel() bool { return r.MasterName != "" }

// IsCluster reports whether this Redis is a Redis Cluster (Cluster is
// set), in which case Endpoints are its seed nodes.
func (r RedisConf) IsCluster() bool { return r.Cluster }

// HasAddr reports whether Addr or Addrs holds anything but spaces. A
// section without one is an error, unless [Kairos] Embedded asks for the
// embedded in-memory store (see Config.UsesEmbedded).
func (r RedisConf) HasAddr() bool {
	return strings.TrimSpace(r.Addr) != "" || strings.TrimSpace(strings.Join(r.Addrs, "")) != ""
}

// Endpoints returns the addresses to dial: Addr split on commas, then the
// entries of Addrs, each trimmed of spaces, empty ones dropped (so the
// Sentinel list "a:26379, b:26379" works); nil when there is none. For a
// cluster these are the seed nodes, for Sentinel the Sentinels, otherwise
// the one Redis.
func (r RedisConf) Endpoints() []string {
	var out []string
	for _, a := range append(strings.Split(r.Addr, ","), r.Addrs...) {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Describe names the Redis for messages: its address, the Sentinel master
// set, or the cluster's seed nodes.
func (r RedisConf) Describe() string {
	switch {
	case r.IsSentinel():
		return "the master " + r.MasterName + " of the Sentinels " + strings.Join(r.Endpoints(), ",")
	case r.IsCluster():
		return "the Redis Cluster of the seed nodes " + strings.Join(r.Endpoints(), ",")
	}
	return strings.TrimSpace(r.Addr)
}

// Config is the whole configuration file.
type Config struct {
	Host            string `toml:"Host"`
	Port            int    `toml:"Port"`
	AdminHost       string `toml:"AdminHost"`
	AdminPort       int    `toml:"AdminPort"`
	LogLevel        string `toml:"LogLevel"`
	LogDir          string `toml:"LogDir"`
	LogFormat       string `toml:"LogFormat"`
	EnableAccessLog bool   `toml:"EnableAccessLog"`
	// Accounts are the admin listener's basic-auth accounts, user name →
	// password: as written, or a bcrypt hash (see IsBcryptHash). The file's
	// [Accounts] table fills it, and AccountAccess for the entries written
	// as tables (Parse); empty means the admin listener asks for no
	// password.
	Accounts map[string]string `toml:"-"`
	// AccountAccess holds the role and namespaces of the accounts written
	// as tables in [Accounts] ([Accounts.bob] Password, Role, Namespaces);
	// an account without an entry is a full admin (see Access).
	AccountAccess map[string]AccountAccess `toml:"-"`
	AdminRedis    RedisConf                `toml:"AdminRedis"`
	Pool          map[string]RedisConf     `toml:"Pool"`

	TTLSecond     int `toml:"TTLSecond"`
	DelaySecond   int `toml:"DelaySecond"`
	TriesNum      int `toml:"TriesNum"`
	TTRSecond     int `toml:"TTRSecond"`
	TimeoutSecond int `toml:"TimeoutSecond"`

	Kairos Kairos `toml:"Kairos"`

	// Dashboard is the built-in web dashboard (a [Dashboard] table, Kairos
	// only), served at /ui/ on the admin listener.
	Dashboard Dashboard `toml:"Dashboard"`

	// TLS makes either listener serve HTTPS (a [TLS] table, Kairos only;
	// tls.go).
	TLS TLS `toml:"TLS"`
}

// Dashboard holds the web dashboard's settings (doc/dashboard.md).
type Dashboard struct {
	// Enabled serves the dashboard at /ui/ on the admin listener, behind
	// the basic auth of Accounts when Accounts is not empty. nil means
	// true; false turns it off (/ui/ then answers 404 like any unknown
	// admin route). Use DashboardEnabled to read it.
	Enabled *bool `toml:"Enabled"`
	// RefreshSecond is how often the pages refresh their counts and
	// charts by themselves.
	RefreshSecond int `toml:"RefreshSecond"`
}

// DashboardEnabled reports whether the dashboard is served: Enabled, true
// when unset.
func (c *Config) DashboardEnabled() bool {
	return c.Dashboard.Enabled == nil || *c.Dashboard.Enabled
}

// Kairos holds Kairos's own settings (a [Kairos] table), all optional.
type Kairos struct {
	// Embedded (development only) serves every Redis section without an
	// Addr from an in-memory Redis embedded in the process (miniredis):
	// nothing is durable, every job and token is lost when the server
	// stops. It is the only way to get that store: without it, a section
	// without Addr is a configuration error, so that a mistyped key never
	// turns a production server into a memory-only one. It cannot be
	// combined with RequireDurableRedis.
	Embedded bool `toml:"Embedded"`
	// RequireDurableRedis refuses to start when a Redis has AOF off or an
	// evicting maxmemory-policy (otherwise: a loud warning).
	RequireDurableRedis bool `toml:"RequireDurableRedis"`
	// MaxTimeoutSecond caps the long-poll timeout a consumer may ask for.
	MaxTimeoutSecond int `toml:"MaxTimeoutSecond"`
	// ReadTimeoutSecond, WriteTimeoutSecond and IdleTimeoutSecond bound
	// HTTP connections (the write timeout is extended by the long-poll cap).
	ReadTimeoutSecond  int `toml:"ReadTimeoutSecond"`
	WriteTimeoutSecond int `toml:"WriteTimeoutSecond"`
	IdleTimeoutSecond  int `toml:"IdleTimeoutSecond"`
	// PumpBatch is the largest number of due jobs one pump script moves.
	PumpBatch int `toml:"PumpBatch"`
	// ShutdownTimeoutSecond bounds graceful shutdown.
	ShutdownTimeoutSecond int `toml:"ShutdownTimeoutSecond"`
	// DrainDelaySecond is how long a server that was told to stop keeps
	// serving normally while /readyz already answers 503, so that a load
	// balancer (a Kubernetes Service) stops sending it traffic before its
	// listeners close. 0 (the default) closes at once.
	DrainDelaySecond int `toml:"DrainDelaySecond"`
	// ReadHeaderTimeoutSecond bounds reading a request's line and headers,
	// so that a client trickling header bytes (slowloris) is cut off early;
	// the server caps it at ReadTimeoutSecond.
	ReadHeaderTimeoutSecond int `toml:"ReadHeaderTimeoutSecond"`
	// HashTokens stores new tokens hashed (SHA-256) at rest, so that a dump
	// of the admin Redis reveals no usable token; token listings then show
	// fingerprints instead of tokens.
	//
	// A file that has a [Kairos] table but does not set HashTokens gets
	// true (Parse): new configurations hash. A file without [Kairos] (an
	// lmstfy file) and a Config built in code keep false, lmstfy's
	// behaviour of listing tokens in clear.
	HashTokens bool `toml:"HashTokens"`
	// TokenGraceOnFailureMs is how long, in milliseconds, after its last
	// successful check a token is still accepted (with the scope it had)
	// while the admin Redis fails as in a failover: refused connections,
	// CLUSTERDOWN, timeouts; never once Redis said the token is gone.
	// 0 turns it off; at most MaxTokenGraceMs.
	TokenGraceOnFailureMs int `toml:"TokenGraceOnFailureMs"`
	// AdminHosts are the names, besides the admin listener's own
	// addresses and localhost, that a request to the admin listener may
	// carry in Host (each "name" for any port, or "name:port"); any other
	// Host is refused, which stops DNS rebinding. Put the public name here
	// when a proxy in front of the admin listener passes the browser's
	// Host on (or rewrites it to its own). "*" answers every name, which
	// gives up that protection (for an admin listener reached by many
	// names and guarded otherwise).
	AdminHosts []string `toml:"AdminHosts"`
	// ProtectAdminEndpoints puts the admin /metrics, /info and
	// /debug/pprof behind the basic auth of Accounts (when Accounts is not
	// empty). nil means true; false leaves them open, as lmstfy does. Use
	// AdminEndpointsProtected to read it.
	ProtectAdminEndpoints *bool `toml:"ProtectAdminEndpoints"`
	// AuthenticateSize makes the two public size routes require a token
	// like every other route (lmstfy leaves them open, the default).
	AuthenticateSize bool `toml:"AuthenticateSize"`
	// EventLoops is how many event loops serve the public listener's
	// plain publishes (Linux; doc/performance.md): 0 means one per CPU the
	// Go runtime uses (GOMAXPROCS), a negative value none, every request
	// then going to net/http.
	EventLoops int `toml:"EventLoops"`
	// Tracing exports OpenTelemetry spans (publish, consume, ACK, release,
	// webhook deliveries, the pump) over OTLP, configured by the standard
	// OTEL_* environment variables (doc/tracing.md). Off by default at no
	// cost; OTEL_TRACES_EXPORTER=otlp also turns it on.
	Tracing bool `toml:"Tracing"`
	// StoreTraceContext stores a publish's W3C traceparent and tracestate
	// with the job and hands them back on consume. nil means true; false
	// ignores them (for a rolling upgrade from a version that cannot read
	// such jobs). Use TraceContextStored to read it.
	StoreTraceContext *bool `toml:"StoreTraceContext"`
	// AuditMaxEntries is how many entries the audit log keeps in the admin
	// Redis (the newest; older ones are dropped as new ones come): every
	// state-changing request to the admin listener, API and dashboard
	// (doc/dashboard.md). Default 10000, at most MaxAuditEntries.
	AuditMaxEntries int `toml:"AuditMaxEntries"`
}

// Bounds of Kairos.TokenGraceOnFailureMs.
const (
	DefaultTokenGraceMs = 5000
	MaxTokenGraceMs     = 60000
)

// TokenGrace is TokenGraceOnFailureMs as a duration.
func (k Kairos) TokenGrace() time.Duration {
	return time.Duration(k.TokenGraceOnFailureMs) * time.Millisecond
}

// MaxAuditEntries bounds Kairos.AuditMaxEntries, so that a typo cannot
// fill the admin Redis (an entry takes about 400 bytes: the largest log
// takes about 400 MB).
const MaxAuditEntries = 1_000_000

// TraceContextStored reports whether publishes store their trace context:
// StoreTraceContext, true when unset.
func (k Kairos) TraceContextStored() bool {
	return k.StoreTraceContext == nil || *k.StoreTraceContext
}

// AdminEndpointsProtected reports whether /metrics, /info and /debug/pprof
// need basic auth when Accounts are configured: ProtectAdminEndpoints, true
// when unset.
func (k Kairos) AdminEndpointsProtected() bool {
	return k.ProtectAdminEndpoints == nil || *k.ProtectAdminEndpoints
}

// Default returns a Config holding every default: lmstfy's for the lmstfy
// keys and Kairos's for the [Kairos] table. It has no pools and no ports:
// those must come from the file.
func Default() *Config {
	return &Config{
		AdminHost: "127.0.0.1",
		LogLevel:  "info",

		TTLSecond:     24 * 60 * 60,
		DelaySecond:   0,
		TriesNum:      1,
		TTRSecond:     2 * 60,
		TimeoutSecond: 0,

		Kairos: Kairos{
			MaxTimeoutSecond:        600,
			ReadTimeoutSecond:       30,
			WriteTimeoutSecond:      30,
			IdleTimeoutSecond:       120,
			PumpBatch:               1000,
			ShutdownTimeoutSecond:   30,
			ReadHeaderTimeoutSecond: 10,
			TokenGraceOnFailureMs:   DefaultTokenGraceMs,
			ProtectAdminEndpoints:   ptr(true),
			AuditMaxEntries:         10000,
		},
		Dashboard: Dashboard{Enabled: ptr(true), RefreshSecond: 5},
	}
}

func ptr[T any](v T) *T { return &v }

// activePools returns the pools Kairos uses: those without a legacy
// Version, which lmstfy ignores.
func (c *Config) activePools() map[string]RedisConf {
	out := make(map[string]RedisConf, len(c.Pool))
	for name, p := range c.Pool {
		if p.Version == "" {
			out[name] = p
		}
	}
	return out
}

// PoolNames returns the names of the pools in use, sorted (pools with a
// legacy Version are not in use).
func (c *Config) PoolNames() []string {
	names := make([]string, 0, len(c.Pool))
	for name := range c.activePools() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// UsesEmbedded reports whether the Redis section r is served by the
// embedded in-memory store: it has no Addr and [Kairos] Embedded is set.
func (c *Config) UsesEmbedded(r RedisConf) bool { return c.Kairos.Embedded && !r.HasAddr() }

// EmbeddedSections names the sections served by the embedded in-memory
// store ("AdminRedis", then "Pool.NAME" in name order); nil when Embedded
// is not set or every section has an Addr.
func (c *Config) EmbeddedSections() []string {
	var out []string
	if c.UsesEmbedded(c.AdminRedis) {
		out = append(out, "AdminRedis")
	}
	for _, name := range c.PoolNames() {
		if c.UsesEmbedded(c.Pool[name]) {
			out = append(out, "Pool."+name)
		}
	}
	return out
}

// Embedded reports whether any Redis in use is the embedded in-memory
// store, so that nothing the server stores there is durable.
func (c *Config) Embedded() bool { return len(c.EmbeddedSections()) > 0 }

// DefaultTTL is the publish ttl used when a request gives none (0 = never
// expires).
func (c *Config) DefaultTTL() time.Duration { return seconds(c.TTLSecond) }

// DefaultDelay is the publish delay used when a request gives none.
func (c *Config) DefaultDelay() time.Duration { return seconds(c.DelaySecond) }

// DefaultTTR is the consume ttr used when a request gives none.
func (c *Config) DefaultTTR() time.Duration { return seconds(c.TTRSecond) }

// DefaultTimeout is the consume long-poll timeout used when a request
// gives none (0 = do not wait).
func (c *Config) DefaultTimeout() time.Duration { return seconds(c.TimeoutSecond) }

// MaxTimeout is the longest long-poll a consumer may ask for.
func (c *Config) MaxTimeout() time.Duration { return seconds(c.Kairos.MaxTimeoutSecond) }

// ReadTimeout bounds reading one HTTP request (http.Server.ReadTimeout).
func (k Kairos) ReadTimeout() time.Duration { return seconds(k.ReadTimeoutSecond) }

// WriteTimeout bounds writing one HTTP response, before the server adds
// the long-poll cap to it.
func (k Kairos) WriteTimeout() time.Duration { return seconds(k.WriteTimeoutSecond) }

// ReadHeaderTimeout bounds reading a request's line and headers
// (http.Server.ReadHeaderTimeout), at most ReadTimeout.
func (k Kairos) ReadHeaderTimeout() time.Duration {
	return min(seconds(k.ReadHeaderTimeoutSecond), k.ReadTimeout())
}

// IdleTimeout bounds an idle keep-alive connection.
func (k Kairos) IdleTimeout() time.Duration { return seconds(k.IdleTimeoutSecond) }

// ShutdownTimeout bounds graceful shutdown.
func (k Kairos) ShutdownTimeout() time.Duration { return seconds(k.ShutdownTimeoutSecond) }

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }
