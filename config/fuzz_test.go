package config

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, an error
// about the content must match ErrInvalid, and an accepted configuration
// must pass Validate again (Parse never returns a config it refused).
func FuzzParse(f *testing.F) {
	for _, path := range []string{"dev.toml", "demo-lmstfy.toml", "testdata/lmstfy-demo-conf.toml", "testdata/lmstfy-docker-image-conf.toml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		minimal,
		minimal + "[Kairos]\nHashTokens = true\nProtectAdminEndpoints = false\nAuthenticateSize = true\nReadHeaderTimeoutSecond = 1\n",
		minimal + "TTLSecond = -1\nTriesNum = 70000\n",
		minimal + "TTLSecond = 99999999999999999999\n",
		minimal + "[Kairos]\nMaxTimeoutSecond = 0\nReadHeaderTimeoutSecond = 4294967296\n",
		"Port = \"7777\"\n",
		"[Pool.default\nAddr = 1",
		"Port = 7777\nAdminPort = 7778\n[Pool.\"a b\"]\nAddr = \"x\"\n[Pool.default]\nMigrateTo = \"default\"\n",
		"[Accounts]\n\"\" = \"x\"\n",
		"\xff\xfe\x00",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, _, err := Parse("fuzz.toml", data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned a config with error %v", err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error %v does not match ErrInvalid", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate refuses: %v", err)
		}
		if len(cfg.PoolNames()) == 0 {
			t.Fatal("accepted config has no pool")
		}
	})
}
