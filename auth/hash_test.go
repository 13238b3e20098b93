package auth

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestHashTokenAndFingerprint(t *testing.T) {
	// echo -n secret | sha256sum
	const sum = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
	if got := HashToken("secret"); got != "sha256-"+sum {
		t.Errorf("HashToken = %q", got)
	}
	if got := Fingerprint("secret"); got != "sha256-2bb80d537b1d" {
		t.Errorf("Fingerprint(secret) = %q", got)
	}
	if got := Fingerprint(HashToken("secret")); got != "sha256-2bb80d537b1d" {
		t.Errorf("Fingerprint(hashed form) = %q", got)
	}
	tests := []struct {
		s    string
		want bool
	}{
		{"sha256-2bb80d537b1d", true},
		{"sha256-" + sum, true},
		{"sha256-2bb80d537b1", false}, // 11 digits
		{"sha256-" + sum + "0", false},
		{"sha256-2BB80D537B1D", false},
		{"sha256-2bb80d537b1g", false},
		{"2bb80d537b1d2bb80d537b1d", false},
		{"b:sha256-2bb80d537b1d", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := IsFingerprint(tc.s); got != tc.want {
			t.Errorf("IsFingerprint(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// dumpContains reports where the admin Redis holds s: in a key name, a hash
// field or value, or a string value.
func dumpContains(tb testing.TB, c redis.UniversalClient, s string) []string {
	tb.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var found []string
	for _, k := range keys {
		if strings.Contains(k, s) {
			found = append(found, "key "+k)
		}
		switch typ, _ := c.Type(ctx, k).Result(); typ {
		case "hash":
			m, err := c.HGetAll(ctx, k).Result()
			if err != nil {
				tb.Fatal(err)
			}
			for f, v := range m {
				if strings.Contains(f, s) || strings.Contains(v, s) {
					found = append(found, "hash "+k+" field "+f)
				}
			}
		case "string":
			if v, _ := c.Get(ctx, k).Result(); strings.Contains(v, s) {
				found = append(found, "string "+k)
			}
		}
	}
	return found
}

func newHashedStore(tb testing.TB, c redis.UniversalClient) *Store {
	tb.Helper()
	return NewStore(c, testPools, quietLogger(), StoreOptions{HashTokens: true, CacheTTL: -1})
}

func TestStoreHashedTokens(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := newHashedStore(t, c)
		plainStore := NewStore(c, testPools, quietLogger(), StoreOptions{CacheTTL: -1})

		tok := mustCreate(t, s, "", "ns", "worker", "", Scope{})
		scoped := mustCreate(t, s, "b", "ns", "reader", "", Scope{Queues: []string{"q"}, Roles: []Role{RoleConsume}})
		_, scopedSecret := ParseToken(scoped)
		user := mustCreate(t, s, "", "ns", "user", "user-chosen-token-0123", Scope{})

		for _, secret := range []string{tok, scopedSecret, user} {
			if where := dumpContains(t, c, secret); len(where) > 0 {
				t.Errorf("the admin Redis holds token %q in %v", secret, where)
			}
		}
		if desc, ok := getTokenDesc(t, c, DefaultPool, "ns", HashToken(tok)); !ok || desc != "worker" {
			t.Errorf("tk field %s = %q, %v", HashToken(tok), desc, ok)
		}

		// Both stores accept hashed tokens, with their scopes.
		for name, st := range map[string]*Store{"hashed": s, "plain": plainStore} {
			if _, err := st.Verify(ctx, DefaultPool, "ns", tok); err != nil {
				t.Errorf("%s store: Verify(hashed token) = %v", name, err)
			}
			scope, err := st.Verify(ctx, "b", "ns", scopedSecret)
			if err != nil || scope.Allows("q", RolePublish) || !scope.Allows("q", RoleConsume) {
				t.Errorf("%s store: scoped token: %+v, %v", name, scope, err)
			}
			// What a Redis dump shows is not a token.
			for _, bad := range []string{HashToken(tok), Fingerprint(tok), strings.TrimPrefix(HashToken(tok), HashedPrefix), tok + "x"} {
				if _, err := st.Verify(ctx, DefaultPool, "ns", bad); !errors.Is(err, ErrInvalidToken) {
					t.Errorf("%s store: Verify(%q) = %v, want ErrInvalidToken", name, bad, err)
				}
			}
		}

		// Listings show fingerprints only.
		got, err := s.List(ctx, "", "ns", false)
		want := map[string]string{Fingerprint(tok): "worker", Fingerprint(user): "user"}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("List = %v, %v; want %v", got, err, want)
		}
		got, err = s.List(ctx, "b", "ns", true)
		want = map[string]string{"b:" + Fingerprint(scopedSecret): "reader"}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("List(b, prefix) = %v, %v; want %v", got, err, want)
		}
		// A store without the switch lists hashed tokens by fingerprint too.
		got, err = plainStore.List(ctx, "", "ns", false)
		want = map[string]string{Fingerprint(tok): "worker", Fingerprint(user): "user"}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("plain List = %v, %v; want %v", got, err, want)
		}

		// A token exists in either form.
		if _, err := s.Create(ctx, "", "ns", "again", user, Scope{}); !errors.Is(err, ErrTokenExists) {
			t.Errorf("Create(existing, hashed) = %v", err)
		}
		if _, err := plainStore.Create(ctx, "", "ns", "again", user, Scope{}); !errors.Is(err, ErrTokenExists) {
			t.Errorf("Create(existing hashed, plain store) = %v", err)
		}
		for _, st := range []*Store{s, plainStore} {
			for _, reserved := range []string{"sha256-0123456789abcdef0123", "b:sha256-0123456789abcdef"} {
				if _, err := st.Create(ctx, "", "ns", "x", reserved, Scope{}); !errors.Is(err, ErrReservedToken) {
					t.Errorf("Create(%q) = %v, want ErrReservedToken", reserved, err)
				}
			}
		}

		// Delete by token and by fingerprint ("pool:" prefix allowed).
		if err := s.Delete(ctx, "", "ns", tok); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "", "ns", "b:"+Fingerprint(scopedSecret)); err != nil {
			t.Fatal(err)
		}
		if err := plainStore.Delete(ctx, "", "ns", Fingerprint(user)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ pool, tok string }{{"", tok}, {"b", scopedSecret}, {"", user}} {
			if _, err := s.Verify(ctx, tc.pool, "ns", tc.tok); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("Verify(%s) after Delete = %v", tc.tok, err)
			}
		}
		if n, _ := c.HLen(ctx, scopeKey("b", "ns")).Result(); n != 0 {
			t.Errorf("scope left behind: %d fields", n)
		}
		// Deleting an unknown fingerprint is not an error.
		if err := s.Delete(ctx, "", "ns", "sha256-000000000000"); err != nil {
			t.Errorf("Delete(unknown fingerprint) = %v", err)
		}
	})
}

