package config

import (
	"strings"
	"testing"
)

// TestMemoryReserve: [Pool.NAME] MemoryReserve is read from the file; a
// pool without it keeps DefaultMemoryReserve, and 0 keeps none.
func TestMemoryReserve(t *testing.T) {
	text := minimal + "MemoryReserve = 0.25\n\n[Pool.other]\nAddr = \"127.0.0.1:6380\"\n\n[Pool.none]\nAddr = \"127.0.0.1:6381\"\nMemoryReserve = 0\n"
	cfg, _, err := Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	for pool, want := range map[string]float64{"default": 0.25, "other": DefaultMemoryReserve, "none": 0} {
		if got := cfg.Pool[pool].Reserve(); got != want {
			t.Errorf("pool %s's reserve = %g, want %g", pool, got, want)
		}
	}
}

// TestMemoryReserveRefused: a reserve outside [0, 0.5], of the wrong type
// or on the admin Redis stops the configuration with the key that is
// wrong.
func TestMemoryReserveRefused(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"negative", minimal + "MemoryReserve = -0.1\n", "Pool.default.MemoryReserve: must be a fraction of maxmemory from 0 (no reserve) to 0.5, e.g. 0.1 for the last 10 %, not -0.1"},
		{"percent", minimal + "MemoryReserve = 10\n", "Pool.default.MemoryReserve: must be a fraction of maxmemory from 0 (no reserve) to 0.5, e.g. 0.1 for the last 10 %, not 10"},
		{"above half", minimal + "MemoryReserve = 0.6\n", "Pool.default.MemoryReserve: must be a fraction"},
		{"nan", minimal + "MemoryReserve = nan\n", "Pool.default.MemoryReserve: must be a fraction"},
		{"a string", minimal + "MemoryReserve = \"10%\"\n", "Pool.default.MemoryReserve:"},
		{"on the admin redis", strings.Replace(minimal, "[AdminRedis]\n", "[AdminRedis]\nMemoryReserve = 0.1\n", 1),
			"AdminRedis.MemoryReserve: is a pool setting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse("test.toml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
