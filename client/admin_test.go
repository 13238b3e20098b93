package client_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/config"
)

func TestAdminTokens(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tok, err := e.Admin.CreateToken(ctx, "team", client.TokenOptions{Description: "workers"})
	if err != nil || len(tok) != 26 {
		t.Fatalf("CreateToken: %q, %v", tok, err)
	}
	explicit := "explicit-token-0123456789"
	got, err := e.Admin.CreateToken(ctx, "team", client.TokenOptions{Description: "mine", Token: explicit})
	if err != nil || got != explicit {
		t.Fatalf("CreateToken with a token: %q, %v", got, err)
	}
	_, err = e.Admin.CreateToken(ctx, "team", client.TokenOptions{Description: "again", Token: explicit})
	wantErr(t, "CreateToken twice", err, client.ErrBadRequest, http.StatusBadRequest)
	_, err = e.Admin.CreateToken(ctx, "team", client.TokenOptions{})
	wantErr(t, "CreateToken without description", err, client.ErrBadRequest, 0)
	_, err = e.Admin.CreateToken(ctx, "team", client.TokenOptions{Description: "x", Pool: "nope"})
	wantErr(t, "CreateToken in an unknown pool", err, client.ErrBadRequest, http.StatusBadRequest)

	scoped, err := e.Admin.CreateToken(ctx, "team", client.TokenOptions{
		Description: "scoped", Queues: []string{"a", "b"}, Roles: []string{"publish"},
	})
	if err != nil {
		t.Fatalf("CreateToken scoped: %v", err)
	}
	c, err := client.New(e.Srv.API, client.WithNamespace("team"), client.WithToken(scoped))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "b", []byte("x")); err != nil {
		t.Fatalf("Publish with the scoped token: %v", err)
	}
	_, err = c.Publish(ctx, "c", []byte("x"))
	wantErr(t, "Publish outside the scope", err, client.ErrForbidden, http.StatusForbidden)

	list, err := e.Admin.ListTokens(ctx, "team", "")
	if err != nil || len(list) != 3 || list[tok] != "workers" || list[explicit] != "mine" || list[scoped] != "scoped" {
		t.Fatalf("ListTokens: %v, %v", list, err)
	}
	prefixed, err := e.Admin.ListTokens(ctx, "team", "default")
	if err != nil || prefixed["default:"+tok] != "workers" {
		t.Fatalf("ListTokens with pool: %v, %v", prefixed, err)
	}
	if err := e.Admin.DeleteToken(ctx, "team", scoped); err != nil {
		t.Fatalf("DeleteToken: %v", err)
	}
	eventually(t, 3*time.Second, "a deleted token refused", func() bool {
		_, err := c.Publish(ctx, "b", []byte("x"))
		return errors.Is(err, client.ErrUnauthorized)
	})
	if list, _ := e.Admin.ListTokens(ctx, "team", ""); len(list) != 2 {
		t.Fatalf("ListTokens after delete: %v", list)
	}
	if err := e.Admin.DeleteToken(ctx, "team", "unknown-token-xxxxxxxxx"); err != nil {
		t.Fatalf("DeleteToken of an unknown token: %v", err)
	}
	none, err := e.Admin.ListTokens(ctx, "nobody", "")
	if err != nil || len(none) != 0 || none == nil {
		t.Fatalf("ListTokens of an empty namespace: %v, %v", none, err)
	}
}

func TestAdminPoolsInfoVersion(t *testing.T) {
	e := newEnv(t, func(cfg *config.Config) {
		cfg.Pool["second"] = cfg.Pool["default"]
	})
	ctx := ctxT(t)
	pools, err := e.Admin.Pools(ctx)
	if err != nil || !slices.Equal(pools, []string{"default", "second"}) {
		t.Fatalf("Pools: %v, %v", pools, err)
	}
	publish(t, e.C, "q1", "x")
	publish(t, e.C, "q2", "x")
	info, err := e.Admin.Info(ctx, "")
	if err != nil || !slices.Equal(info[e.NS], []string{"q1", "q2"}) {
		t.Fatalf("Info: %v, %v", info, err)
	}
	_, err = e.Admin.Info(ctx, "nope")
	wantErr(t, "Info of an unknown pool", err, client.ErrBadRequest, http.StatusBadRequest)
	v, err := e.Admin.Version(ctx)
	if err != nil || v.Version == "" {
		t.Fatalf("Version: %+v, %v", v, err)
	}
	on, err := e.Admin.AccessLog(ctx)
	if err != nil {
		t.Fatalf("AccessLog: %v", err)
	}
	if err := e.Admin.SetAccessLog(ctx, !on); err != nil {
		t.Fatalf("SetAccessLog: %v", err)
	}
	if now, err := e.Admin.AccessLog(ctx); err != nil || now == on {
		t.Fatalf("AccessLog after switching: %v, %v", now, err)
	}
}

