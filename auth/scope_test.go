package auth

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	tests := []struct{ raw, pool, token string }{
		{"secret", DefaultPool, "secret"},
		{"b:secret", "b", "secret"},
		{"default:secret", DefaultPool, "secret"},
		{":secret", DefaultPool, "secret"},
		{"b:sec:ret", "b", "sec:ret"},
		{"b:", "b", ""},
		{"", DefaultPool, ""},
	}
	for _, tc := range tests {
		pool, token := ParseToken(tc.raw)
		if pool != tc.pool || token != tc.token {
			t.Errorf("ParseToken(%q) = %q, %q; want %q, %q", tc.raw, pool, token, tc.pool, tc.token)
		}
	}
	for _, tc := range []struct{ pool, token, want string }{
		{"", "t", "t"}, {DefaultPool, "t", "t"}, {"b", "t", "b:t"},
	} {
		if got := FormatToken(tc.pool, tc.token); got != tc.want {
			t.Errorf("FormatToken(%q, %q) = %q, want %q", tc.pool, tc.token, got, tc.want)
		}
	}
}

func TestScopeAllows(t *testing.T) {
	all := Scope{}
	pubQ1 := Scope{Queues: []string{"q1"}, Roles: []Role{RolePublish}}
	anyRoleQ1Q2 := Scope{Queues: []string{"q1", "q2"}}
	consumeManage := Scope{Roles: []Role{RoleConsume, RoleManage}}
	tests := []struct {
		name  string
		scope Scope
		queue string
		role  Role
		want  bool
	}{
		{"zero scope publish", all, "q", RolePublish, true},
		{"zero scope consume", all, "q", RoleConsume, true},
		{"zero scope manage", all, "q", RoleManage, true},
		{"zero scope read", all, "q", RoleRead, true},
		{"zero scope unknown role", all, "q", Role("admin"), false},
		{"queue+role match", pubQ1, "q1", RolePublish, true},
		{"role not granted", pubQ1, "q1", RoleConsume, false},
		{"manage not granted", pubQ1, "q1", RoleManage, false},
		{"queue not granted", pubQ1, "q2", RolePublish, false},
		{"read on granted queue", pubQ1, "q1", RoleRead, true},
		{"read on other queue", pubQ1, "q2", RoleRead, false},
		{"any role on listed queue", anyRoleQ1Q2, "q2", RoleManage, true},
		{"any role, unlisted queue", anyRoleQ1Q2, "q3", RoleConsume, false},
		{"roles on any queue", consumeManage, "whatever", RoleConsume, true},
		{"roles on any queue, publish refused", consumeManage, "whatever", RolePublish, false},
		{"roles on any queue, read", consumeManage, "whatever", RoleRead, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.scope.Allows(tc.queue, tc.role); got != tc.want {
				t.Fatalf("%+v.Allows(%q, %q) = %v, want %v", tc.scope, tc.queue, tc.role, got, tc.want)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	tests := []struct {
		name, queues, roles string
		want                Scope
		wantErr             error
	}{
		{name: "empty", want: Scope{}},
		{name: "blanks only", queues: " , ", roles: ",", want: Scope{}},
		{name: "queues", queues: "q1,q2", want: Scope{Queues: []string{"q1", "q2"}}},
		{name: "trim and dedupe", queues: " q1 , q1,q2,", roles: "publish, Consume ,publish",
			want: Scope{Queues: []string{"q1", "q2"}, Roles: []Role{RolePublish, RoleConsume}}},
		{name: "all grantable roles", roles: "publish,consume,manage",
			want: Scope{Roles: []Role{RolePublish, RoleConsume, RoleManage}}},
		{name: "unknown role", roles: "publish,admin", wantErr: ErrInvalidScope},
		{name: "read is not grantable", roles: "read", wantErr: ErrInvalidScope},
		{name: "reserved queue name", queues: "_meta", wantErr: ErrInvalidScope},
		{name: "forbidden character", queues: "a/b", wantErr: ErrInvalidScope},
		{name: "queue too long", queues: strings.Repeat("q", 256), wantErr: ErrInvalidScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseScope(tc.queues, tc.roles)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParseScope(%q, %q) error = %v, want %v", tc.queues, tc.roles, err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseScope(%q, %q) = %+v, want %+v", tc.queues, tc.roles, got, tc.want)
			}
		})
	}
}
