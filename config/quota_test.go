package config

import (
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/engine"
)

// TestDefaultQuota: [Pool.NAME] DefaultMaxJobs and DefaultMaxBytes are read
// from the file into the pool's DefaultQuota; a pool without them limits
// nothing.
func TestDefaultQuota(t *testing.T) {
	text := minimal + "DefaultMaxJobs = 50\nDefaultMaxBytes = 1048576\n\n[Pool.other]\nAddr = \"127.0.0.1:6380\"\n"
	cfg, _, err := Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Pool["default"].DefaultQuota(), (engine.Quota{MaxJobs: 50, MaxBytes: 1 << 20}); got != want {
		t.Errorf("default pool's quota = %+v, want %+v", got, want)
	}
	if got := cfg.Pool["other"].DefaultQuota(); !got.None() {
		t.Errorf("other pool's quota = %+v, want none", got)
	}
}

// TestDefaultQuotaRefused: a negative, non-integer or misplaced default
// stops the configuration with the key that is wrong.
func TestDefaultQuotaRefused(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"negative jobs", minimal + "DefaultMaxJobs = -1\n", "Pool.default.DefaultMaxJobs: must be >= 0 (0: no limit), not -1"},
		{"negative bytes", minimal + "DefaultMaxBytes = -5\n", "Pool.default.DefaultMaxBytes: must be >= 0 (0: no limit), not -5"},
		{"a string", minimal + "DefaultMaxJobs = \"fifty\"\n", "Pool.default.DefaultMaxJobs: incompatible types"},
		{"a float", minimal + "DefaultMaxBytes = 1.5\n", "Pool.default.DefaultMaxBytes:"},
		{"on the admin redis", strings.Replace(minimal, "[AdminRedis]\n", "[AdminRedis]\nDefaultMaxJobs = 10\n", 1),
			"AdminRedis.DefaultMaxJobs: is a pool setting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse("test.toml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