// TestStoreHashedMigration: tokens made in clear (by lmstfy, or before the
// switch) keep working with HashTokens, are listed by fingerprint, and can
// be deleted by token or fingerprint.
func TestStoreHashedMigration(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	seedToken(t, c, DefaultPool, "ns", "legacy-token-one-0123456", "one")
	seedToken(t, c, DefaultPool, "ns", "legacy-token-two-0123456", "two")
	if err := c.HSet(ctx, scopeKey(DefaultPool, "ns"), "legacy-token-two-0123456", `{"roles":["consume"]}`).Err(); err != nil {
		t.Fatal(err)
	}
	s := newHashedStore(t, c)
	if _, err := s.Verify(ctx, "", "ns", "legacy-token-one-0123456"); err != nil {
		t.Fatalf("legacy token refused: %v", err)
	}
	scope, err := s.Verify(ctx, "", "ns", "legacy-token-two-0123456")
	if err != nil || !reflect.DeepEqual(scope, Scope{Roles: []Role{RoleConsume}}) {
		t.Fatalf("legacy scoped token: %+v, %v", scope, err)
	}
	got, err := s.List(ctx, "", "ns", false)
	want := map[string]string{Fingerprint("legacy-token-one-0123456"): "one", Fingerprint("legacy-token-two-0123456"): "two"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %v, %v; want %v", got, err, want)
	}
	// Without the switch the lmstfy listing is unchanged.
	plain := NewStore(c, testPools, quietLogger(), StoreOptions{})
	got, err = plain.List(ctx, "", "ns", false)
	want = map[string]string{"legacy-token-one-0123456": "one", "legacy-token-two-0123456": "two"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("plain List = %v, %v; want %v", got, err, want)
	}
	if err := s.Delete(ctx, "", "ns", "legacy-token-one-0123456"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "", "ns", Fingerprint("legacy-token-two-0123456")); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.HLen(ctx, tokenKey(DefaultPool, "ns")).Result(); n != 0 {
		t.Errorf("%d tokens left", n)
	}
	if n, _ := c.HLen(ctx, scopeKey(DefaultPool, "ns")).Result(); n != 0 {
		t.Errorf("%d scopes left", n)
	}
}

func TestStoreAmbiguousFingerprint(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	a := HashedPrefix + "0123456789ab" + strings.Repeat("0", 52)
	b := HashedPrefix + "0123456789ab" + strings.Repeat("1", 52)
	seedToken(t, c, DefaultPool, "ns", a, "a")
	seedToken(t, c, DefaultPool, "ns", b, "b")
	s := newHashedStore(t, c)
	if err := s.Delete(ctx, "", "ns", HashedPrefix+"0123456789ab"); !errors.Is(err, ErrAmbiguousFingerprint) {
		t.Fatalf("Delete(ambiguous) = %v", err)
	}
	if n, _ := c.HLen(ctx, tokenKey(DefaultPool, "ns")).Result(); n != 2 {
		t.Fatalf("an ambiguous Delete removed tokens: %d left", n)
	}
	if err := s.Delete(ctx, "", "ns", HashedPrefix+"0123456789ab1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := getTokenDesc(t, c, DefaultPool, "ns", a); !ok {
		t.Error("the other token went too")
	}
	if _, ok := getTokenDesc(t, c, DefaultPool, "ns", b); ok {
		t.Error("the named token is still there")
	}
}

