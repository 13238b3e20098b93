package app_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/server/app"
)

// TestTLSFilesCheckedFirst: a certificate file that does not exist stops
// app.New with the key and the reason before any Redis is dialled (the
// Redis here refuses connections: its error would come first otherwise).
func TestTLSFilesCheckedFirst(t *testing.T) {
	cfg := config.Default()
	cfg.Host, cfg.Port, cfg.AdminPort = "127.0.0.1", 0, 0
	cfg.AdminRedis = config.RedisConf{Addr: "127.0.0.1:1"}
	cfg.Pool = map[string]config.RedisConf{config.DefaultPoolName: {Addr: "127.0.0.1:1"}}
	missing := filepath.Join(t.TempDir(), "tls.crt")
	cfg.TLS = config.TLS{CertFile: missing, KeyFile: missing}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := app.New(ctx, cfg, app.Options{})
	p := config.Problems(err)
	if a != nil || len(p) != 1 || p[0].Key != "TLS.CertFile" ||
		p[0].Reason != "certificate file: open "+missing+": no such file or directory" {
		t.Fatalf("app.New = %v, %v; want the TLS.CertFile problem", a, err)
	}
}
