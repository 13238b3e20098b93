package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestRedisForking(t *testing.T) {
	for _, c := range []struct {
		info string
		want bool
	}{
		{"# Persistence\r\nloading:0\r\nrdb_bgsave_in_progress:0\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\nmodule_fork_in_progress:0\r\n", false},
		{"# Persistence\r\nrdb_bgsave_in_progress:1\r\naof_rewrite_in_progress:0\r\n", true},
		{"aof_rewrite_in_progress:1\r\n", true},
		{"aof_rewrite_scheduled:1\r\n", true},
		{"module_fork_in_progress:1\r\n", true},
		{"rdb_changes_since_last_save:12\r\naof_rewrites:3\r\n", false},
	} {
		if got := redisForking(c.info); got != c.want {
			t.Errorf("redisForking(%q) = %v, want %v", c.info, got, c.want)
		}
	}
}

// TestRedisProbe reads a real Redis's CPU time, and waits out a snapshot
// that rdb-key-save-delay stretches to about half a second.
func TestRedisProbe(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, err := NewRedisProbe(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if cpu, err := p.CPU(ctx); err != nil || cpu <= 0 {
		t.Fatalf("CPU = %v, %v", cpu, err)
	}
	start := time.Now()
	if waited, err := p.Quiet(ctx); err != nil || waited != 0 {
		t.Fatalf("Quiet on an idle Redis = %v, %v; want 0", waited, err)
	}
	if d := time.Since(start); d < quietFor || d > 5*time.Second {
		t.Fatalf("Quiet on an idle Redis took %v; want quietFor (%v) and a little", d, quietFor)
	}

	c := srv.Client()
	defer c.Close()
	for i := 0; i < 10; i++ {
		if err := c.Set(ctx, fmt.Sprint("k", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ConfigSet(ctx, "rdb-key-save-delay", "50000").Err(); err != nil { // µs per key
		t.Fatal(err)
	}
	if err := c.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waited, err := p.Quiet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited < 200*time.Millisecond || time.Since(start) < waited+quietFor {
		t.Fatalf("Quiet during a snapshot of about 500 ms waited %v, returned after %v", waited, time.Since(start))
	}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil || redisForking(info) {
		t.Fatalf("Quiet returned while Redis still forked (%v):\n%s", err, info)
	}

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := c.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Quiet(cctx); err == nil {
		t.Fatal("Quiet returned no error when its context ended during a snapshot")
	}
}
