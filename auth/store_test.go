package auth

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestStoreCreateListDeleteVerify(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := newTestStore(t, c, nil)

		tok := mustCreate(t, s, "", "ns1", "first", "", Scope{})
		if _, err := ulid.ParseStrict(tok); err != nil || len(tok) != 26 {
			t.Fatalf("default token %q is not a ULID: %v", tok, err)
		}
		// lmstfy's exact layout: HSETNX tk/{pool}/{ns} token description.
		if desc, ok := getTokenDesc(t, c, DefaultPool, "ns1", tok); !ok || desc != "first" {
			t.Fatalf("tk/default/ns1[%s] = %q, %v; want \"first\"", tok, desc, ok)
		}
		if n, err := c.Exists(ctx, scopeKey(DefaultPool, "ns1")).Result(); err != nil || n != 0 {
			t.Fatalf("an unscoped token wrote a scope hash (exists=%d, err=%v)", n, err)
		}
		scope, err := s.Verify(ctx, DefaultPool, "ns1", tok)
		if err != nil || !scope.IsZero() {
			t.Fatalf("Verify = %+v, %v; want zero scope, nil", scope, err)
		}
		if _, err := s.Verify(ctx, DefaultPool, "ns2", tok); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("Verify in another namespace: %v, want ErrInvalidToken", err)
		}

		btok := mustCreate(t, s, "b", "ns1", "in b", "", Scope{})
		pool, secret := ParseToken(btok)
		if pool != "b" || len(secret) != 26 {
			t.Fatalf("token of pool b = %q, want b:<ulid>", btok)
		}
		if _, err := s.Verify(ctx, "b", "ns1", secret); err != nil {
			t.Fatalf("Verify(b) = %v", err)
		}
		if _, err := s.Verify(ctx, DefaultPool, "ns1", secret); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("token of pool b verified in pool default: %v", err)
		}

		for _, tc := range []struct {
			pool   string
			prefix bool
			want   map[string]string
		}{
			{"", false, map[string]string{tok: "first"}},
			{DefaultPool, true, map[string]string{"default:" + tok: "first"}},
			{"b", true, map[string]string{"b:" + secret: "in b"}},
			{"b", false, map[string]string{secret: "in b"}},
		} {
			got, err := s.List(ctx, tc.pool, "ns1", tc.prefix)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("List(%q, prefix=%v) = %v, %v; want %v", tc.pool, tc.prefix, got, err, tc.want)
			}
		}
		if got, err := s.List(ctx, "", "empty", false); err != nil || len(got) != 0 {
			t.Errorf("List(empty namespace) = %v, %v", got, err)
		}

		if err := s.Delete(ctx, "", "ns1", tok); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, ok := getTokenDesc(t, c, DefaultPool, "ns1", tok); ok {
			t.Fatal("token still in Redis after Delete")
		}
		// Refused at once by the instance that deleted it, although it was cached.
		if _, err := s.Verify(ctx, DefaultPool, "ns1", tok); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("Verify after Delete: %v, want ErrInvalidToken", err)
		}
		if err := s.Delete(ctx, "", "ns1", "no-such-token"); err != nil {
			t.Fatalf("Delete of an unknown token: %v", err)
		}
		if err := s.Delete(ctx, "", "ns1", btok); err != nil { // "b:secret": prefix wins
			t.Fatalf("Delete(b:…): %v", err)
		}
		if _, err := s.Verify(ctx, "b", "ns1", secret); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("Verify after Delete(b:…): %v", err)
		}
	})
}

