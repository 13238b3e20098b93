package rdb

import (
	"strings"
	"testing"
)

func TestLibParts(t *testing.T) {
	want := []string{"u16", "r16", "u32", "r32", "u48", "r48", "NONCE0", "hdr", "entry", "eid", "num",
		"ready_heads", "push_ready", "backoff", "lower_index", "hkey", "hist_open", "hist_close", "last_error", "LEDGER_GRACE", "job_ttl", "kill",
		"ns_of", "usage_add", "usage_expired", "ledger_expired", "usage_of", "usage_set", "del_job", "over_quota", // tenancyLua
		"gpfx", "jprefix", "val_group", "job_group", "grp_join", "grp_unblock", "rotDirect", "rot_new", "rot_next", "rot_drop", "rot_back", "rot_save", "grp_leave", "grp_migrate", "grp_all", "push_job", "grp_collect", "grp_flush",
		"inflight_room", "inflight_new", "inflight_pend", "inflight_read", "inflight_reserve", "inflight_unreserve", "inflight_take", "inflight_flush", "inflight_block", "inflight_cfg",
		"inflight_unblocked", "inflight_drop", "inflight_room_freed", "inflight_free", "inflight_free_many", "inflight_wake"} // groupsLua
	var got []string
	var joined strings.Builder
	for _, p := range libParts {
		got = append(got, p.name)
		joined.WriteString(p.src)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("libParts = %v, want %v", got, want)
	}
	// Nothing of luaLib is lost but the blank lines between parts.
	if strings.TrimSpace(joined.String()) != strings.TrimSpace(luaLib+tenancyLua+groupsLua) {
		t.Fatal("the parts of luaLib and tenancyLua do not add up to them")
	}
}

func TestLibFor(t *testing.T) {
	for _, c := range []struct {
		src       string
		want, not []string
	}{
		{"return eid(ARGV[1])", []string{"r16", "eid"}, []string{"u16", "kill", "entry"}},
		// kill needs hdr, which needs u16 and u48, and entry and NONCE0,
		// and job_ttl, which needs hkey, num and LEDGER_GRACE.
		{"kill(KEYS[1])", []string{"u16", "u48", "NONCE0", "hdr", "entry", "num", "hkey", "job_ttl", "kill"}, []string{"r16", "eid", "usage_add"}},
		// Only whole identifiers count.
		{"local entryx, xnum, eid_2 = 1, 2, 3", nil, []string{"entry", "num", "eid", "r16"}},
		{"return 1", nil, []string{"u16", "kill"}},
	} {
		lib := libFor(c.src)
		last := -1
		for _, name := range c.want {
			def := "local function " + name + "("
			if name == "NONCE0" {
				def = "local NONCE0 ="
			}
			i := strings.Index(lib, def)
			if i < 0 {
				t.Errorf("libFor(%q) lacks %s", c.src, name)
				continue
			}
			if i < last {
				t.Errorf("libFor(%q) defines %s after a later part", c.src, name)
			}
			last = i
		}
		for _, name := range c.not {
			if usesName(lib, name) {
				t.Errorf("libFor(%q) has %s, which it does not use", c.src, name)
			}
		}
	}
}
