package auth

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/engine"
)

// FuzzParseToken: ParseToken never panics, always names a pool without a
// colon, gives back the raw token when there is no prefix, and FormatToken
// inverts it whenever the secret cannot be mistaken for a prefix.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{
		"", ":", "::", "secret", "b:secret", ":secret", "default:secret", "a:b:c",
		"sha256-0123456789ab", "b:sha256-0123456789ab", "\xff:\x00", "01J5Z9A3KXW5T8N2QH4R6M7P0C",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		pool, token := ParseToken(raw)
		if pool == "" || strings.Contains(pool, ":") {
			t.Fatalf("ParseToken(%q) pool = %q", raw, pool)
		}
		i := strings.IndexByte(raw, ':')
		switch {
		case i < 0:
			if pool != DefaultPool || token != raw {
				t.Fatalf("ParseToken(%q) = %q, %q; want the default pool and the raw token", raw, pool, token)
			}
		case i == 0:
			if pool != DefaultPool || token != raw[1:] {
				t.Fatalf("ParseToken(%q) = %q, %q", raw, pool, token)
			}
		default:
			if pool+":"+token != raw {
				t.Fatalf("ParseToken(%q) = %q, %q does not split it", raw, pool, token)
			}
		}
		if !strings.Contains(token, ":") {
			if p, tk := ParseToken(FormatToken(pool, token)); p != pool || tk != token {
				t.Fatalf("ParseToken(FormatToken(%q, %q)) = %q, %q", pool, token, p, tk)
			}
		}
		// cutToken (Create, Delete) agrees with ParseToken on prefixed tokens.
		if p, secret, ok := cutToken(raw); ok != (i >= 0) || ok && (p != pool || secret != token) {
			t.Fatalf("cutToken(%q) = %q, %q, %v; ParseToken = %q, %q", raw, p, secret, ok, pool, token)
		}
	})
}

// FuzzParseScope: ParseScope never panics; an accepted scope is valid,
// holds only valid queue names and grantable roles without duplicates,
// survives the JSON round trip the store makes, and allows exactly what it
// lists.
func FuzzParseScope(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"q", "consume"}, {" q1 , q2,,q1 ", "PUBLISH,consume, manage"}, {"_q", ""},
		{"q", "read"}, {"q", "admin"}, {",,,", ",,"}, {"a,b\xff", "publish"}, {strings.Repeat("q", 256), ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, queues, roles string) {
		s, err := ParseScope(queues, roles)
		if err != nil {
			if !reflect.DeepEqual(s, Scope{}) {
				t.Fatalf("ParseScope error %v with a non-zero scope %+v", err, s)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted scope %+v does not validate: %v", s, err)
		}
		seen := map[string]bool{}
		for _, q := range s.Queues {
			if !engine.ValidQueueName(q) || seen[q] {
				t.Fatalf("scope queue %q invalid or repeated in %+v", q, s)
			}
			seen[q] = true
			if !s.Allows(q, RoleRead) {
				t.Fatalf("scope %+v does not allow reading its queue %q", s, q)
			}
		}
		for _, r := range s.Roles {
			if !r.grantable() || seen["role:"+string(r)] {
				t.Fatalf("scope role %q not grantable or repeated", r)
			}
			seen["role:"+string(r)] = true
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Scope
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("JSON round trip %s = %+v, %v; want %+v", b, back, err, s)
		}
		q := "q"
		if len(s.Queues) > 0 {
			q = s.Queues[0]
		}
		for _, r := range []Role{RolePublish, RoleConsume, RoleManage} {
			want := len(s.Roles) == 0 || seen["role:"+string(r)]
			if got := s.Allows(q, r); got != want {
				t.Fatalf("scope %+v Allows(%q, %s) = %v, want %v", s, q, r, got, want)
			}
		}
		if s.Allows(q, Role("admin")) {
			t.Fatalf("scope %+v allows an unknown role", s)
		}
	})
}

// FuzzFingerprint: any token's hashed form and fingerprint are recognised
// as such, the fingerprint is a prefix of the hashed form, and no secret
// that Create accepts looks like one.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{"", "secret", "sha256-0123456789ab", HashToken("x"), "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		h, fp := HashToken(token), Fingerprint(token)
		if isHashedForm(token) { // a stored hashed form names itself
			h = token
		}
		if !isHashedForm(h) || !IsFingerprint(h) || !IsFingerprint(fp) || !strings.HasPrefix(h, fp) {
			t.Fatalf("token %q: hashed %q, fingerprint %q", token, h, fp)
		}
		if Fingerprint(h) != fp || hashedFormOf(h) != h {
			t.Fatalf("the hashed form %q is hashed again", h)
		}
		if IsFingerprint(token) && !reservedToken(token) {
			t.Fatalf("fingerprint %q is not reserved", token)
		}
		if got := displayToken(token, true); got != fp {
			t.Fatalf("displayToken(%q, true) = %q, want %q", token, got, fp)
		}
	})
}