func TestStoreCreateErrors(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := newTestStore(t, c, nil)
		const existing = "an-existing-user-token"
		mustCreate(t, s, "", "ns", "d", existing, Scope{})

		tests := []struct {
			name, pool, ns, token string
			scope                 Scope
			want                  error
		}{
			{name: "duplicate", ns: "ns", token: existing, want: ErrTokenExists},
			{name: "duplicate with default prefix", ns: "ns", token: "default:" + existing, want: ErrTokenExists},
			{name: "short user token", ns: "ns", token: "0123456789012345678", want: ErrTokenTooShort},
			{name: "empty secret after prefix", ns: "ns", token: "a-very-long-pool-name:", want: ErrTokenTooShort},
			{name: "unknown pool", pool: "nope", ns: "ns", want: ErrPoolNotFound},
			{name: "unknown pool in token prefix", ns: "ns", token: "nope:01234567890123456789", want: ErrPoolNotFound},
			{name: "namespace too long", ns: strings.Repeat("n", 256), want: ErrNamespaceTooLong},
			{name: "namespace forbidden characters", ns: "a/b", want: ErrInvalidNamespace},
			{name: "empty namespace", ns: "", want: ErrInvalidNamespace},
			{name: "ungrantable role", ns: "ns", scope: Scope{Roles: []Role{RoleRead}}, want: ErrInvalidScope},
			{name: "bad queue in scope", ns: "ns", scope: Scope{Queues: []string{"_reserved"}}, want: ErrInvalidScope},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.Create(ctx, tc.pool, tc.ns, "desc", tc.token, tc.scope)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Create = %q, %v; want %v", got, err, tc.want)
				}
			})
		}
		// The failed duplicate did not overwrite the description.
		if desc, _ := getTokenDesc(t, c, DefaultPool, "ns", existing); desc != "d" {
			t.Fatalf("description after duplicate Create = %q, want d", desc)
		}
		// lmstfy's messages, verbatim (the admin API shows them).
		for err, msg := range map[error]string{
			ErrTokenExists:      "the token has already existed",
			ErrTokenTooShort:    "the user token was too short",
			ErrPoolNotFound:     "the pool was not exists",
			ErrNamespaceTooLong: "the namespace name was too long",
			ErrInvalidNamespace: "namespace name contains forbidden characters",
		} {
			if err.Error() != msg {
				t.Errorf("message %q, want %q", err.Error(), msg)
			}
		}
	})
}

func TestStoreUserTokenPoolForms(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := newTestStore(t, c, nil)
		const secret = "0123456789abcdefghij" // exactly 20 characters

		tests := []struct {
			name, pool, token string
			wantPool, wantTok string
			secret            string
		}{
			{"bare user token, default pool", "", secret, DefaultPool, secret, secret},
			{"bare user token, pool b", "b", secret + "1", "b", "b:" + secret + "1", secret + "1"},
			{"prefix names the pool", "", "b:" + secret + "2", "b", "b:" + secret + "2", secret + "2"},
			{"prefix wins over pool", DefaultPool, "b:" + secret + "3", "b", "b:" + secret + "3", secret + "3"},
			{"default prefix", "b", "default:" + secret + "4", DefaultPool, secret + "4", secret + "4"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got := mustCreate(t, s, tc.pool, "ns", "d", tc.token, Scope{})
				if got != tc.wantTok {
					t.Fatalf("Create returned %q, want %q", got, tc.wantTok)
				}
				if _, ok := getTokenDesc(t, c, tc.wantPool, "ns", tc.secret); !ok {
					t.Fatalf("token not stored in tk/%s/ns", tc.wantPool)
				}
				p, sec := ParseToken(got)
				if _, err := s.Verify(ctx, p, "ns", sec); err != nil {
					t.Fatalf("Verify(ParseToken(%q)) = %v", got, err)
				}
			})
		}
		// Delete with the pool argument and a bare token.
		if err := s.Delete(ctx, "b", "ns", secret+"1"); err != nil {
			t.Fatal(err)
		}
		if _, ok := getTokenDesc(t, c, "b", "ns", secret+"1"); ok {
			t.Fatal("Delete(b, bare token) left the token")
		}
	})
}

