package config

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// validConfig returns a minimal valid configuration for tests to break.
func validConfig(t testing.TB) *Config {
	t.Helper()
	c := Default()
	c.Port = 7777
	c.AdminPort = 7778
	c.AdminRedis = RedisConf{Addr: "127.0.0.1:6379"}
	c.Pool = map[string]RedisConf{DefaultPoolName: {Addr: "127.0.0.1:6379"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("validConfig is invalid: %v", err)
	}
	return c
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"minimal", func(c *Config) {}},
		{"all interfaces", func(c *Config) { c.Host = ""; c.AdminHost = "" }},
		{"IPv6 hosts", func(c *Config) { c.Host = "::"; c.AdminHost = "::1" }},
		{"same port on different hosts", func(c *Config) {
			c.Host, c.AdminHost, c.AdminPort = "10.0.0.1", "127.0.0.1", c.Port
		}},
		{"embedded redis everywhere, asked for by name", func(c *Config) {
			c.Kairos.Embedded = true
			c.AdminRedis = RedisConf{}
			c.Pool = map[string]RedisConf{"default": {}, "other": {Addr: " "}}
		}},
		{"embedded admin redis only", func(c *Config) { c.Kairos.Embedded = true; c.AdminRedis = RedisConf{} }},
		{"Embedded with every Addr set", func(c *Config) { c.Kairos.Embedded = true }},
		{"sentinel with spaces in the list", func(c *Config) {
			c.Pool["s"] = RedisConf{Addr: "a:26379, b:26379 ,c:26379", MasterName: "m", SentinelPassword: "x"}
		}},
		{"IPv6 redis address", func(c *Config) { c.AdminRedis.Addr = "[::1]:6379" }},
		{"cluster pool with seed nodes", func(c *Config) {
			c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{"10.0.0.1:7000", " 10.0.0.2:7000 "}, Password: "x", PoolSize: 10}
		}},
		{"cluster with a single Addr", func(c *Config) { c.Pool["default"] = RedisConf{Cluster: true, Addr: "10.0.0.1:7000"} }},
		{"cluster with a list in Addr", func(c *Config) { c.Pool["default"] = RedisConf{Cluster: true, Addr: "a:7000, b:7000"} }},
		{"admin redis on a cluster", func(c *Config) { c.AdminRedis = RedisConf{Cluster: true, Addrs: []string{"a:7000"}} }},
		{"cluster pool with WaitReplicas and migration", func(c *Config) {
			c.Pool["default"] = RedisConf{Addr: "r1:6379", MigrateTo: "c"}
			c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{"a:7000"}, WaitReplicas: 1}
		}},
		{"migration", func(c *Config) {
			c.Pool["default"] = RedisConf{Addr: "r1:6379", MigrateTo: "new"}
			c.Pool["new"] = RedisConf{Addr: "r2:6379"}
		}},
		{"legacy pool with bad values is ignored", func(c *Config) {
			c.Pool["old"] = RedisConf{Addr: "nope", DB: -1, Version: "v2", MigrateTo: "zz"}
		}},
		{"LmstfyData refuse", func(c *Config) { c.Pool["default"] = RedisConf{Addr: "r1:6379", LmstfyData: "refuse"} }},
		{"LmstfyData import into a cluster", func(c *Config) {
			c.Pool["default"] = RedisConf{Addr: "r1:6379", LmstfyData: "import", MigrateTo: "c"}
			c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{"a:7000"}}
		}},
		{"every log level and format", func(c *Config) { c.LogLevel, c.LogFormat = "debug", "json" }},
		{"log format text", func(c *Config) { c.LogLevel, c.LogFormat = "WARNING", "text" }},
		{"zero defaults", func(c *Config) {
			c.TTLSecond, c.DelaySecond, c.TTRSecond, c.TimeoutSecond = 0, 0, 0, 0
		}},
		{"ttl 0 allows any delay", func(c *Config) { c.TTLSecond, c.DelaySecond = 0, 3600 }},
		{"ttl equal to delay", func(c *Config) { c.TTLSecond, c.DelaySecond = 60, 60 }},
		{"max tries and uint32 seconds", func(c *Config) { c.TriesNum, c.TTLSecond = 65535, 4294967295 }},
		{"timeout equal to the cap", func(c *Config) { c.TimeoutSecond, c.Kairos.MaxTimeoutSecond = 30, 30 }},
		{"durable flag", func(c *Config) { c.Kairos.RequireDurableRedis = true }},
		{"security switches", func(c *Config) {
			c.Kairos.HashTokens, c.Kairos.AuthenticateSize, c.Kairos.ProtectAdminEndpoints = true, true, ptr(false)
		}},
		{"read header timeout above the read timeout (capped)", func(c *Config) { c.Kairos.ReadHeaderTimeoutSecond = 100 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.mutate(c)
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		// want lists "Key: reason" prefixes, one per problem, in order.
		want []string
	}{
		{"port zero", func(c *Config) { c.Port = 0 }, []string{"Port: must be 1..65535"}},
		{"port too big", func(c *Config) { c.Port = 70000 }, []string{"Port: must be 1..65535"}},
		{"admin port missing", func(c *Config) { c.AdminPort = 0 }, []string{"AdminPort: is required"}},
		{"admin port negative", func(c *Config) { c.AdminPort = -1 }, []string{"AdminPort: must be 1..65535"}},
		{"admin port equals port", func(c *Config) { c.AdminPort = c.Port }, []string{"AdminPort: must differ from Port"}},
		{"port in host", func(c *Config) { c.Host = "0.0.0.0:7777" }, []string{"Host: must be a host name or IP address without a port (set Port)"}},
		{"port in admin host", func(c *Config) { c.AdminHost = "localhost:1" }, []string{"AdminHost: must be a host name"}},
		{"log level", func(c *Config) { c.LogLevel = "verbose" }, []string{`LogLevel: unknown level "verbose"`}},
		{"empty log level", func(c *Config) { c.LogLevel = "" }, []string{`LogLevel: unknown level ""`}},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, []string{`LogFormat: must be "" or "json"`}},
		{"no pools", func(c *Config) { c.Pool = nil }, []string{`Pool.default: is required: add a [Pool.default] table with Addr = "host:port"`}},
		{"no pools, embedded", func(c *Config) { c.Pool, c.Kairos.Embedded = nil, true }, []string{`Pool.default: is required`}},
		{"no default pool", func(c *Config) { c.Pool = map[string]RedisConf{"a": {Addr: "r:1"}} }, []string{`Pool.default: is required`}},
		{"default pool in another case", func(c *Config) { c.Pool = map[string]RedisConf{"Default": {Addr: "r:1"}} },
			[]string{`Pool.default: is required: add a [Pool.default] table with Addr = "host:port" (Pool.Default is another pool: pool names are case-sensitive)`}},
		{"default pool is legacy", func(c *Config) { c.Pool["default"] = RedisConf{Addr: "r:1", Version: "v2"} },
			[]string{`Pool.default: is required, and ignored because its Version is set`}},
		{"pool without Addr", func(c *Config) { c.Pool["default"] = RedisConf{DB: 1} },
			[]string{`Pool.default.Addr: is required (set it, or [Kairos] Embedded = true for an in-memory store that loses everything on stop)`}},
		{"blank pool Addr", func(c *Config) { c.Pool["b"] = RedisConf{Addr: "  "} }, []string{`Pool.b.Addr: is required`}},
		{"admin redis without Addr", func(c *Config) { c.AdminRedis = RedisConf{} }, []string{`AdminRedis.Addr: is required (set it, or [Kairos] Embedded`}},
		{"no Addr anywhere", func(c *Config) { c.AdminRedis = RedisConf{}; c.Pool["default"] = RedisConf{} },
			[]string{`AdminRedis.Addr: is required`, `Pool.default.Addr: is required`}},
		{"embedded and durable", func(c *Config) {
			c.Kairos.Embedded, c.Kairos.RequireDurableRedis = true, true
			c.Pool["default"] = RedisConf{}
		}, []string{`Kairos.Embedded: cannot be combined with RequireDurableRedis = true`}},
		{"LmstfyData unknown", func(c *Config) { c.Pool["b"] = RedisConf{Addr: "r:1", LmstfyData: "ignore"} },
			[]string{`Pool.b.LmstfyData: must be "refuse" (the default: refuse to start on lmstfy's data) or "import"`}},
		{"LmstfyData import on a cluster", func(c *Config) {
			c.Pool["b"] = RedisConf{Cluster: true, Addrs: []string{"a:7000"}, LmstfyData: "import"}
		}, []string{"Pool.b.LmstfyData: a Redis Cluster cannot hold lmstfy's data"}},
		{"LmstfyData on the admin redis", func(c *Config) { c.AdminRedis.LmstfyData = "refuse" },
			[]string{"AdminRedis.LmstfyData: is a pool setting"}},
		{"negative pool DB", func(c *Config) { c.Pool["b"] = RedisConf{Addr: "r:1", DB: -1} }, []string{"Pool.b.DB: must be >= 0"}},
		{"negative admin DB", func(c *Config) { c.AdminRedis.DB = -2 }, []string{"AdminRedis.DB: must be >= 0"}},
		{"negative pool size", func(c *Config) { c.Pool["b"] = RedisConf{Addr: "r:1", PoolSize: -5} }, []string{"Pool.b.PoolSize: must be >= 0"}},
		{"sentinel without addresses", func(c *Config) { c.Pool["x"] = RedisConf{MasterName: "m"} },
			[]string{"Pool.x.MasterName: needs Addr (the Sentinel addresses)"}},
		{"admin sentinel without addresses", func(c *Config) { c.AdminRedis = RedisConf{MasterName: "m"} },
			[]string{"AdminRedis.MasterName: needs Addr"}},
		{"address list without sentinel", func(c *Config) { c.Pool["x"] = RedisConf{Addr: "a:1,b:2"} },
			[]string{"Pool.x.Addr: a list of addresses needs MasterName"}},
		{"address without port", func(c *Config) { c.Pool["x"] = RedisConf{Addr: "redis"} }, []string{`Pool.x.Addr: "redis": want host:port`}},
		{"address list names Cluster too", func(c *Config) { c.Pool["x"] = RedisConf{Addr: "a:1,b:2"} },
			[]string{"Pool.x.Addr: a list of addresses needs MasterName (Sentinel) or Cluster = true; a plain Redis takes one host:port"}},
		{"Addrs without Cluster", func(c *Config) { c.Pool["x"] = RedisConf{Addrs: []string{"a:1", "b:2"}} },
			[]string{"Pool.x.Addrs: needs Cluster = true (it lists the seed nodes of a Redis Cluster); a plain Redis takes one host:port in Addr"}},
		{"Addrs with Sentinel", func(c *Config) { c.AdminRedis = RedisConf{Addrs: []string{"a:1"}, MasterName: "m"} },
			[]string{"AdminRedis.Addrs: needs Cluster = true (it lists the seed nodes of a Redis Cluster); list the Sentinels in Addr"}},
		{"empty Addrs", func(c *Config) { c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{}} },
			[]string{`Pool.c.Addrs: is empty: list the cluster's seed nodes, e.g. Addrs = ["10.0.0.1:7000", "10.0.0.2:7000"]`}},
		{"blank Addrs", func(c *Config) { c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{" "}} }, []string{`Pool.c.Addrs: is empty`}},
		{"cluster without seeds", func(c *Config) { c.AdminRedis = RedisConf{Cluster: true} },
			[]string{`AdminRedis.Addrs: is required with Cluster = true: list the cluster's seed nodes`}},
		{"cluster without seeds is not embedded", func(c *Config) { c.Kairos.Embedded = true; c.Pool["c"] = RedisConf{Cluster: true} },
			[]string{`Pool.c.Addrs: is required with Cluster = true: list the cluster's seed nodes, e.g. Addrs = ["10.0.0.1:7000", "10.0.0.2:7000"] (the embedded store is not a cluster)`}},
		{"cluster with Sentinel", func(c *Config) { c.Pool["c"] = RedisConf{Cluster: true, MasterName: "m", Addr: "a:26379"} },
			[]string{"Pool.c.Cluster: cannot be combined with MasterName (Sentinel)"}},
		{"cluster with a DB", func(c *Config) { c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{"a:7000"}, DB: 2} },
			[]string{"Pool.c.DB: must be 0 with Cluster = true (a Redis Cluster has one database), not 2"}},
		{"cluster with Addr and Addrs", func(c *Config) { c.Pool["c"] = RedisConf{Cluster: true, Addr: "a:7000", Addrs: []string{"b:7000"}} },
			[]string{"Pool.c.Addrs: set the seed nodes in Addrs or in Addr, not both"}},
		{"bad seed node", func(c *Config) { c.Pool["c"] = RedisConf{Cluster: true, Addrs: []string{"a:7000", "b", ""}} },
			[]string{`Pool.c.Addrs[1]: "b": want host:port`, `Pool.c.Addrs[2]: "": want host:port`}},
		{"address with bad port", func(c *Config) { c.AdminRedis.Addr = "redis:http" }, []string{`AdminRedis.Addr: "redis:http": the port must be 1..65535`}},
		{"address without host", func(c *Config) { c.AdminRedis.Addr = ":6379" }, []string{`AdminRedis.Addr: ":6379": want host:port (the host is empty)`}},
		{"address of commas", func(c *Config) { c.AdminRedis.Addr = " , " }, []string{`AdminRedis.Addr: no address`}},
		{"bad sentinel address", func(c *Config) { c.Pool["s"] = RedisConf{Addr: "a:1,b", MasterName: "m"} }, []string{`Pool.s.Addr: "b": want host:port`}},
		{"unknown migration target", func(c *Config) { c.Pool["a"] = RedisConf{Addr: "r:1", MigrateTo: "zz"} }, []string{`Pool.a.MigrateTo: unknown pool "zz"`}},
		{"migration to a legacy pool", func(c *Config) {
			c.Pool["a"] = RedisConf{Addr: "r:1", MigrateTo: "old"}
			c.Pool["old"] = RedisConf{Addr: "r:2", Version: "v2"}
		}, []string{`Pool.a.MigrateTo: unknown pool "old"`}},
		{"migration to itself", func(c *Config) { c.Pool["a"] = RedisConf{Addr: "r:1", MigrateTo: "a"} }, []string{"Pool.a.MigrateTo: must not name the pool itself"}},
		{"bad pool name", func(c *Config) { c.Pool["a b"] = RedisConf{Addr: "r:1"} }, []string{`Pool."a b": invalid pool name`}},
		{"empty pool name", func(c *Config) { c.Pool[""] = RedisConf{Addr: "r:1"} }, []string{`Pool."": invalid pool name`}},
		{"bad pool name keys its fields", func(c *Config) { c.Pool["a.b"] = RedisConf{Addr: "r:1", DB: -1} },
			[]string{`Pool."a.b": invalid pool name`, `Pool."a.b".DB: must be >= 0`}},
		{"tries zero", func(c *Config) { c.TriesNum = 0 }, []string{"TriesNum: must be 1..65535"}},
		{"tries too big", func(c *Config) { c.TriesNum = 65536 }, []string{"TriesNum: must be 1..65535"}},
		{"negative ttl", func(c *Config) { c.TTLSecond = -1 }, []string{"TTLSecond: must be >= 0"}},
		{"negative delay", func(c *Config) { c.DelaySecond = -1 }, []string{"DelaySecond: must be >= 0"}},
		{"negative ttr", func(c *Config) { c.TTRSecond = -1 }, []string{"TTRSecond: must be >= 0"}},
		{"negative timeout", func(c *Config) { c.TimeoutSecond = -1 }, []string{"TimeoutSecond: must be >= 0"}},
		{"ttl over uint32", func(c *Config) { c.TTLSecond = 1 << 32 }, []string{"TTLSecond: must be <= 4294967295"}},
		{"delay longer than ttl", func(c *Config) { c.TTLSecond, c.DelaySecond = 60, 61 }, []string{"DelaySecond: must not exceed TTLSecond (60)"}},
		{"zero max timeout", func(c *Config) { c.Kairos.MaxTimeoutSecond = 0 }, []string{"Kairos.MaxTimeoutSecond: must be > 0"}},
		{"zero read timeout", func(c *Config) { c.Kairos.ReadTimeoutSecond = 0 }, []string{"Kairos.ReadTimeoutSecond: must be > 0"}},
		{"negative write timeout", func(c *Config) { c.Kairos.WriteTimeoutSecond = -3 }, []string{"Kairos.WriteTimeoutSecond: must be > 0"}},
		{"zero idle timeout", func(c *Config) { c.Kairos.IdleTimeoutSecond = 0 }, []string{"Kairos.IdleTimeoutSecond: must be > 0"}},
		{"zero shutdown timeout", func(c *Config) { c.Kairos.ShutdownTimeoutSecond = 0 }, []string{"Kairos.ShutdownTimeoutSecond: must be > 0"}},
		{"huge shutdown timeout", func(c *Config) { c.Kairos.ShutdownTimeoutSecond = 1 << 40 }, []string{"Kairos.ShutdownTimeoutSecond: must be <= 4294967295"}},
		{"zero pump batch", func(c *Config) { c.Kairos.PumpBatch = 0 }, []string{"Kairos.PumpBatch: must be > 0"}},
		{"negative token grace", func(c *Config) { c.Kairos.TokenGraceOnFailureMs = -1 },
			[]string{"Kairos.TokenGraceOnFailureMs: must be in [0, 60000] (0 turns the grace off), not -1"}},
		{"token grace beyond a minute", func(c *Config) { c.Kairos.TokenGraceOnFailureMs = 60001 },
			[]string{"Kairos.TokenGraceOnFailureMs: must be in [0, 60000] (0 turns the grace off), not 60001"}},
		{"zero audit cap", func(c *Config) { c.Kairos.AuditMaxEntries = 0 }, []string{"Kairos.AuditMaxEntries: must be in [1, 1000000], not 0"}},
		{"huge audit cap", func(c *Config) { c.Kairos.AuditMaxEntries = MaxAuditEntries + 1 }, []string{"Kairos.AuditMaxEntries: must be in [1, 1000000], not 1000001"}},
		{"zero read header timeout", func(c *Config) { c.Kairos.ReadHeaderTimeoutSecond = 0 }, []string{"Kairos.ReadHeaderTimeoutSecond: must be > 0"}},
		{"huge read header timeout", func(c *Config) { c.Kairos.ReadHeaderTimeoutSecond = 1 << 33 }, []string{"Kairos.ReadHeaderTimeoutSecond: must be <= 4294967295"}},
		{"timeout above the cap", func(c *Config) { c.TimeoutSecond = 601 }, []string{"Kairos.MaxTimeoutSecond: must be >= TimeoutSecond (601)"}},
		{"several problems at once", func(c *Config) {
			c.Port, c.LogLevel, c.Pool, c.TriesNum = 0, "loud", nil, 0
		}, []string{"Port:", "LogLevel:", "Pool.default:", "TriesNum:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("errors.As(%v, *ValidationError) = false", err)
			}
			got := Problems(err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems %q, want %d %q", len(got), err, len(tc.want), tc.want)
			}
			for i, p := range got {
				if !strings.HasPrefix(p.Error(), tc.want[i]) {
					t.Errorf("problem %d = %q, want prefix %q", i, p.Error(), tc.want[i])
				}
				if !strings.HasPrefix(tc.want[i], p.Key+":") {
					t.Errorf("problem %d has Key %q, want the key of %q", i, p.Key, tc.want[i])
				}
			}
		})
	}
}

