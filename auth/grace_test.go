package auth

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestStoreGrace: while the admin Redis fails as in a failover (a cluster
// that is down, a node that refuses connections), a token verified within
// Grace is accepted with the scope it had; an unknown token, a token Redis
// said was deleted, a token deleted here, and any token after Grace are
// not; an error about the data is no failover. With Redis healthy a
// token deleted elsewhere is refused once the cache expires, grace or not.
func TestStoreGrace(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	clock := newFakeClock()
	s := NewStore(c, testPools, quietLogger(), StoreOptions{Now: clock.Now, Grace: 3 * time.Second})
	other := NewStore(c, testPools, quietLogger(), StoreOptions{}) // another instance
	scope := Scope{Roles: []Role{RolePublish}}
	scoped := mustCreate(t, other, "", "ns", "a", "scoped-token-000000000", scope)
	plain := mustCreate(t, other, "", "ns", "b", "plain-token-0000000000", Scope{})
	gone := mustCreate(t, other, "", "ns", "c", "gone-token-00000000000", Scope{})
	mine := mustCreate(t, other, "", "ns", "d", "mine-token-00000000000", Scope{})
	for _, tok := range []string{scoped, plain, gone, mine} {
		if _, err := s.Verify(ctx, "", "ns", tok); err != nil {
			t.Fatalf("Verify(%s) = %v", tok, err)
		}
	}
	// Healthy: deleted on another instance, refused once the cache expires.
	if err := other.Delete(ctx, "", "ns", gone); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "", "ns", mine); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultCacheTTL)
	if _, err := s.Verify(ctx, "", "ns", gone); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("token deleted elsewhere, Redis healthy, after the cache TTL: %v, want ErrInvalidToken", err)
	}

	m.SetError("CLUSTERDOWN The cluster is down")
	clock.Advance(DefaultCacheTTL) // every answer expired, 1 s after the checks
	got, err := s.Verify(ctx, "", "ns", scoped)
	if err != nil || !reflect.DeepEqual(got, scope) {
		t.Fatalf("scoped token within grace: %+v, %v; want its scope %+v", got, err, scope)
	}
	if _, err := s.Verify(ctx, "", "ns", plain); err != nil {
		t.Fatalf("token within grace: %v", err)
	}
	if _, err := s.VerifyCached("", "ns", plain); !errors.Is(err, ErrNotCached) {
		t.Fatalf("VerifyCached during the grace: %v, want ErrNotCached (the grace is Verify's, on a failed round trip)", err)
	}
	for name, tok := range map[string]string{"unknown": "unknown-token-00000000", "deleted elsewhere": gone, "deleted here": mine} {
		if _, err := s.Verify(ctx, "", "ns", tok); err == nil || errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s token while Redis fails: %v, want the Redis error", name, err)
		}
	}
	// An error about the data, not a failover: no grace.
	m.SetError("ERR something else")
	if _, err := s.Verify(ctx, "", "ns", plain); err == nil {
		t.Fatal("token accepted on an error that is no failover")
	}
	m.SetError("CLUSTERDOWN The cluster is down")
	clock.Advance(2 * time.Second) // 3 s after the last check: grace over
	if _, err := s.Verify(ctx, "", "ns", plain); err == nil {
		t.Fatal("token accepted after its grace")
	}
	m.SetError("")
	if _, err := s.Verify(ctx, "", "ns", plain); err != nil {
		t.Fatalf("Redis back: %v", err)
	}

	// A closed connection (a dead node) is a failover too.
	clock.Advance(DefaultCacheTTL)
	m.Close()
	if _, err := s.Verify(ctx, "", "ns", plain); err != nil {
		t.Fatalf("token within grace, Redis down: %v", err)
	}

	// Grace 0 is off.
	m2 := miniredis.RunT(t)
	c2 := redis.NewClient(&redis.Options{Addr: m2.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c2.Close() })
	off := NewStore(c2, testPools, quietLogger(), StoreOptions{Now: clock.Now})
	tok := mustCreate(t, off, "", "ns", "e", "", Scope{})
	clock.Advance(DefaultCacheTTL)
	m2.SetError("CLUSTERDOWN The cluster is down")
	if _, err := off.Verify(ctx, "", "ns", tok); err == nil {
		t.Fatal("token accepted on a failed check without grace")
	}
}

// TestStoreLegacyScopeFolded: on a Redis Cluster a scope in the legacy
// hash (another slot: data imported from an earlier version's standalone
// admin Redis) is in force, and is read once: the namespace's legacy
// scopes are then folded into the token hash's slot, and verifying reads
// that slot only. A scope already in the current hash wins.
func TestStoreLegacyScopeFolded(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	cl.Flush(t)
	c := cl.Client(t)
	const old, both = "legacy-scoped-00000000", "both-scoped-0000000000"
	seedToken(t, c, DefaultPool, "ns", old, "old")
	seedToken(t, c, DefaultPool, "ns", both, "both")
	seedToken(t, c, DefaultPool, "ns2", "unscoped-token-0000000", "no legacy hash")
	if err := c.HSet(ctx, legacyScopeKey(DefaultPool, "ns"), old, `{"roles":["consume"]}`, both, `{"roles":["consume"]}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, scopeKey(DefaultPool, "ns"), both, `{"roles":["publish"]}`).Err(); err != nil {
		t.Fatal(err)
	}
	if cl.MasterOf(t, legacyScopeKey(DefaultPool, "ns")) == cl.MasterOf(t, tokenKey(DefaultPool, "ns")) {
		t.Log("the legacy hash shares a master with the token hash here; the fold is still checked")
	}
	s := NewStore(c, testPools, quietLogger(), StoreOptions{CacheTTL: -1})
	for _, tc := range []struct {
		tok  string
		want Role
	}{{old, RoleConsume}, {both, RolePublish}} {
		got, err := s.Verify(ctx, "", "ns", tc.tok)
		if err != nil || !reflect.DeepEqual(got.Roles, []Role{tc.want}) {
			t.Fatalf("Verify(%s) = %+v, %v; want roles [%s]", tc.tok, got, err, tc.want)
		}
	}
	if n, err := c.Exists(ctx, foldedKey(DefaultPool, "ns")).Result(); err != nil || n != 1 {
		t.Fatalf("namespace not marked folded: %d, %v", n, err)
	}
	// Folded: the legacy hash is not read any more (gone, the scope holds).
	if err := c.Del(ctx, legacyScopeKey(DefaultPool, "ns")).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Verify(ctx, "", "ns", old)
	if err != nil || !reflect.DeepEqual(got.Roles, []Role{RoleConsume}) {
		t.Fatalf("Verify(%s) after the fold = %+v, %v; want roles [consume]", old, got, err)
	}
	// A namespace without legacy scopes is folded too, at its first check.
	if _, err := s.Verify(ctx, "", "ns2", "unscoped-token-0000000"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, foldedKey(DefaultPool, "ns2")).Result(); err != nil || n != 1 {
		t.Fatalf("ns2 not marked folded: %d, %v", n, err)
	}
	// Unknown tokens fold nothing.
	if _, err := s.Verify(ctx, "", "ns3", "unknown-token-0000000"); !errors.Is(err, ErrInvalidToken) {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, foldedKey(DefaultPool, "ns3")).Result(); n != 0 {
		t.Fatal("an unknown token folded its namespace")
	}
}
