package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeConfig writes text to a fresh file and returns its path.
func writeConfig(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kairos.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// minimal is the smallest valid file; tests append to it.
const minimal = `
Port = 7777
AdminPort = 7778
[AdminRedis]
Addr = "127.0.0.1:6379"
[Pool.default]
Addr = "127.0.0.1:6379"
`

func TestLoadDemoLmstfy(t *testing.T) {
	cfg, warnings, err := LoadWithWarnings("demo-lmstfy.toml")
	if err != nil {
		t.Fatalf("LoadWithWarnings: %v", err)
	}
	want := &Config{
		Host:            "0.0.0.0",
		Port:            7777,
		AdminHost:       "127.0.0.1",
		AdminPort:       7778,
		LogLevel:        "warn",
		LogDir:          "/var/log/lmstfy",
		LogFormat:       "json",
		EnableAccessLog: false,
		Accounts:        map[string]string{"ops": "change.me", "monitor": "also.change.me"},
		AdminRedis:      RedisConf{Addr: "127.0.0.1:6379", Password: "foobared", DB: 15},
		Pool: map[string]RedisConf{
			"default": {Addr: "127.0.0.1:6379", Password: "foobared", PoolSize: 2000, MigrateTo: "migrate"},
			"migrate": {Addr: "127.0.0.1:6380", Password: "foobared"},
			"mysentinel": {
				Addr:             "127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381",
				MasterName:       "mymaster",
				Password:         "foobared",
				SentinelPassword: "foobared1",
			},
		},
		TTLSecond:     86400,
		DelaySecond:   0,
		TriesNum:      3,
		TTRSecond:     60,
		TimeoutSecond: 10,
		Kairos:        Default().Kairos,
		Dashboard:     Default().Dashboard,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("LoadWithWarnings(demo-lmstfy.toml) =\n%+v\nwant\n%+v", cfg, want)
	}
	wantWarnings := []string{`Pool.legacy: ignored because Version = "v2" is set (lmstfy ignores such pools too)`}
	if !reflect.DeepEqual(warnings, wantWarnings) {
		t.Errorf("warnings = %q, want %q", warnings, wantWarnings)
	}
	if got, want := cfg.PoolNames(), []string{"default", "migrate", "mysentinel"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PoolNames() = %q, want %q", got, want)
	}
	if cfg.Embedded() {
		t.Error("Embedded() = true for a file with every Addr set")
	}
}

// TestLoadUpstreamLmstfy loads lmstfy's own example files, verbatim.
func TestLoadUpstreamLmstfy(t *testing.T) {
	tests := []struct {
		file      string
		adminHost string
		pools     []string
		accounts  map[string]string
		poolAddr  string
	}{
		{"testdata/lmstfy-demo-conf.toml", "127.0.0.1", []string{"default", "mysentinel"}, map[string]string{"test_user": "change.me"}, "localhost:6379"},
		{"testdata/lmstfy-docker-image-conf.toml", "0.0.0.0", []string{"default"}, map[string]string{}, "redis:6379"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			cfg, warnings, err := LoadWithWarnings(tc.file)
			if err != nil {
				t.Fatalf("LoadWithWarnings: %v", err)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings = %q, want none", warnings)
			}
			if cfg.Host != "0.0.0.0" || cfg.Port != 7777 || cfg.AdminHost != tc.adminHost || cfg.AdminPort != 7778 {
				t.Errorf("listeners = %s:%d admin %s:%d", cfg.Host, cfg.Port, cfg.AdminHost, cfg.AdminPort)
			}
			if cfg.LogLevel != "info" || !cfg.EnableAccessLog || cfg.LogDir != "" || cfg.LogFormat != "" {
				t.Errorf("logging = %q %v %q %q", cfg.LogLevel, cfg.EnableAccessLog, cfg.LogDir, cfg.LogFormat)
			}
			if !reflect.DeepEqual(cfg.Accounts, tc.accounts) {
				t.Errorf("Accounts = %v, want %v", cfg.Accounts, tc.accounts)
			}
			if got := cfg.PoolNames(); !reflect.DeepEqual(got, tc.pools) {
				t.Errorf("PoolNames() = %q, want %q", got, tc.pools)
			}
			if got := cfg.Pool["default"].Addr; got != tc.poolAddr {
				t.Errorf("Pool.default.Addr = %q, want %q", got, tc.poolAddr)
			}
			// The defaults are commented out in both files.
			d := Default()
			if cfg.TTLSecond != d.TTLSecond || cfg.DelaySecond != d.DelaySecond || cfg.TriesNum != d.TriesNum ||
				cfg.TTRSecond != d.TTRSecond || cfg.TimeoutSecond != d.TimeoutSecond || !reflect.DeepEqual(cfg.Kairos, d.Kairos) {
				t.Errorf("defaults not applied: %+v", cfg)
			}
		})
	}
	cfg, err := Load("testdata/lmstfy-demo-conf.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Pool["mysentinel"]
	if !s.IsSentinel() || s.MasterName != "mymaster" || s.SentinelPassword != "foobared1" || s.Password != "foobared" ||
		len(s.Endpoints()) != 3 {
		t.Errorf("Pool.mysentinel = %+v", s)
	}
}

func TestLoadDevConfig(t *testing.T) {
	cfg, warnings, err := LoadWithWarnings("dev.toml")
	if err != nil {
		t.Fatalf("LoadWithWarnings: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings = %q, want none", warnings)
	}
	if cfg.Host != "127.0.0.1" || cfg.Port != 7777 || cfg.AdminHost != "127.0.0.1" || cfg.AdminPort != 7778 {
		t.Errorf("listeners = %s:%d admin %s:%d", cfg.Host, cfg.Port, cfg.AdminHost, cfg.AdminPort)
	}
	if !cfg.EnableAccessLog || cfg.LogLevel != "info" {
		t.Errorf("logging = %q access %v", cfg.LogLevel, cfg.EnableAccessLog)
	}
	if got, want := cfg.EmbeddedSections(), []string{"AdminRedis", "Pool.default"}; !cfg.Kairos.Embedded || !reflect.DeepEqual(got, want) {
		t.Errorf("Embedded = %v, EmbeddedSections() = %q, want true and %q", cfg.Kairos.Embedded, got, want)
	}
	if got, want := cfg.PoolNames(), []string{"default"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PoolNames() = %q, want %q", got, want)
	}
}

func TestLoadAppliesDefaults(t *testing.T) {
	cfg, warnings, err := LoadWithWarnings(writeConfig(t, minimal))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings = %q, want none", warnings)
	}
	want := Default()
	want.Port, want.AdminPort = 7777, 7778
	want.AdminRedis = RedisConf{Addr: "127.0.0.1:6379"}
	want.Pool = map[string]RedisConf{"default": {Addr: "127.0.0.1:6379"}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load =\n%+v\nwant\n%+v", cfg, want)
	}

	// Values in the file win over defaults, including zeros.
	cfg, err = Load(writeConfig(t, "TTLSecond = 0\nTTRSecond = 5\n"+minimal+"[Kairos]\nPumpBatch = 10\nRequireDurableRedis = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTLSecond != 0 || cfg.TTRSecond != 5 || cfg.Kairos.PumpBatch != 10 || !cfg.Kairos.RequireDurableRedis ||
		cfg.Kairos.MaxTimeoutSecond != 600 || cfg.AdminHost != "127.0.0.1" {
		t.Errorf("Load = %+v", cfg)
	}
}

func TestLoadSecurityKeys(t *testing.T) {
	tests := []struct {
		name      string
		kairos    string
		protected bool
		hash      bool
		size      bool
		header    int
	}{
		// A file with a [Kairos] table hashes tokens unless it says not to.
		{"defaults", "", true, true, false, 10},
		{"all set", "HashTokens = true\nProtectAdminEndpoints = false\nAuthenticateSize = true\nReadHeaderTimeoutSecond = 2\n", false, true, true, 2},
		{"protect explicitly", "ProtectAdminEndpoints = true\n", true, true, false, 10},
		{"lmstfy-compatible tokens", "HashTokens = false\n", true, false, false, 10},
		{"key case", "hashtokens = false\n", true, false, false, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, warnings, err := LoadWithWarnings(writeConfig(t, minimal+"[Kairos]\n"+tc.kairos))
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings = %q", warnings)
			}
			k := cfg.Kairos
			if k.AdminEndpointsProtected() != tc.protected || k.HashTokens != tc.hash ||
				k.AuthenticateSize != tc.size || k.ReadHeaderTimeoutSecond != tc.header {
				t.Errorf("Kairos = %+v (protected %v)", k, k.AdminEndpointsProtected())
			}
		})
	}
	// A Kairos value built in code without the switch is protected.
	if !(Kairos{}).AdminEndpointsProtected() {
		t.Error("Kairos{}.AdminEndpointsProtected() = false, want true")
	}
}