func TestValidationError(t *testing.T) {
	err := &ValidationError{Key: "Port", Reason: "must be 1..65535"}
	if got, want := err.Error(), "Port: must be 1..65535"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("a ValidationError does not match ErrInvalid")
	}
	if errors.Is(errors.New("other"), ErrInvalid) {
		t.Error("an unrelated error matches ErrInvalid")
	}
	if got := Problems(nil); got != nil {
		t.Errorf("Problems(nil) = %v, want nil", got)
	}
	if got := Problems(errors.New("x")); got != nil {
		t.Errorf("Problems(plain error) = %v, want nil", got)
	}
	joined := errors.Join(err, errors.New("x"), &ValidationError{Key: "A", Reason: "b"})
	got := Problems(wrap(joined))
	if want := []*ValidationError{err, {Key: "A", Reason: "b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Problems(joined) = %v, want %v", got, want)
	}
}

func wrap(err error) error { return &fileError{file: "f", err: err} }

func TestValidateDashboard(t *testing.T) {
	for _, tc := range []struct {
		file, key, reason string
	}{
		{"[Dashboard]\nRefreshSecond = 0\n", "Dashboard.RefreshSecond", "must be in [1, 3600], not 0"},
		{"[Dashboard]\nRefreshSecond = 3601\n", "Dashboard.RefreshSecond", "must be in [1, 3600], not 3601"},
		{"[Dashboard]\nEnable = false\n", "Dashboard.Enable", "unknown key (did you mean Enabled?)"},
		{"[Dashboard]\nTheme = \"dark\"\n", "Dashboard.Theme", "unknown key ([Dashboard] takes only Enabled, RefreshSecond)"},
	} {
		path := filepath.Join(t.TempDir(), "k.toml")
		body := "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n[Pool.default]\nAddr = \"127.0.0.1:6379\"\n" + tc.file
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Key != tc.key || ve.Reason != tc.reason {
			t.Errorf("Load(%q) = %v, want %s: %s", tc.file, err, tc.key, tc.reason)
		}
	}
	path := filepath.Join(t.TempDir(), "k.toml")
	body := "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n[Pool.default]\nAddr = \"127.0.0.1:6379\"\n[Dashboard]\nEnabled = false\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil || cfg.DashboardEnabled() {
		t.Errorf("Load(Enabled = false) = enabled %v, %v; want off", cfg != nil && cfg.DashboardEnabled(), err)
	}
	if !Default().DashboardEnabled() {
		t.Error("Default().DashboardEnabled() = false, want true")
	}
}

