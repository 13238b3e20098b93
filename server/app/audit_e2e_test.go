package app_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestE2EAuditLog: the app wires the audit log to the admin Redis with
// [Kairos] AuditMaxEntries, on a redis-server and on a Redis Cluster:
// admin actions are listed newest first with their account, the log keeps
// the newest AuditMaxEntries, and a refused attempt is recorded too.
func TestE2EAuditLog(t *testing.T) {
	for _, tier := range []string{"redis", "cluster"} {
		t.Run(tier, func(t *testing.T) {
			var cfg *config.Config
			if tier == "cluster" {
				c := redistest.SharedCluster(t)
				c.Flush(t)
				cfg = clusterConfig(c)
			} else {
				cfg = redisConfig(redistest.Start(t).Addr)
			}
			cfg.Accounts = map[string]string{"ops": "ops-password-1"}
			cfg.Kairos.AuditMaxEntries = 3
			k := startKairos(t, cfg)
			basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:ops-password-1"))}
			for i := range 4 {
				r := doHTTP(t, http.MethodPost, fmt.Sprintf("%s/accesslog?status=%s", k.Admin, []string{"enable", "disable"}[i%2]), "", nil, basic)
				r.wantStatus(t, http.StatusOK)
			}
			r := doHTTP(t, http.MethodPost, k.Admin+"/token/ns?description=x", "", nil, nil)
			if r.Status != http.StatusUnauthorized {
				t.Fatalf("%v: want 401", r)
			}

			r = doHTTP(t, http.MethodGet, k.Admin+"/audit", "", nil, basic)
			r.wantStatus(t, http.StatusOK)
			var out struct {
				Entries []struct {
					Seq           int64
					Account       string
					Authenticated bool
					Route         string
					Status        int
				}
				Next int64
			}
			r.decode(t, &out)
			var got []string
			for _, e := range out.Entries {
				got = append(got, fmt.Sprintf("%d %s %v %s %d", e.Seq, e.Account, e.Authenticated, e.Route, e.Status))
			}
			want := []string{
				"5  false /token/:namespace 401",
				"4 ops true /accesslog 200",
				"3 ops true /accesslog 200",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") || out.Next != 0 {
				t.Fatalf("GET /audit:\n%s\nnext %d; want\n%s", strings.Join(got, "\n"), out.Next, strings.Join(want, "\n"))
			}
		})
	}
}