func TestStoreUnknownPool(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, newMiniredisClient(t), nil)
	if !s.HasPool("") || !s.HasPool(DefaultPool) || !s.HasPool("b") || s.HasPool("nope") {
		t.Fatal("HasPool disagrees with the configured pools")
	}
	if _, err := s.List(ctx, "nope", "ns", true); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("List: %v", err)
	}
	if err := s.Delete(ctx, "nope", "ns", "t"); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("Delete: %v", err)
	}
	if err := s.Delete(ctx, "", "ns", "nope:t"); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("Delete(nope:t): %v", err)
	}
	if _, err := s.Verify(ctx, "nope", "ns", "t"); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("Verify: %v", err)
	}
}

func TestStoreScopes(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := newTestStore(t, c, nil)
		want := Scope{Queues: []string{"q1", "q2"}, Roles: []Role{RolePublish}}
		tok := mustCreate(t, s, "", "ns", "publisher", "", want)

		// A fresh instance (no cache) reads the scope from Redis.
		other := newTestStore(t, c, nil)
		got, err := other.Verify(ctx, DefaultPool, "ns", tok)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Verify = %+v, %v; want %+v", got, err, want)
		}
		if !got.Allows("q1", RolePublish) || got.Allows("q1", RoleConsume) || got.Allows("q3", RolePublish) {
			t.Fatalf("scope %+v allows the wrong things", got)
		}

		// A token written by lmstfy (no scope) may do everything.
		seedToken(t, c, DefaultPool, "ns", "lmstfy-made-token-0000", "old")
		if got, err := other.Verify(ctx, DefaultPool, "ns", "lmstfy-made-token-0000"); err != nil || !got.IsZero() {
			t.Fatalf("Verify(lmstfy token) = %+v, %v", got, err)
		}

		// Scopes lists the scoped token, keyed as List shows it, and
		// nothing for the unrestricted one.
		scopes, err := other.Scopes(ctx, DefaultPool, "ns")
		_, secret := ParseToken(tok)
		if err != nil || len(scopes) != 1 || !reflect.DeepEqual(scopes[secret], want) {
			t.Fatalf("Scopes = %+v, %v; want %s → %+v only", scopes, err, secret, want)
		}
		if list, _ := other.List(ctx, DefaultPool, "ns", false); list[secret] != "publisher" {
			t.Fatalf("List = %v: Scopes' key is not List's", list)
		}

		// An unreadable scope fails closed, and is not taken for "unknown token".
		seedToken(t, c, DefaultPool, "ns", "corrupt-scope-token-0000", "x")
		if err := c.HSet(ctx, scopeKey(DefaultPool, "ns"), "corrupt-scope-token-0000", "{not json").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Verify(ctx, DefaultPool, "ns", "corrupt-scope-token-0000"); err == nil || errors.Is(err, ErrInvalidToken) {
			t.Fatalf("Verify with a corrupt scope = %v, want a non-nil internal error", err)
		}
		if _, err := other.Scopes(ctx, DefaultPool, "ns"); err == nil {
			t.Fatal("Scopes with a corrupt scope: no error")
		}

		// Delete removes the scope too, so a re-created token starts unrestricted.
		if err := s.Delete(ctx, "", "ns", tok); err != nil {
			t.Fatal(err)
		}
		if n, _ := c.HLen(ctx, scopeKey(DefaultPool, "ns")).Result(); n != 1 { // only the corrupt one left
			t.Fatalf("scope hash has %d fields after Delete, want 1", n)
		}
	})
}

func TestStoreCacheExpiry(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	clock := newFakeClock()
	s := newTestStore(t, c, clock)
	const tok = "created-elsewhere-000000"

	// Negative answers are cached: a token created by another instance is
	// accepted here once the cached refusal expires.
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify(unknown) = %v", err)
	}
	seedToken(t, c, DefaultPool, "ns", tok, "d")
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify within CacheTTL of a refusal = %v, want the cached ErrInvalidToken", err)
	}
	clock.Advance(DefaultCacheTTL)
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); err != nil {
		t.Fatalf("Verify after CacheTTL = %v", err)
	}

	// Positive answers are cached too, for CacheTTL only.
	if err := c.HDel(ctx, tokenKey(DefaultPool, "ns"), tok).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultCacheTTL - time.Millisecond)
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); err != nil {
		t.Fatalf("Verify within CacheTTL of an acceptance = %v, want the cached acceptance", err)
	}
	clock.Advance(time.Millisecond)
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify after CacheTTL = %v, want ErrInvalidToken", err)
	}
}