func TestThrottlerHashedTokens(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		store := newHashedStore(t, c)
		tok := mustCreate(t, store, "", "ns", "worker", "", Scope{})
		th := NewThrottler(c, quietLogger(), ThrottlerOptions{HashTokens: true})
		plain := NewThrottler(c, quietLogger(), ThrottlerOptions{})

		if err := th.Add(ctx, "", "ns", tok, Limit{Write: 2, Interval: 100}); err != nil {
			t.Fatal(err)
		}
		if got := allowN(t, th, "", "ns", tok, true, 3); got != 2 {
			t.Errorf("%d of 3 allowed, want 2", got)
		}
		if where := dumpContains(t, c, tok); len(where) > 0 {
			t.Errorf("the admin Redis holds the token in %v", where)
		}
		// Another instance without the switch applies the same limit.
		if err := plain.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if got := allowN(t, plain, "", "ns", tok, true, 1); got != 0 {
			t.Errorf("plain instance allowed %d past the shared limit", got)
		}
		for name, x := range map[string]*Throttler{"hashed": th, "plain": plain} {
			list, err := x.List(ctx, true)
			want := []LimitEntry{{Namespace: "ns", Token: Fingerprint(tok), Limiter: Limit{Write: 2, Interval: 100}}}
			if err != nil || !reflect.DeepEqual(list, want) {
				t.Errorf("%s List = %+v, %v; want %+v", name, list, err, want)
			}
		}
		// The admin routes take the token or its fingerprint.
		for _, name := range []string{tok, Fingerprint(tok), HashToken(tok)} {
			if l, ok, err := th.Get(ctx, "", "ns", name); err != nil || !ok || l.Write != 2 {
				t.Errorf("Get(%q) = %+v, %v, %v", name, l, ok, err)
			}
		}
		if err := th.Add(ctx, "", "ns", Fingerprint(tok), Limit{Read: 1, Interval: 1}); !errors.Is(err, ErrLimitExists) {
			t.Errorf("Add(fingerprint) over a limit = %v", err)
		}
		if err := th.Set(ctx, "", "ns", Fingerprint(tok), Limit{Write: 5, Interval: 100}); err != nil {
			t.Fatal(err)
		}
		if l, ok, err := th.Get(ctx, "", "ns", tok); err != nil || !ok || l.Write != 5 {
			t.Errorf("Get after Set(fingerprint) = %+v, %v, %v", l, ok, err)
		}
		if err := th.Set(ctx, "", "ns", "sha256-ffffffffffff", Limit{Write: 5, Interval: 100}); !errors.Is(err, ErrUnknownFingerprint) {
			t.Errorf("Set(unknown fingerprint) = %v", err)
		}
		if _, ok, err := th.Get(ctx, "", "ns", "sha256-ffffffffffff"); ok || err != nil {
			t.Errorf("Get(unknown fingerprint) = %v, %v", ok, err)
		}
		if err := th.Delete(ctx, "", "ns", Fingerprint(tok)); err != nil {
			t.Fatal(err)
		}
		if n, _ := c.HLen(ctx, throttlerKey).Result(); n != 0 {
			t.Errorf("%d limits left after Delete(fingerprint)", n)
		}
		checkBucketOff(t, c, bucketKey(DefaultPool, "ns", HashToken(tok), true))
	})
}

// TestThrottlerHashedMigration: a limit stored in clear applies with the
// switch on, and moves to the hashed form when set again.
func TestThrottlerHashedMigration(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	const tok = "legacy-token-0123456789"
	plain := NewThrottler(c, quietLogger(), ThrottlerOptions{})
	if err := plain.Add(ctx, "", "ns", tok, Limit{Read: 1, Interval: 100}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.HExists(ctx, throttlerKey, "default/ns/"+tok).Result(); !got {
		t.Fatal("a plain throttler did not store the limit in lmstfy's layout")
	}
	th := NewThrottler(c, quietLogger(), ThrottlerOptions{HashTokens: true})
	if err := th.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := allowN(t, th, "", "ns", tok, false, 2); got != 1 {
		t.Fatalf("legacy limit: %d of 2 allowed", got)
	}
	list, _ := th.List(ctx, false)
	if len(list) != 1 || list[0].Token != Fingerprint(tok) {
		t.Errorf("List = %+v, want the fingerprint", list)
	}
	if err := th.Add(ctx, "", "ns", tok, Limit{Read: 3, Interval: 100}); !errors.Is(err, ErrLimitExists) {
		t.Errorf("Add over a plain limit = %v", err)
	}
	if err := th.Set(ctx, "", "ns", tok, Limit{Read: 3, Interval: 100}); err != nil {
		t.Fatal(err)
	}
	if where := dumpContains(t, c, tok); len(where) > 0 {
		t.Errorf("after Set the token is still in %v", where)
	}
	if l, ok, err := plain.Get(ctx, "", "ns", tok); err != nil || !ok || l.Read != 3 {
		t.Errorf("plain Get after the move = %+v, %v, %v", l, ok, err)
	}
}
