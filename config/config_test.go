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
			ProtectAdminEndpoints:   ptr(true),
		},
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
		wantNames    []string
		wantEmbedded bool
	}{
		{"no pools", real, nil, []string{}, false},
		{"all real", real, map[string]RedisConf{"z": real, "default": real, "a": real}, []string{"a", "default", "z"}, false},
		{"embedded admin", RedisConf{}, map[string]RedisConf{"default": real}, []string{"default"}, true},
		{"blank admin addr", RedisConf{Addr: "  "}, map[string]RedisConf{"default": real}, []string{"default"}, true},
		{"embedded pool", real, map[string]RedisConf{"default": real, "dev": {}}, []string{"default", "dev"}, true},
		{"legacy pools are not used", real, map[string]RedisConf{"default": real, "old": {Version: "v2"}}, []string{"default"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.AdminRedis, c.Pool = tc.admin, tc.pools
			if got := c.PoolNames(); !reflect.DeepEqual(got, tc.wantNames) {
				t.Errorf("PoolNames() = %q, want %q", got, tc.wantNames)
			}
			if got := c.Embedded(); got != tc.wantEmbedded {
				t.Errorf("Embedded() = %v, want %v", got, tc.wantEmbedded)
			}
		})
	}
}

func TestRedisConf(t *testing.T) {
	tests := []struct {
		r            RedisConf
		wantAddrs    []string
		wantSentinel bool
		wantEmbedded bool
	}{
		{RedisConf{}, nil, false, true},
		{RedisConf{Addr: "h:1"}, []string{"h:1"}, false, false},
		{RedisConf{Addr: " a:1, b:2 ,,c:3 ", MasterName: "m"}, []string{"a:1", "b:2", "c:3"}, true, false},
	}
	for _, tc := range tests {
		if got := tc.r.Addrs(); !reflect.DeepEqual(got, tc.wantAddrs) {
			t.Errorf("%+v.Addrs() = %q, want %q", tc.r, got, tc.wantAddrs)
		}
		if got := tc.r.IsSentinel(); got != tc.wantSentinel {
			t.Errorf("%+v.IsSentinel() = %v, want %v", tc.r, got, tc.wantSentinel)
		}
		if got := tc.r.IsEmbedded(); got != tc.wantEmbedded {
			t.Errorf("%+v.IsEmbedded() = %v, want %v", tc.r, got, tc.wantEmbedded)
		}
	}
}
