package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
)

// TestMain stops the Redis Cluster the tests share (redistest.SharedCluster).
func TestMain(m *testing.M) { redistest.Main(m) }

// TestE2ERedisClusterRefused: Kairos cannot serve a Redis Cluster yet (its
// scripts touch keys of several slots: issue #22), so a pool or the admin
// Redis pointing at a cluster node stops the server at start-up with the
// section, the address and the reason. Before, the server started without
// a word and answered 500 CROSSSLOT to every publish, consume and token
// creation.
func TestE2ERedisClusterRefused(t *testing.T) {
	c := redistest.SharedCluster(t)
	// The node holding the rate limits, which the admin Redis loads at
	// start-up: from any other node that load answers MOVED.
	node := c.MasterOf(t, "__throttler_keys__")
	standalone := redistest.Start(t)
	tests := []struct {
		name    string
		cfg     func() *config.Config
		section string
		what    string // what the message asks to point elsewhere
	}{
		{"default pool", func() *config.Config { return redisConfig(node) }, "Pool.default", "the pool"},
		{"admin redis", func() *config.Config {
			cfg := redisConfig(standalone.Addr)
			cfg.AdminRedis = config.RedisConf{Addr: node}
			return cfg
		}, "AdminRedis", "AdminRedis"},
		{"another pool", func() *config.Config {
			cfg := redisConfig(standalone.Addr)
			cfg.Pool["b"] = config.RedisConf{Addr: node}
			return cfg
		}, "Pool.b", "the pool"},
		// A DB other than 0 fails at the connection's SELECT, before
		// INFO: the message is the same.
		{"pool with DB 1", func() *config.Config {
			cfg := redisConfig(standalone.Addr)
			cfg.Pool["b"] = config.RedisConf{Addr: node, DB: 1}
			return cfg
		}, "Pool.b", "the pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			a, err := app.New(context.Background(), cfg, app.Options{Logger: testLogger(t)})
			if err == nil {
				// Show what a user got: a server that starts and fails
				// every request.
				t.Fatalf("app.New accepted %s at the Redis Cluster node %s; then %s", tc.section, node, afterStart(t, a, cfg))
			}
			want := tc.section + ": " + node + " is a Redis Cluster node; Kairos does not support Redis Cluster yet (issue #22): " +
				"point " + tc.what + " at a standalone or Sentinel-managed Redis"
			if got := err.Error(); got != want {
				t.Errorf("app.New error:\n got %s\nwant %s", got, want)
			}
			if !errors.Is(err, app.ErrRedisCluster) {
				t.Errorf("app.New error %v: want errors.Is ErrRedisCluster", err)
			}
		})
	}
}

// afterStart runs an app that started on a cluster node and says what
// its first requests answered: a token for each pool, a publish and a
// consume with it.
func afterStart(tb testing.TB, a *app.App, cfg *config.Config) string {
	tb.Helper()
	if err := a.Listen(); err != nil {
		return "Listen: " + err.Error()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tb.Errorf("Run did not return within 10s")
		}
	}()
	api, admin := "http://"+a.Server.Addr(), "http://"+a.Server.AdminAddr()
	var said []string
	for _, pool := range cfg.PoolNames() {
		r := doHTTP(tb, http.MethodPost, admin+"/token/ns?description=cluster&pool="+pool, "", nil, nil)
		said = append(said, fmt.Sprintf("pool %s: POST /token %d %s", pool, r.Status, bytes.TrimSpace(r.Body)))
		var out struct{ Token string }
		if r.Status != http.StatusCreated || json.Unmarshal(r.Body, &out) != nil {
			continue
		}
		r = doHTTP(tb, http.MethodPut, api+"/api/ns/q", out.Token, []byte("hello"), nil)
		said = append(said, fmt.Sprintf("publish %d %s", r.Status, bytes.TrimSpace(r.Body)))
		r = doHTTP(tb, http.MethodGet, api+"/api/ns/q", out.Token, nil, nil)
		said = append(said, fmt.Sprintf("consume %d %s", r.Status, bytes.TrimSpace(r.Body)))
	}
	return strings.Join(said, "; ")
}