func TestAdminLimits(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := e.Admin.GetLimit(ctx, e.NS, e.Token)
	wantErr(t, "GetLimit without a limit", err, client.ErrNotFound, http.StatusNotFound)
	l := client.Limit{Read: 10, Write: 5, WriteJobs: 640, Interval: time.Second}
	if err := e.Admin.AddLimit(ctx, e.NS, e.Token, l); err != nil {
		t.Fatalf("AddLimit: %v", err)
	}
	err = e.Admin.AddLimit(ctx, e.NS, e.Token, l)
	wantErr(t, "AddLimit twice", err, client.ErrConflict, http.StatusConflict)
	if got, err := e.Admin.GetLimit(ctx, e.NS, e.Token); err != nil || got != l {
		t.Fatalf("GetLimit: %+v, %v; want %+v", got, err, l)
	}
	l2 := client.Limit{Read: 100, Interval: 1500 * time.Millisecond} // rounded up to 2 s
	if err := e.Admin.SetLimit(ctx, e.NS, e.Token, l2); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	entries, err := e.Admin.Limits(ctx, true)
	want := client.LimitEntry{Namespace: e.NS, Token: e.Token, Limit: client.Limit{Read: 100, Interval: 2 * time.Second}}
	if err != nil || len(entries) != 1 || entries[0] != want {
		t.Fatalf("Limits: %+v, %v; want [%+v]", entries, err, want)
	}
	err = e.Admin.SetLimit(ctx, e.NS, e.Token, client.Limit{Interval: time.Second})
	wantErr(t, "SetLimit with nothing limited", err, client.ErrBadRequest, http.StatusBadRequest)
	err = e.Admin.SetLimit(ctx, e.NS, e.Token, client.Limit{Read: 1, Interval: -time.Second})
	wantErr(t, "SetLimit with a negative interval", err, client.ErrBadRequest, 0)
	if err := e.Admin.DeleteLimit(ctx, e.NS, e.Token); err != nil {
		t.Fatalf("DeleteLimit: %v", err)
	}
	if entries, err := e.Admin.Limits(ctx, false); err != nil || len(entries) != 0 {
		t.Fatalf("Limits after delete: %+v, %v", entries, err)
	}
}

func TestAdminBasicAuth(t *testing.T) {
	e := newEnv(t, func(cfg *config.Config) {
		cfg.Accounts = map[string]string{"admin": "secret"}
	})
	ctx := ctxT(t)
	_, err := e.Admin.ListTokens(ctx, e.NS, "")
	wantErr(t, "ListTokens without credentials", err, client.ErrUnauthorized, http.StatusUnauthorized)
	var apiErr *client.APIError
	if errors.As(err, &apiErr); !strings.Contains(apiErr.Message, "unauthorized") {
		t.Fatalf("message of an empty 401: %q", apiErr.Message)
	}
	for _, tc := range []struct {
		name, user, pass string
		ok               bool
	}{
		{"wrong password", "admin", "nope", false},
		{"right account", "admin", "secret", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := client.NewAdmin("http://"+e.Srv.Admin, client.WithBasicAuth(tc.user, tc.pass))
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.ListTokens(ctx, e.NS, "")
			if tc.ok != (err == nil) {
				t.Fatalf("ListTokens: %v", err)
			}
		})
	}
	// /pools is always open.
	if _, err := e.Admin.Pools(ctx); err != nil {
		t.Fatalf("Pools: %v", err)
	}
}
