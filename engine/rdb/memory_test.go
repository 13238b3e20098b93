package rdb

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(bg, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}

// lmstfyTimerMember is lmstfy's timer_set member: u16 len(ns), ns, u16
// len(q), q, u16 tries, u16 len(id), id.
func lmstfyTimerMember(ns, q string, tries uint16, id string) string {
	var b []byte
	b = binary.LittleEndian.AppendUint16(b, uint16(len(ns)))
	b = append(b, ns...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(q)))
	b = append(b, q...)
	b = binary.LittleEndian.AppendUint16(b, tries)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(id)))
	return string(append(b, id...))
}

// TestMemoryPerDelayedJob measures the Redis memory of a waiting delayed
// job with a 100-byte body in Kairos's layout and in lmstfy's (a payload
// key with a TTL plus a member of the pool-wide timer_set), on the same
// redis-server, for short and for typical namespace/queue names. It fails
// when Kairos needs more than lmstfy with typical names.
func TestMemoryPerDelayedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	client := realClient(t)
	e, err := New(bg, client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	body := []byte(strings.Repeat("x", 100))
	for _, names := range [][2]string{{"ns", "q"}, {"order-service", "cancel-unpaid"}} {
		ns, q := names[0], names[1]
		if err := client.FlushAll(bg).Err(); err != nil {
			t.Fatal(err)
		}
		before := usedMemory(t, client)
		reqs := make([]*engine.PublishRequest, 64)
		for i := range reqs {
			reqs[i] = &engine.PublishRequest{Namespace: ns, Queue: q, Body: body, Tries: 3, TTL: 24 * time.Hour, Delay: time.Hour}
		}
		for i := 0; i < n; i += len(reqs) {
			if _, err := e.PublishBatch(bg, reqs); err != nil {
				t.Fatal(err)
			}
		}
		kairos := float64(usedMemory(t, client)-before) / n

		if err := client.FlushAll(bg).Err(); err != nil {
			t.Fatal(err)
		}
		before = usedMemory(t, client)
		now := time.Now()
		for i := 0; i < n; i += 500 {
			pipe := client.Pipeline()
			for k := i; k < i+500 && k < n; k++ {
				id := engine.NewJobID(now, time.Hour, false)
				pipe.Set(bg, "j/"+ns+"/"+q+"/"+id, body, 24*time.Hour)
				pipe.ZAdd(bg, "timer_set", redis.Z{Score: float64(now.Unix() + 3600 + int64(k%100)), Member: lmstfyTimerMember(ns, q, 3, id)})
			}
			if _, err := pipe.Exec(bg); err != nil {
				t.Fatal(err)
			}
		}
		lmstfy := float64(usedMemory(t, client)-before) / n
		t.Logf("ns=%q q=%q: Kairos %.0f bytes per delayed job, lmstfy layout %.0f (%.2fx)", ns, q, kairos, lmstfy, kairos/lmstfy)
		if ns != "ns" && kairos > lmstfy {
			t.Errorf("Kairos needs %.0f bytes per delayed job, more than lmstfy's %.0f", kairos, lmstfy)
		}
	}
}