func TestValidateTLS(t *testing.T) {
	for _, tc := range []struct {
		file, key, reason string
	}{
		{"[TLS]\nCertFile = \"a.crt\"\n", "TLS.KeyFile", "is required with TLS.CertFile (the private key of that certificate)"},
		{"[TLS]\nKeyFile = \"a.key\"\n", "TLS.CertFile", "is required with TLS.KeyFile (the certificate of that key)"},
		{"[TLS]\nAdminCertFile = \"a.crt\"\n", "TLS.AdminKeyFile", "is required with TLS.AdminCertFile (the private key of that certificate)"},
		{"[TLS]\nAdminKeyFile = \"a.key\"\n", "TLS.AdminCertFile", "is required with TLS.AdminKeyFile (the certificate of that key)"},
		{"[TLS]\nMinVersion = \"1.1\"\n", "TLS.MinVersion", "TLS 1.1 is not allowed: the oldest version Kairos accepts is 1.2"},
		{"[TLS]\nMinVersion = \"1.0\"\n", "TLS.MinVersion", "TLS 1.0 is not allowed: the oldest version Kairos accepts is 1.2"},
		{"[TLS]\nMinVersion = \"TLS13\"\n", "TLS.MinVersion", `must be "1.2" or "1.3", not "TLS13"`},
		{"[TLS]\nCertFlie = \"a.crt\"\n", "TLS.CertFlie", "unknown key (did you mean CertFile?)"},
		{"[TLS]\nClientCAFile = \"ca.crt\"\n", "TLS.ClientCAFile", "unknown key ([TLS] takes only CertFile, KeyFile, AdminCertFile, AdminKeyFile, MinVersion)"},
		// A key of [TLS] written in [Kairos] would leave the listener in
		// plain HTTP: an error, not a warning.
		{"[Kairos]\nCertFile = \"a.crt\"\n", "Kairos.CertFile", "unknown key (CertFile belongs in [TLS])"},
	} {
		path := filepath.Join(t.TempDir(), "k.toml")
		body := "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n[Pool.default]\nAddr = \"127.0.0.1:6379\"\n" + tc.file
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Key != tc.key || ve.Reason != tc.reason {
			t.Errorf("Load(%q) = %v, want %s: %s", tc.file, err, tc.key, tc.reason)
		}
	}
	for _, tc := range []struct {
		file    string
		public  bool
		admin   bool
		version uint16
	}{
		{"", false, false, tls.VersionTLS12},
		{"[TLS]\nCertFile = \"a.crt\"\nKeyFile = \"a.key\"\n", true, false, tls.VersionTLS12},
		{"[TLS]\nAdminCertFile = \"a.crt\"\nAdminKeyFile = \"a.key\"\nMinVersion = \"1.3\"\n", false, true, tls.VersionTLS13},
		{"[TLS]\nMinVersion = \"1.2\"\n", false, false, tls.VersionTLS12},
	} {
		path := filepath.Join(t.TempDir(), "k.toml")
		body := "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n[Pool.default]\nAddr = \"127.0.0.1:6379\"\n" + tc.file
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path)
		if err != nil {
			t.Errorf("Load(%q): %v", tc.file, err)
			continue
		}
		if got := cfg.TLS; got.PublicEnabled() != tc.public || got.AdminEnabled() != tc.admin || got.MinTLSVersion() != tc.version {
			t.Errorf("Load(%q): public %v admin %v version %x, want %v %v %x", tc.file,
				got.PublicEnabled(), got.AdminEnabled(), got.MinTLSVersion(), tc.public, tc.admin, tc.version)
		}
	}
}