func TestLoadUnknownKeys(t *testing.T) {
	text := `
Port = 7777
AdminPort = 7778
BacktraceLevel = "warn"
[AdminRedis]
Addr = "127.0.0.1:6379"
[Accounts]
anyone = "can be named"
[Pool.default]
Addr = "127.0.0.1:6379"
Weight = 3
EngineKing = "redis"
[Pool.default.Extra]
a = 1
b = 2
[Throttle]
rate = 1
[Throttle.deep]
x = 1
`
	cfg, warnings, err := LoadWithWarnings(writeConfig(t, text))
	if err != nil {
		t.Fatalf("LoadWithWarnings: %v", err)
	}
	want := []string{
		"unknown key BacktraceLevel ignored",
		"unknown key Pool.default.Weight ignored",
		"unknown key Pool.default.EngineKing ignored", // a field of older lmstfy versions
		"unknown table [Pool.default.Extra] ignored",
		"unknown table [Throttle] ignored",
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings =\n%q\nwant\n%q", warnings, want)
	}
	if cfg.Kairos.PumpBatch != 1000 || cfg.Accounts["anyone"] != "can be named" {
		t.Errorf("Load = %+v", cfg)
	}
	if _, err := Load(writeConfig(t, text)); err != nil {
		t.Errorf("Load: %v, want unknown keys accepted", err)
	}
}

