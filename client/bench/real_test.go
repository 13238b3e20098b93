package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
)

// startKairos runs a whole Kairos on a throwaway redis-server and returns
// its base URL and a token for namespace "bench".
func startKairos(t *testing.T) (string, string) {
	t.Helper()
	srv := redistest.Start(t)
	return startKairosOn(t, config.RedisConf{Addr: srv.Addr})
}

// startKairosOn runs a whole Kairos whose admin Redis and default pool are
// rc (a Redis Cluster with rc.Cluster).
func startKairosOn(t *testing.T, rc config.RedisConf) (string, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Host, cfg.Port, cfg.AdminPort = "127.0.0.1", 0, 0
	cfg.LogLevel = "error"
	cfg.Kairos.Embedded = false
	cfg.AdminRedis = rc
	cfg.Pool = map[string]config.RedisConf{config.DefaultPoolName: rc}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	resp, err := http.Post("http://"+a.Server.AdminAddr()+"/token/bench?description=bench", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.Token == "" {
		t.Fatalf("token: %v", err)
	}
	return "http://" + a.Server.Addr(), tok.Token
}

// TestScenariosOnKairos runs every scenario in miniature against a real
// Kairos: delivered counts must add up, delayed jobs must never fire early.
func TestScenariosOnKairos(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	addr, token := startKairos(t)
	cfg := Config{Addr: addr, Token: token, Concurrency: 8, Duration: 500 * time.Millisecond, Jobs: 300, Rate: 500}
	ctx := context.Background()
	for _, run := range []func(context.Context, Config) (Result, error){Publish, BulkPublish, ConsumeAck, Latency} {
		r, err := run(ctx, cfg)
		if err != nil || r.Ops == 0 || r.Errors != 0 {
			t.Fatalf("%s: %+v %v", r.Scenario, r, err)
		}
	}
	cfg.Jobs = 50
	r, err := Delayed(ctx, cfg)
	if err != nil || r.Ops != 50 {
		t.Fatalf("delayed: %+v %v", r, err)
	}
	if r.MinMS < 0 {
		t.Fatalf("a delayed job fired %.1f ms early", -r.MinMS)
	}
	cfg.Jobs = 2000
	if r, err = Burst(ctx, cfg); err != nil || r.Ops != 2000 {
		t.Fatalf("burst: %+v %v", r, err)
	}
	cfg.Concurrency = 200
	if r, err = Idle(ctx, cfg); err != nil || r.Ops != 2 {
		t.Fatalf("idle: %+v %v", r, err)
	}
}
