package config

import (
	"reflect"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	want := &Config{
		AdminHost:     "127.0.0.1",
		LogLevel:      "info",
		TTLSecond:     86400,
		DelaySecond:   0,
		TriesNum:      1,
		TTRSecond:     120,
		TimeoutSecond: 0,
		Kairos: Kairos{
			MaxTimeoutSecond:        600,
			ReadTimeoutSecond:       30,
			WriteTimeoutSecond:      30,
			IdleTimeoutSecond:       120,
			PumpBatch:               1000,
			ShutdownTimeoutSecond:   30,
			ReadHeaderTimeoutSecond: 10,
			TokenGraceOnFailureMs:   5000,
			ProtectAdminEndpoints:   ptr(true),
			AuditMaxEntries:         10000,
		},
		Dashboard: Dashboard{Enabled: ptr(true), RefreshSecond: 5},
	}
	if got := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default() = %+v, want %+v", got, want)
	}
	a, b := Default(), Default()
	a.Kairos.PumpBatch = 1
	if b.Kairos.PumpBatch != 1000 {
		t.Error("Default() values share state")
	}
}

func TestDurations(t *testing.T) {
	c := Default()
	c.DelaySecond, c.TimeoutSecond = 5, 7
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"DefaultTTL", c.DefaultTTL(), 24 * time.Hour},
		{"DefaultDelay", c.DefaultDelay(), 5 * time.Second},
		{"DefaultTTR", c.DefaultTTR(), 2 * time.Minute},
		{"DefaultTimeout", c.DefaultTimeout(), 7 * time.Second},
		{"MaxTimeout", c.MaxTimeout(), 10 * time.Minute},
		{"ReadTimeout", c.Kairos.ReadTimeout(), 30 * time.Second},
		{"WriteTimeout", c.Kairos.WriteTimeout(), 30 * time.Second},
		{"IdleTimeout", c.Kairos.IdleTimeout(), 2 * time.Minute},
		{"ShutdownTimeout", c.Kairos.ShutdownTimeout(), 30 * time.Second},
		{"ReadHeaderTimeout", c.Kairos.ReadHeaderTimeout(), 10 * time.Second},
		{"ReadHeaderTimeout capped by ReadTimeout", Kairos{ReadTimeoutSecond: 3, ReadHeaderTimeoutSecond: 10}.ReadHeaderTimeout(), 3 * time.Second},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s() = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestPoolNamesAndEmbedded(t *testing.T) {
	real := RedisConf{Addr: "127.0.0.1:6379"}
	tests := []struct {
		name         string
		admin        RedisConf
		pools        map[string]RedisConf
		embedded     bool // [Kairos] Embedded
		wantNames    []string
		wantSections []string
	}{
		{"no pools", real, nil, true, []string{}, nil},
		{"all real", real, map[string]RedisConf{"z": real, "default": real, "a": real}, true, []string{"a", "default", "z"}, nil},
		{"embedded admin", RedisConf{}, map[string]RedisConf{"default": real}, true, []string{"default"}, []string{"AdminRedis"}},
		{"blank admin addr", RedisConf{Addr: "  "}, map[string]RedisConf{"default": real}, true, []string{"default"}, []string{"AdminRedis"}},
		{"embedded pools", real, map[string]RedisConf{"default": {}, "b": real, "a": {}}, true, []string{"a", "b", "default"}, []string{"Pool.a", "Pool.default"}},
		{"everything embedded", RedisConf{}, map[string]RedisConf{"default": {}}, true, []string{"default"}, []string{"AdminRedis", "Pool.default"}},
		{"no Addr without Embedded is not embedded", RedisConf{}, map[string]RedisConf{"default": {}}, false, []string{"default"}, nil},
		{"legacy pools are not used", real, map[string]RedisConf{"default": real, "old": {Version: "v2"}}, true, []string{"default"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.AdminRedis, c.Pool, c.Kairos.Embedded = tc.admin, tc.pools, tc.embedded
			if got := c.PoolNames(); !reflect.DeepEqual(got, tc.wantNames) {
				t.Errorf("PoolNames() = %q, want %q", got, tc.wantNames)
			}
			if got := c.EmbeddedSections(); !reflect.DeepEqual(got, tc.wantSections) {
				t.Errorf("EmbeddedSections() = %q, want %q", got, tc.wantSections)
			}
			if got, want := c.Embedded(), tc.wantSections != nil; got != want {
				t.Errorf("Embedded() = %v, want %v", got, want)
			}
		})
	}
}

func TestRedisConf(t *testing.T) {
	tests := []struct {
		r            RedisConf
		wantAddrs    []string
		wantSentinel bool
		wantAddr     bool
	}{
		{RedisConf{}, nil, false, false},
		{RedisConf{Cluster: true, Addrs: []string{}}, nil, false, false},
		{RedisConf{Cluster: true, Addrs: []string{" a:1", "", "b:2 "}}, []string{"a:1", "b:2"}, false, true},
		{RedisConf{Cluster: true, Addr: "a:1,b:2"}, []string{"a:1", "b:2"}, false, true},
		{RedisConf{Addr: " "}, nil, false, false},
		{RedisConf{Addr: "h:1"}, []string{"h:1"}, false, true},
		{RedisConf{Addr: " a:1, b:2 ,,c:3 ", MasterName: "m"}, []string{"a:1", "b:2", "c:3"}, true, true},
	}
	for _, tc := range tests {
		if got := tc.r.Endpoints(); !reflect.DeepEqual(got, tc.wantAddrs) {
			t.Errorf("%+v.Endpoints() = %q, want %q", tc.r, got, tc.wantAddrs)
		}
		if got := tc.r.IsSentinel(); got != tc.wantSentinel {
			t.Errorf("%+v.IsSentinel() = %v, want %v", tc.r, got, tc.wantSentinel)
		}
		if got := tc.r.HasAddr(); got != tc.wantAddr {
			t.Errorf("%+v.HasAddr() = %v, want %v", tc.r, got, tc.wantAddr)
		}
	}
}