// TestLoadMistypedKeys: an unknown key that is most likely a mistake is an
// error naming it, with what was meant, reported together with every
// validation error; the warnings come back beside them.
func TestLoadMistypedKeys(t *testing.T) {
	const adminRedis = "[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n"
	tests := []struct {
		name     string
		text     string
		want     []string // every problem, in order
		warnings []string
	}{
		{"Prt", "Prt = 7777\nAdminPort = 7778\nBacktraceLevel = 1\n" + adminRedis + "[Pool.default]\nAddr = \"127.0.0.1:6379\"\n",
			[]string{"Prt: unknown key (did you mean Port?)", "Port: must be 1..65535, not 0"},
			[]string{"unknown key BacktraceLevel ignored"}},
		{"Adr", "Port = 7777\nAdminPort = 7778\n" + adminRedis + "[Pool.default]\nAdr = \"127.0.0.1:6379\"\n",
			[]string{"Pool.default.Adr: unknown key (did you mean Addr?)", "Pool.default.Addr: is required (set it, or [Kairos] Embedded = true for an in-memory store that loses everything on stop)"}, nil},
		{"Adrs", "Port = 7777\nAdminPort = 7778\n" + adminRedis + "[Pool.default]\nCluster = true\nAdrs = [\"r:1\"]\n",
			[]string{"Pool.default.Adrs: unknown key (did you mean Addrs?)", "Pool.default.Addrs: is required with Cluster = true"}, nil},
		{"Addrss", "Port = 7777\nAdminPort = 7778\n" + adminRedis + "[Pool.default]\nCluster = true\nAddrss = [\"r:1\"]\n",
			[]string{"Pool.default.Addrss: unknown key (did you mean Addrs?)", "Pool.default.Addrs: is required with Cluster = true"}, nil},
		{"Clsuter", "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nClsuter = true\nAddrs = [\"r:1\"]\n[Pool.default]\nAddr = \"r:1\"\n",
			[]string{"AdminRedis.Clsuter: unknown key (did you mean Cluster?)", "AdminRedis.Addrs: needs Cluster = true"}, nil},
		{"Cluster at the top", "Port = 7777\nAdminPort = 7778\nCluster = true\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\n",
			[]string{"Cluster: unknown key (Cluster belongs in a Redis section: [Pool.NAME] or [AdminRedis])"}, nil},
		{"transposed letters", "Port = 7777\nAdminPort = 7778\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\nPasswrod = \"x\"\n",
			[]string{"Pool.default.Passwrod: unknown key (did you mean Password?)"}, nil},
		{"table name", "Port = 7777\nAdminPort = 7778\n" + adminRedis + "[Pools.default]\nAddr = \"r:1\"\n",
			[]string{"Pools: unknown table (did you mean [Pool]?)", `Pool.default: is required: add a [Pool.default] table with Addr = "host:port"`}, nil},
		{"two near keys", "Post = 7777\nPort = 7777\nAdminPort = 7778\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\n",
			[]string{"Post: unknown key (did you mean Host or Port?)"}, nil},
		{"Kairos key at the top", "Port = 7777\nAdminPort = 7778\nRequireDurableRedis = true\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\n",
			[]string{"RequireDurableRedis: unknown key (RequireDurableRedis belongs in [Kairos])"}, nil},
		{"top-level key after [Kairos]", "AdminPort = 7778\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\n[Kairos]\nEmbedded = false\nPort = 7777\n",
			[]string{"Kairos.Port: unknown key (Port belongs at the top of the file, before the first [table])", "Port: must be 1..65535, not 0"}, nil},
		{"Redis key at the top", "Port = 7777\nAdminPort = 7778\nAddr = \"r:1\"\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\n",
			[]string{"Addr: unknown key (Addr belongs in a Redis section: [Pool.NAME] or [AdminRedis])"}, nil},
		{"any unknown key in [Kairos]", minimal + "[Kairos]\nPumpBatchSize = 5\n",
			[]string{"Kairos.PumpBatchSize: unknown key ([Kairos] takes only Embedded, RequireDurableRedis, "}, nil},
		{"near miss in [Kairos]", minimal + "[kairos]\nEmbeded = true\n",
			[]string{"kairos.Embeded: unknown key (did you mean Embedded?)"}, nil},
		{"one value under two spellings", "Port = 7777\nAdminPort = 7778\n" + adminRedis + "[Pool.default]\nAddr = \"r:1\"\n[pool.default]\nAddr = \"r:2\"\n",
			[]string{"pool.default.Addr: set twice: also as Pool.default.Addr (keys match ignoring case); keep one"}, nil},
		{"a key under two spellings", "port = 7777\n" + minimal,
			[]string{"Port: set twice: also as port (keys match ignoring case); keep one"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, warnings, err := Parse("kairos.toml", []byte(tc.text))
			if err == nil {
				t.Fatal("Parse accepted the file")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			got := Problems(err)
			if len(got) != len(tc.want) {
				t.Fatalf("problems:\n%v\nwant %d: %q", err, len(tc.want), tc.want)
			}
			for i, p := range got {
				if !strings.HasPrefix(p.Error(), tc.want[i]) {
					t.Errorf("problem %d = %q, want %q", i, p.Error(), tc.want[i])
				}
			}
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings = %q, want %q", warnings, tc.warnings)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"adr", "addr", 1}, {"prt", "port", 1}, {"prot", "port", 1}, {"passwrod", "password", 1},
		{"host", "port", 2}, {"pumpbatchsize", "pumpbatch", 4}, {"é", "e", 1}, {"", "db", 2},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestLoadLegacyPools(t *testing.T) {
	cfg, warnings, err := LoadWithWarnings(writeConfig(t, minimal+"[Pool.v2]\nAddr = \"r:1\"\nVersion = \"v2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Pool["v2"]; ok {
		t.Error("the legacy pool was not dropped")
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "Pool.v2: ignored because Version") {
		t.Errorf("warnings = %q", warnings)
	}

	path := writeConfig(t, "Port = 1\nAdminPort = 2\n[AdminRedis]\nAddr = \"r:1\"\n[Pool.default]\nAddr = \"r:1\"\nVersion = \"v2\"\n")
	_, warnings, err = LoadWithWarnings(path)
	if err == nil {
		t.Fatal("a legacy default pool was accepted")
	}
	want := "config " + path + `: Pool.default: is required, and ignored because its Version is set (lmstfy ignores such pools too)`
	if err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if len(warnings) != 1 {
		t.Errorf("warnings = %q, want the legacy pool warning", warnings)
	}
}

func TestLoadValidationErrors(t *testing.T) {
	path := writeConfig(t, "Port = 0\nAdminPort = 7778\nLogLevel = \"verbose\"\n[Kairos]\nEmbedded = true\n[Pool.default]\n[Pool.b]\nDB = -1\n")
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load accepted an invalid file")
	}
	want := "config " + path + `: Port: must be 1..65535, not 0; LogLevel: unknown level "verbose"`
	if !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "; Pool.b.DB: must be >= 0, not -1") {
		t.Errorf("err = %q, want %q...Pool.b.DB", err, want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("errors.Is(err, ErrInvalid) = false")
	}
	var keys []string
	for _, p := range Problems(err) {
		keys = append(keys, p.Key)
	}
	if want := []string{"Port", "LogLevel", "Pool.b.DB"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("problem keys = %q, want %q", keys, want)
	}
}

func TestLoadDecodeErrors(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		wantLine int
		wantKey  string
		wantMsg  string // the error text after "config PATH: "
	}{
		{"syntax", "Port = 7777\nAdminPort = \n", 2, "AdminPort", "line 2: AdminPort: expected value but found '\\n' instead"},
		{"unterminated string", "Port = 7777\n\nHost = \"abc\n", 3, "Host", "line 3: Host: "},
		{"bad table header", "Port = 1\n[Pool.default\n", 2, "", "line 2: "},
		{"bad table header before more lines", "Port = 1\n[Pool.default\nAddr = \"x\"\n", 2, "", "line 2: "},
		{"junk after value", "Port = 1 x\n", 1, "", "line 1: expected a top-level item to end with a newline"},
		{"duplicate key", "Port = 1\nPort = 2\n", 2, "Port", "line 2: Port: Key 'Port' has already been defined."},
		{"string for int", "Host = \"h\"\nPort = \"7777\"\n", 2, "Port", "line 2: Port: incompatible types: TOML value has type string; destination has type integer"},
		{"string for pool DB", minimal + "DB = \"zero\"\n", 8, "Pool.default.DB", "line 8: Pool.default.DB: incompatible types"},
		{"int for bool", "EnableAccessLog = 1\n", 1, "EnableAccessLog", "line 1: EnableAccessLog: incompatible types"},
		{"pool is not a table", "[Pool]\ndefault = 3\n", 2, "Pool.default", "line 2: Pool.default: type mismatch"},
		{"int out of range", "Port = 99999999999999999999\n", 1, "Port", "line 1: Port: 99999999999999999999 is out of range for int64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			_, err := Load(path)
			if err == nil {
				t.Fatal("Load accepted a broken file")
			}
			prefix := "config " + path + ": " + tc.wantMsg
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("err = %q, want prefix %q", err, prefix)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Error("errors.Is(err, ErrInvalid) = false")
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("errors.As(%v, *DecodeError) = false", err)
			}
			if de.Line != tc.wantLine || (tc.wantKey != "" && de.Key != tc.wantKey) || de.File != path {
				t.Errorf("DecodeError = %+v, want line %d key %q", de, tc.wantLine, tc.wantKey)
			}
			if de.Err == nil || strings.HasPrefix(de.Reason, "toml:") {
				t.Errorf("DecodeError = %+v: want the toml error wrapped and a bare reason", de)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.toml")
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("err = %q, want the path in it", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
	}
	if errors.Is(err, ErrInvalid) {
		t.Error("a missing file matches ErrInvalid")
	}
}

func TestDecodeErrorFormat(t *testing.T) {
	tests := []struct {
		err  *DecodeError
		want string
	}{
		{&DecodeError{File: "f.toml", Line: 3, Key: "Port", Reason: "bad"}, "config f.toml: line 3: Port: bad"},
		{&DecodeError{File: "f.toml", Line: 3, Reason: "bad"}, "config f.toml: line 3: bad"},
		{&DecodeError{File: "f.toml", Reason: "bad"}, "config f.toml: bad"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	// A toml error in an unexpected shape still becomes a DecodeError.
	de := decodeError("f.toml", nil, errors.New("toml: something odd")).(*DecodeError)
	if de.Error() != "config f.toml: something odd" {
		t.Errorf("decodeError = %q", de)
	}
}

// TestLoadEmbeddedOnlyByName: only [Kairos] Embedded = true gets the
// in-memory store; a file whose Redis sections lack a usable Addr (a typo,
// a table in the wrong case, no table at all) is refused naming the key.
func TestLoadEmbeddedOnlyByName(t *testing.T) {
	const head = "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nAddr = \"127.0.0.1:6379\"\n"
	tests := []struct {
		name string
		text string
		want []string // problem keys, in order
	}{
		{"typo in Addr", head + "[Pool.default]\nAdr = \"127.0.0.1:6379\"\n", []string{"Pool.default.Adr", "Pool.default.Addr"}},
		{"typo in Addr, durable required", head + "[Pool.default]\nAdr = \"127.0.0.1:6379\"\n[Kairos]\nRequireDurableRedis = true\n",
			[]string{"Pool.default.Adr", "Pool.default.Addr"}},
		{"pool table in lower case, typo in Addr", head + "[pool.default]\nAdr = \"127.0.0.1:6379\"\n", []string{"pool.default.Adr", "Pool.default.Addr"}},
		{"pool name in another case", head + "[Pool.Default]\nAddr = \"127.0.0.1:6379\"\n", []string{"Pool.default"}},
		{"no pool", head, []string{"Pool.default"}},
		{"no AdminRedis", "Port = 7777\nAdminPort = 7778\n[Pool.default]\nAddr = \"127.0.0.1:6379\"\n", []string{"AdminRedis.Addr"}},
		{"empty sections", "Port = 7777\nAdminPort = 7778\n[AdminRedis]\n[Pool.default]\n", []string{"AdminRedis.Addr", "Pool.default.Addr"}},
		{"embedded but durable required", "Port = 7777\nAdminPort = 7778\n[Pool.default]\n[Kairos]\nEmbedded = true\nRequireDurableRedis = true\n",
			[]string{"Kairos.Embedded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(writeConfig(t, tc.text))
			if err == nil {
				t.Fatalf("Load accepted the file: embedded sections %q", cfg.EmbeddedSections())
			}
			var keys []string
			for _, p := range Problems(err) {
				keys = append(keys, p.Key)
			}
			if !reflect.DeepEqual(keys, tc.want) {
				t.Errorf("Load: %v\nproblem keys %q, want %q", err, keys, tc.want)
			}
		})
	}

	// The wrong case of a table name is fine with BurntSushi/toml (as in
	// lmstfy, which uses it too): struct fields match ignoring case, so
	// [pool.default] fills Pool["default"]; pool names are map keys and
	// match exactly.
	cfg, err := Load(writeConfig(t, "Port = 7777\nAdminPort = 7778\n[adminredis]\naddr = \"r:1\"\n[pool.default]\naddr = \"r:2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminRedis.Addr != "r:1" || cfg.Pool["default"].Addr != "r:2" || cfg.Embedded() {
		t.Errorf("Load = %+v", cfg)
	}

	cfg, err = Load(writeConfig(t, "Port = 7777\nAdminPort = 7778\n[AdminRedis]\nAddr = \"r:1\"\n[Pool.default]\n[Kairos]\nEmbedded = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.EmbeddedSections(), []string{"Pool.default"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EmbeddedSections() = %q, want %q", got, want)
	}
}

// TestLoadDockerConfig: the Docker image's config is durable: real Redis
// everywhere, RequireDurableRedis, no warning.
func TestLoadDockerConfig(t *testing.T) {
	cfg, warnings, err := LoadWithWarnings("../docker/kairos.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 || cfg.Kairos.Embedded || cfg.Embedded() || !cfg.Kairos.RequireDurableRedis {
		t.Errorf("warnings %q, Embedded %v (in use %v), RequireDurableRedis %v", warnings, cfg.Kairos.Embedded, cfg.Embedded(), cfg.Kairos.RequireDurableRedis)
	}
}

// TestLoadCluster: a Redis Cluster pool and admin Redis as a user writes
// them, seed nodes in Addrs or in one Addr.
func TestLoadCluster(t *testing.T) {
	const text = `
Port = 7777
AdminPort = 7778
[AdminRedis]
Cluster = true
Addr = "10.0.0.9:7000"
Password = "secret"
[Pool.default]
Addr = "127.0.0.1:6379"
MigrateTo = "big"
[Pool.big]
cluster = true
Addrs = ["10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"]
Password = "secret"
PoolSize = 16
`
	cfg, warnings, err := Parse("kairos.toml", []byte(text))
	if err != nil || warnings != nil {
		t.Fatalf("Parse: %v (warnings %q)", err, warnings)
	}
	big := cfg.Pool["big"]
	if !big.IsCluster() || big.IsSentinel() || big.PoolSize != 16 || big.Password != "secret" ||
		!reflect.DeepEqual(big.Endpoints(), []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}) {
		t.Errorf("Pool.big = %+v", big)
	}
	if a := cfg.AdminRedis; !a.IsCluster() || !reflect.DeepEqual(a.Endpoints(), []string{"10.0.0.9:7000"}) {
		t.Errorf("AdminRedis = %+v", a)
	}
	if d := cfg.Pool["default"]; d.IsCluster() || d.Describe() != "127.0.0.1:6379" {
		t.Errorf("Pool.default = %+v", d)
	}
	if got, want := big.Describe(), "the Redis Cluster of the seed nodes 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
}

func TestLoadTracingKeys(t *testing.T) {
	for _, tc := range []struct {
		kairos         string
		tracing, store bool
	}{
		{"", false, true},
		{"Tracing = true\nStoreTraceContext = true\n", true, true},
		{"StoreTraceContext = false\n", false, false},
	} {
		cfg, warnings, err := LoadWithWarnings(writeConfig(t, minimal+"[Kairos]\n"+tc.kairos))
		if err != nil || len(warnings) != 0 {
			t.Fatalf("%q: %v %q", tc.kairos, err, warnings)
		}
		if cfg.Kairos.Tracing != tc.tracing || cfg.Kairos.TraceContextStored() != tc.store {
			t.Errorf("%q: Tracing %v, TraceContextStored %v; want %v %v", tc.kairos, cfg.Kairos.Tracing, cfg.Kairos.TraceContextStored(), tc.tracing, tc.store)
		}
	}
}