func TestStoreCacheDisabled(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	s := NewStore(c, testPools, quietLogger(), StoreOptions{CacheTTL: -1})
	const tok = "created-elsewhere-000000"
	seedToken(t, c, DefaultPool, "ns", tok, "d")
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); err != nil {
		t.Fatal(err)
	}
	if err := c.HDel(ctx, tokenKey(DefaultPool, "ns"), tok).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify without cache = %v, want ErrInvalidToken at once", err)
	}
}

func TestStoreCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	s := NewStore(newMiniredisClient(t), testPools, quietLogger(), StoreOptions{MaxCacheEntries: 8})
	for i := range 100 {
		if _, err := s.Verify(ctx, DefaultPool, "ns", fmt.Sprintf("random-%d", i)); !errors.Is(err, ErrInvalidToken) {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	n := len(s.cache)
	s.mu.Unlock()
	if n > 8 {
		t.Fatalf("cache holds %d entries, want <= 8", n)
	}
}

// TestStoreCrossInstanceRevocation shows that a token deleted through one
// instance is refused by another instance sharing the Redis within 1 s.
func TestStoreCrossInstanceRevocation(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		clock := newFakeClock()
		a := newTestStore(t, c, clock)
		b := newTestStore(t, c, clock)
		tok := mustCreate(t, a, "", "ns", "d", "", Scope{})
		if _, err := b.Verify(ctx, DefaultPool, "ns", tok); err != nil { // b caches the acceptance
			t.Fatalf("b.Verify = %v", err)
		}
		if err := a.Delete(ctx, "", "ns", tok); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		if _, err := b.Verify(ctx, DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("b.Verify 1 s after a.Delete = %v, want ErrInvalidToken", err)
		}
	})
}

