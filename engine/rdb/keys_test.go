package rdb

import (
	"fmt"
	"strings"
	"testing"
)

// redisSlot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key without one, modulo 16384.
func redisSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Each group's tag is the first two letters whose slot is in [256g,
// 256g+256), so the groups spread evenly over equal slot ranges.
func TestGroupTags(t *testing.T) {
	for g, tag := range groupTags {
		want := ""
		for a := 'a'; a <= 'z' && want == ""; a++ {
			for b := 'a'; b <= 'z' && want == ""; b++ {
				if s := string([]rune{a, b}); redisSlot(s) >= 256*g && redisSlot(s) < 256*g+256 {
					want = s
				}
			}
		}
		if tag != want {
			t.Errorf("group %d: tag %q, want %q", g, tag, want)
		}
	}
}

// Every name of a queue, and its group's index, registry and channels,
// hash to one slot; distinct groups to distinct slots.
func TestQueueNamesOneSlot(t *testing.T) {
	seen := map[int]int{}
	for i := range 2000 {
		ns, q := fmt.Sprintf("ns%d", i%7), fmt.Sprintf("q%d", i)
		qn := newQueueNames(ns, q)
		want := redisSlot(qn.ready)
		for _, k := range []string{qn.timer, qn.prio, qn.config, qn.dead, qn.channel, qn.jobPrefix + "X", qn.index, qn.registry, qn.wake, uniqueKey(ns, q, "k"),
			scheduleKey(ns, q, "s"), scheduleNamesKey(ns, q), scheduleIndexKey(qn.group)} {
			if redisSlot(k) != want {
				t.Fatalf("%s/%s: %q in slot %d, ready list in %d", ns, q, k, redisSlot(k), want)
			}
		}
		if channelGroup(qn.channel) != qn.group || channelGroup(qn.wake) != qn.group {
			t.Fatalf("%s/%s: channelGroup %d/%d, group %d", ns, q, channelGroup(qn.channel), channelGroup(qn.wake), qn.group)
		}
		if g, ok := seen[want]; ok && g != qn.group {
			t.Fatalf("slot %d holds groups %d and %d", want, g, qn.group)
		}
		seen[want] = qn.group
	}
	if len(seen) != slotGroups {
		t.Errorf("2000 queues fell in %d groups, want all %d", len(seen), slotGroups)
	}
}
