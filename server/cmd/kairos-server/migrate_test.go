package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kairos-dev/kairos/engine/lmstfy/lmstfytest"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestMigrateFromLmstfy: -migrate-from-lmstfy on lmstfy's config file
// imports the jobs a real lmstfy wrote, says exactly what it did, and
// exits; run again, it finds nothing and says so.
func TestMigrateFromLmstfy(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	lm := lmstfytest.Start(t, rs.Addr)
	cli := lm.Client("mig", lm.Token(t, "mig"))
	for _, delay := range []uint32{0, 0, 600} {
		if _, err := cli.Publish("q", []byte("x"), 3600, 2, delay); err != nil {
			t.Fatal(err)
		}
	}
	lm.Stop(t)
	path := filepath.Join(t.TempDir(), "lmstfy.toml")
	conf := fmt.Sprintf("Host = \"127.0.0.1\"\nPort = %d\nAdminHost = \"127.0.0.1\"\nAdminPort = %d\nLogLevel = \"error\"\n"+
		"[AdminRedis]\nAddr = %q\n[Pool.default]\nAddr = %q\n", redistest.FreePort(t), redistest.FreePort(t), rs.Addr, rs.Addr)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMain(t, "-c", path, "-migrate-from-lmstfy")
	want := regexp.MustCompile(`^pool default: imported 3 lmstfy jobs into pool default in [0-9.]+s: 2 ready, 1 delayed, 0 in flight, 0 dead; ` +
		`0 were in Kairos already \(an earlier import\), 0 expired, 0 malformed entries removed; 2 lmstfy registries deleted; tokens and limits are used as they are\n$`)
	if code != 0 || !want.MatchString(stdout) {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runMain(t, "-c", path, "-migrate-from-lmstfy")
	if code != 0 || stdout != "pool default: no lmstfy job found; nothing changed\n" {
		t.Fatalf("second run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