// TestStoreCrossInstanceRevocationRealClock is the same on the real clock and
// a real redis-server: the second instance refuses the token within 1 s.
func TestStoreCrossInstanceRevocationRealClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Start(t).Client()
	a := NewStore(c, testPools, quietLogger(), StoreOptions{})
	b := NewStore(c, testPools, quietLogger(), StoreOptions{})
	tok := mustCreate(t, a, "", "ns", "d", "", Scope{})
	if _, err := b.Verify(ctx, DefaultPool, "ns", tok); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "", "ns", tok); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := b.Verify(ctx, DefaultPool, "ns", tok)
		if errors.Is(err, ErrInvalidToken) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > time.Second {
			t.Fatal("second instance still accepts the deleted token after 1 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("refused by the other instance after %v", time.Since(start).Round(time.Millisecond))
}

// TestStoreVerifyCached: VerifyCached answers without Redis what Verify
// would answer from memory, and ErrNotCached otherwise: before the first
// Verify, once the entry expired, and once the token was deleted here. A
// token deleted on another instance is refused within 1 s by both.
func TestStoreVerifyCached(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	clock := newFakeClock()
	a, b := newTestStore(t, c, clock), newTestStore(t, c, clock)
	tok := mustCreate(t, a, "", "ns", "d", "", Scope{Roles: []Role{RolePublish}})
	cases := []struct {
		name, pool, token string
		want              error
	}{
		{"unknown pool", "nopool", tok, ErrPoolNotFound},
		{"empty token", DefaultPool, "", ErrInvalidToken},
		{"reserved form", DefaultPool, HashToken(tok), ErrInvalidToken},
		{"never verified", DefaultPool, tok, ErrNotCached},
		{"unknown, never verified", DefaultPool, "unknown-token-0123456789", ErrNotCached},
	}
	for _, tc := range cases {
		if _, err := b.VerifyCached(tc.pool, "ns", tc.token); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := b.Verify(ctx, DefaultPool, "ns", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verify(ctx, DefaultPool, "ns", "unknown-token-0123456789"); !errors.Is(err, ErrInvalidToken) {
		t.Fatal(err)
	}
	if scope, err := b.VerifyCached(DefaultPool, "ns", tok); err != nil || !scope.Allows("q", RolePublish) || scope.Allows("q", RoleConsume) {
		t.Errorf("cached: %+v %v, want the token's scope", scope, err)
	}
	if _, err := b.VerifyCached(DefaultPool, "ns", "unknown-token-0123456789"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("cached unknown token: %v, want ErrInvalidToken (negative cache)", err)
	}
	if err := a.Delete(ctx, "", "ns", tok); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if _, err := b.VerifyCached(DefaultPool, "ns", tok); !errors.Is(err, ErrNotCached) {
		t.Errorf("1 s after a delete elsewhere: %v, want ErrNotCached", err)
	}
	if _, err := b.Verify(ctx, DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("1 s after a delete elsewhere: %v, want ErrInvalidToken", err)
	}
}

// TestStoreFloodKeepsKnownTokens: a full cache makes room by dropping the
// answers about unknown tokens first, so that a flood of random tokens does
// not send every known token back to Redis.
func TestStoreFloodKeepsKnownTokens(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	s := NewStore(c, testPools, quietLogger(), StoreOptions{MaxCacheEntries: 8})
	var known []string
	for i := range 4 {
		known = append(known, mustCreate(t, s, "", "ns", fmt.Sprint(i), "", Scope{}))
		if _, err := s.Verify(ctx, DefaultPool, "ns", known[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		if _, err := s.Verify(ctx, DefaultPool, "ns", fmt.Sprintf("random-%d", i)); !errors.Is(err, ErrInvalidToken) {
			t.Fatal(err)
		}
	}
	for _, tok := range known {
		if _, err := s.VerifyCached(DefaultPool, "ns", tok); err != nil {
			t.Errorf("known token after a flood of unknown ones: %v, want cached", err)
		}
	}
}

// TestStoreScopeLayout: scopes live in tks/{tk/POOL/NS}, in the Redis
// Cluster slot of the token hash tk/POOL/NS, so that a token and its scope
// are created by one script on one node. Scopes an earlier version kept in
// tks/POOL/NS stay in force (read compatibly, no migration), and Delete
// clears them. Off a cluster, Create also writes the earlier hash, so that
// servers of the earlier version (a rolling upgrade) never take a new
// scoped token for an unrestricted one; on a cluster it cannot (another
// slot), and no earlier version ran there.
func TestStoreScopeLayout(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		_, cluster := c.(*redis.ClusterClient)
		const (
			current = "tks/{tk/default/ns}"
			earlier = "tks/default/ns"
		)
		s := newTestStore(t, c, nil)
		consume := Scope{Roles: []Role{RoleConsume}}

		// Made by the earlier version: token and scope in its layout.
		seedToken(t, c, DefaultPool, "ns", "earlier-token-0123456789", "old")
		if err := c.HSet(ctx, earlier, "earlier-token-0123456789", `{"roles":["consume"]}`).Err(); err != nil {
			t.Fatal(err)
		}
		scope, err := s.Verify(ctx, DefaultPool, "ns", "earlier-token-0123456789")
		if err != nil || !reflect.DeepEqual(scope, consume) {
			t.Fatalf("Verify(earlier scoped token) = %+v, %v; want %+v", scope, err, consume)
		}

		// Made now.
		tok := mustCreate(t, s, "", "ns", "new", "", consume)
		if v, err := c.HGet(ctx, current, tok).Result(); err != nil || v != `{"roles":["consume"]}` {
			t.Errorf("HGET %s %s = %q, %v", current, tok, v, err)
		}
		v, err := c.HGet(ctx, earlier, tok).Result()
		switch {
		case cluster && !errors.Is(err, redis.Nil):
			t.Errorf("on a cluster HGET %s %s = %q, %v; want nothing", earlier, tok, v, err)
		case !cluster && (err != nil || v != `{"roles":["consume"]}`):
			t.Errorf("HGET %s %s = %q, %v; want the scope, for servers of the earlier version", earlier, tok, v, err)
		}
		fresh := newTestStore(t, c, nil) // no cache
		if scope, err := fresh.Verify(ctx, DefaultPool, "ns", tok); err != nil || !reflect.DeepEqual(scope, consume) {
			t.Errorf("Verify(new scoped token) = %+v, %v; want %+v", scope, err, consume)
		}

		// Deleted: nothing left in either layout.
		for _, tk := range []string{tok, "earlier-token-0123456789"} {
			if err := s.Delete(ctx, "", "ns", tk); err != nil {
				t.Fatal(err)
			}
		}
		for _, key := range []string{"tk/default/ns", current, earlier} {
			if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("after Delete, EXISTS %s = %d, %v; want 0", key, n, err)
			}
		}
	})
}

// TestStoreRefreshAhead: VerifyCached renews a cached acceptance in the
// second half of its CacheTTL in the background, so a token in steady use
// never misses the cache; a token deleted by another instance is refused
// by the renewal, within CacheTTL as before.
func TestStoreRefreshAhead(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	clock := newFakeClock()
	s := newTestStore(t, c, clock)
	const tok = "refreshed-ahead-00000000"
	seedToken(t, c, DefaultPool, "ns", tok, "d")
	if _, err := s.Verify(ctx, DefaultPool, "ns", tok); err != nil {
		t.Fatal(err)
	}
	key := cacheKey{DefaultPool, "ns", HashToken(tok)}
	expires := func() time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cache[key].expires
	}
	waitRenewed := func(after time.Time) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			s.mu.Lock()
			busy := s.refreshing[key]
			s.mu.Unlock()
			if !busy && !expires().Equal(after) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no renewal: expires %v, refreshing %v", expires(), busy)
			}
		}
	}
	first := expires()
	// In the first half of CacheTTL nothing is read.
	clock.Advance(DefaultCacheTTL/2 - time.Millisecond)
	if _, err := s.VerifyCached(DefaultPool, "ns", tok); err != nil {
		t.Fatal(err)
	}
	if s.refreshing[key] || !expires().Equal(first) {
		t.Fatal("renewed in the first half of CacheTTL")
	}
	// In the second half the cached answer is served and renewed.
	clock.Advance(time.Millisecond)
	if _, err := s.VerifyCached(DefaultPool, "ns", tok); err != nil {
		t.Fatal(err)
	}
	waitRenewed(first)
	if got, want := expires(), first.Add(DefaultCacheTTL/2); !got.Equal(want) {
		t.Fatalf("renewed entry expires at %v, want %v", got, want)
	}
	// Past the first answer's expiry, still cached: no miss.
	clock.Advance(DefaultCacheTTL/2 + time.Millisecond)
	if _, err := s.VerifyCached(DefaultPool, "ns", tok); err != nil {
		t.Fatalf("VerifyCached after the first answer's CacheTTL = %v, want the renewed acceptance", err)
	}
	// Deleted by another instance: the next renewal caches the refusal.
	waitRenewed(first.Add(DefaultCacheTTL / 2))
	if err := c.HDel(ctx, tokenKey(DefaultPool, "ns"), tok).Err(); err != nil {
		t.Fatal(err)
	}
	renewed := expires()
	clock.Advance(DefaultCacheTTL / 2)
	if _, err := s.VerifyCached(DefaultPool, "ns", tok); err != nil {
		t.Fatal(err) // still the cached acceptance, whose renewal starts now
	}
	waitRenewed(renewed)
	if _, err := s.VerifyCached(DefaultPool, "ns", tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("VerifyCached of a token deleted elsewhere after its renewal = %v, want ErrInvalidToken", err)
	}
}
