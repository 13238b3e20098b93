package app_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
)

// TestEmbeddedOnlyByName: a config built in code (no Validate) reaches the
// in-memory store only with [Kairos] Embedded = true; a Redis section
// without Addr is otherwise an error naming its key, and the embedded
// store is refused with RequireDurableRedis.
func TestEmbeddedOnlyByName(t *testing.T) {
	tests := []struct {
		name string
		edit func(*config.Config)
		want []string // problem keys
	}{
		{"no Addr anywhere", func(c *config.Config) { c.Kairos.Embedded = false },
			[]string{"AdminRedis.Addr", "Pool.default.Addr"}},
		{"pool without Addr", func(c *config.Config) {
			c.Kairos.Embedded = false
			c.AdminRedis.Addr = "127.0.0.1:1"
		}, []string{"Pool.default.Addr"}},
		{"embedded and RequireDurableRedis", func(c *config.Config) { c.Kairos.RequireDurableRedis = true },
			[]string{"Kairos.Embedded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := redisConfig("")
			tc.edit(cfg)
			a, err := app.New(context.Background(), cfg, app.Options{Logger: testLogger(t)})
			if err == nil {
				_ = a.Run(canceled())
				t.Fatal("app.New accepted the config")
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("errors.Is(%v, config.ErrInvalid) = false", err)
			}
			var keys []string
			for _, p := range config.Problems(err) {
				keys = append(keys, p.Key)
			}
			if strings.Join(keys, " ") != strings.Join(tc.want, " ") {
				t.Errorf("app.New: %v: problem keys %q, want %q", err, keys, tc.want)
			}
		})
	}
}

// TestEmbeddedWarningNamesSections: with a real admin Redis and an
// embedded pool, the warning names [Pool.default] only, and the real
// Redis holds the tokens.
func TestEmbeddedWarningNamesSections(t *testing.T) {
	rs := redistest.Start(t)
	cfg := redisConfig("")
	cfg.AdminRedis.Addr = rs.Addr
	log, hook := logtest.NewNullLogger()
	a, err := app.New(context.Background(), cfg, app.Options{Logger: log})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() { _ = a.Run(canceled()) })
	var warned []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "Embedded") {
			warned = append(warned, e.Message)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "[Pool.default] is in an in-memory Redis") ||
		strings.Contains(warned[0], "AdminRedis") || !strings.Contains(warned[0], "NOTHING THERE IS DURABLE") {
		t.Errorf("warnings = %q, want one naming [Pool.default] only", warned)
	}
	if _, err := a.Tokens.Create(context.Background(), config.DefaultPoolName, "ns", "d", "", auth.Scope{}); err != nil {
		t.Fatal(err)
	}
	if n, err := rs.Client().DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Errorf("real admin Redis holds %d keys (%v), want the token", n, err)
	}
}

// canceled returns a context that is already done, so that Run closes what
// New opened and returns at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestEmbeddedReady: a server on the embedded store (make run) is ready:
// the in-memory store has no INFO replication or persistence sections, and
// needs none (it never loads nor replicates).
func TestEmbeddedReady(t *testing.T) {
	k := startKairos(t, redisConfig(""))
	for _, base := range []string{k.API, k.Admin} {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ready":true`) {
			t.Errorf("GET %s/readyz = %d %s, want 200 ready", base, resp.StatusCode, body)
		}
	}
}
