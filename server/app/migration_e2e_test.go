package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestMigrateTo: a pool with MigrateTo is served by the migration engine
// over HTTP (lmstfy's documented behaviour, which lmstfy's HEAD bypasses):
// publishes land in the new pool, consumers drain the old pool first.
func TestMigrateTo(t *testing.T) {
	oldR, newR := redistest.Start(t), redistest.Start(t)
	cfg := redisConfig(oldR.Addr)
	cfg.Pool = map[string]config.RedisConf{
		config.DefaultPoolName: {Addr: oldR.Addr, MigrateTo: "next"},
		"next":                 {Addr: newR.Addr},
	}
	k := startKairos(t, cfg)
	tok := k.newToken(t, "mig")
	api := k.API + "/api/mig/q"

	// A job that was in the old pool before the migration started.
	if _, err := k.App.Engines[config.DefaultPoolName].Publish(context.Background(), oldJob()); err != nil {
		t.Fatal(err)
	}
	r := doHTTP(t, http.MethodPut, api+"?tries=1", tok, []byte("new"), nil)
	r.wantStatus(t, http.StatusCreated)
	n, err := newR.Client().Keys(context.Background(), rdb.JobKey("mig", "q", "*")).Result()
	if err != nil || len(n) != 1 {
		t.Fatalf("jobs in the new pool = %v %v, want the one just published", n, err)
	}
	doHTTP(t, http.MethodGet, api+"/size", "", nil, nil).wantBody(t, `{"namespace":"mig","queue":"q","size":2}`)
	for _, want := range []string{"b2xk", "bmV3"} { // "old", then "new"
		r = doHTTP(t, http.MethodGet, api+"?ttr=30", tok, nil, nil)
		r.wantStatus(t, http.StatusOK)
		var j struct {
			Data  string `json:"data"`
			JobID string `json:"job_id"`
		}
		r.decode(t, &j)
		if j.Data != want {
			t.Fatalf("consumed %q, want %q (old pool first)", j.Data, want)
		}
		doHTTP(t, http.MethodDelete, api+"/job/"+j.JobID, tok, nil, nil).wantStatus(t, http.StatusNoContent)
	}
}

func oldJob() *engine.PublishRequest {
	return &engine.PublishRequest{Namespace: "mig", Queue: "q", Tries: 1, Body: []byte("old")}
}
