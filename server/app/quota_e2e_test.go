package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/config"
)

// TestE2EQuota: the quotas through the whole app and the Go client (issue
// #31): [Pool.default] DefaultMaxJobs reaches the engine (app.New), a
// publish beyond it fails with client.ErrQuotaExceeded (and not
// ErrRateLimited), the admin client reads, sets, lists and deletes
// quotas, and an ACK gives the room back. Under TestE2ECluster it runs on
// the real Redis Cluster, the jobs in one queue (one slot group: the check
// is exact there).
func TestE2EQuota(t *testing.T) {
	cfg := e2eRedisConfig(t)()
	p := cfg.Pool[config.DefaultPoolName]
	p.DefaultMaxJobs = 3
	cfg.Pool[config.DefaultPoolName] = p
	k := startKairos(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(k.API, client.WithToken(k.newToken(t, "tenant")), client.WithNamespace("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	adm, err := client.NewAdmin(k.Admin)
	if err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		if _, err := c.Publish(ctx, "q", []byte("0123456789")); err != nil {
			t.Fatalf("publish %d under the default quota: %v", i, err)
		}
	}
	_, err = c.Publish(ctx, "q", []byte("one too many"))
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrQuotaExceeded) || errors.Is(err, client.ErrRateLimited) || !errors.As(err, &apiErr) ||
		apiErr.Status != 429 || apiErr.Message != "namespace quota exceeded: max_jobs 3" {
		t.Fatalf("publish beyond the default quota: %v", err)
	}
	q, err := adm.Quota(ctx, "", "tenant")
	if err != nil || !q.Default || q.Quota != (client.Quota{MaxJobs: 3}) || q.Jobs != 3 || q.Bytes < 30 { // bytes: the stored jobs (bodies and metadata)
		t.Fatalf("Quota: %+v, %v", q, err)
	}

	// Its own quota replaces the default.
	if q, err = adm.SetQuota(ctx, "", "tenant", client.Quota{MaxJobs: 4, MaxBytes: 1 << 20}); err != nil || q.Default || q.Quota.MaxJobs != 4 {
		t.Fatalf("SetQuota: %+v, %v", q, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // the new quota reaches the publishes within the engine's refresh
		_, err := c.Publish(ctx, "q", []byte("0123456789"))
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrQuotaExceeded) || time.Now().After(deadline) {
			t.Fatalf("publish under the raised quota: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err = c.Publish(ctx, "q", []byte("x")); !errors.Is(err, client.ErrQuotaExceeded) || apiErrMessage(err) != "namespace quota exceeded: max_jobs 4" {
		t.Fatalf("publish beyond the namespace's quota: %v", err)
	}
	// Bulk: refused whole.
	if _, err = c.BatchPublish(ctx, "q", []any{"a", "b"}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("bulk publish beyond the quota: %v", err)
	}
	// An ACK gives the room back at once.
	job, err := c.Consume(ctx, "q", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, "q", job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "q", []byte("0123456789")); err != nil {
		t.Fatalf("publish after an ACK: %v", err)
	}

	list, err := adm.Quotas(ctx, "")
	if err != nil || list.Defaults[config.DefaultPoolName] != (client.Quota{MaxJobs: 3}) {
		t.Fatalf("Quotas: %+v, %v", list, err)
	}
	var found bool
	for _, nq := range list.Namespaces {
		if nq.Namespace == "tenant" {
			found = nq.Jobs == 4 && nq.Quota.MaxJobs == 4 && !nq.Default
		}
	}
	if !found {
		t.Fatalf("Quotas: tenant missing or wrong in %+v", list.Namespaces)
	}
	if err := adm.DeleteQuota(ctx, "", "tenant"); err != nil {
		t.Fatal(err)
	}
	if q, err = adm.Quota(ctx, "", "tenant"); err != nil || !q.Default || q.Quota.MaxJobs != 3 {
		t.Fatalf("after DeleteQuota: %+v, %v", q, err)
	}
}

// apiErrMessage is the server's message of an *APIError, or "".
func apiErrMessage(err error) string {
	var e *client.APIError
	if errors.As(err, &e) {
		return e.Message
	}
	return ""
}
