package rdb

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// dumpKeys returns every key of client with its DUMP (type, value; not
// the TTL), to tell whether anything changed.
func dumpKeys(t *testing.T, client redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		typ := client.Type(ctx, k).Val()
		var v string
		switch typ {
		case "string":
			v = client.Get(ctx, k).Val()
		case "list":
			v = fmtSlice(client.LRange(ctx, k, 0, -1).Val())
		case "hash":
			v = fmtSlice(mapSlice(client.HGetAll(ctx, k).Val()))
		case "zset":
			for _, z := range client.ZRangeWithScores(ctx, k, 0, -1).Val() {
				v += z.Member.(string) + "@" + time.UnixMilli(int64(z.Score)).String() + ","
			}
		}
		out[k] = typ + ":" + v
	}
	return out
}

func fmtSlice(s []string) string {
	out := ""
	for _, e := range s {
		out += e + "|"
	}
	return out
}

func mapSlice(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// TestLayoutMarker: an engine writes its layout version into a new pool,
// starts on a pool of its own version, and refuses a pool written by a
// newer Kairos without changing a key of it.
func TestLayoutMarker(t *testing.T) {
	for _, tier := range coalesceTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			startEngine(t, client, newTestClock())
			if v, err := ReadLayout(ctx, client); err != nil || v != LayoutVersion {
				t.Fatalf("marker after the first start: %d, %v; want %d", v, err, LayoutVersion)
			}
			startEngine(t, client, newTestClock()) // its own layout: starts

			client.Set(ctx, layoutKey, LayoutVersion+1, 0)
			client.HSet(ctx, "m/ns", "x", 1) // data of the newer layout, as far as this server knows
			before := dumpKeys(t, client)
			_, err := New(ctx, client, Options{Pool: "p"})
			var le *LayoutError
			if !errors.Is(err, ErrNewerLayout) || !errors.As(err, &le) || le.Found != LayoutVersion+1 || le.Served != LayoutVersion {
				t.Fatalf("New on a newer layout: %v; want a LayoutError %d > %d", err, LayoutVersion+1, LayoutVersion)
			}
			if after := dumpKeys(t, client); !maps.Equal(before, after) {
				t.Errorf("refusing a newer layout changed keys:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestUpgradeLeavesLmstfyData is issue #30 at the engine: a pool holding
// lmstfy's layout (registries m/ns and m/ns/NS, timer_set, ready list
// q/ns/q, dead letter d/ns/q, job keys j/ns/q/ID) beside a queue of
// Kairos's layout before slot groups. The start moves the Kairos queue and
// changes none of lmstfy's keys: its registries keep lmstfy's queue.
func TestUpgradeLeavesLmstfyData(t *testing.T) {
	for _, tier := range coalesceTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			lm := map[string]func(){
				"m/ns":     func() { client.HSet(ctx, "m/ns", "mig", 1) },
				"m/ns/mig": func() { client.HSet(ctx, "m/ns/mig", "q", 1) },
				"q/mig/q":  func() { client.LPush(ctx, "q/mig/q", packEntry(3, "01A")) },
				"d/mig/q":  func() { client.LPush(ctx, "d/mig/q", packEntry(1, "01D")) },
				"timer_set": func() {
					client.ZAdd(ctx, "timer_set", redis.Z{Score: 1e9, Member: "\x03\x00mig\x01\x00q\x02\x00\x03\x0001B"})
				},
				"j/mig/q/01A":       func() { client.Set(ctx, "j/mig/q/01A", "a", time.Hour) },
				"j/mig/q/01B":       func() { client.Set(ctx, "j/mig/q/01B", "b", time.Hour) },
				"j/mig/q/01D":       func() { client.Set(ctx, "j/mig/q/01D", "d", 0) },
				"legacy Kairos job": func() { client.Set(ctx, legacyJobPrefix("old", "k")+"01K", oldValue('r', 1, 0, 0, 0, "", "k"), 0) },
			}
			for _, f := range lm {
				f()
			}
			lmstfyKeys := dumpKeys(t, client)
			delete(lmstfyKeys, legacyJobPrefix("old", "k")+"01K")
			// The Kairos queue before slot groups, registered in the same
			// m/ns (its namespace's registry holds only it).
			client.LPush(ctx, legacyKey("q", "old", "k"), packEntry(1, "01K"))
			client.HSet(ctx, legacyNamespaces, "old", 1)
			client.HSet(ctx, legacyQueues("old"), "k", 1)

			e := startEngine(t, client, newTestClock())
			after := dumpKeys(t, client)
			for k, v := range lmstfyKeys {
				if after[k] != v {
					t.Errorf("lmstfy's key %s: %q after the start, want %q", k, after[k], v)
				}
			}
			if _, ok := after[legacyQueues("old")]; ok {
				t.Errorf("the moved queue's old registry m/ns/old is left")
			}
			if size, err := e.Size(ctx, "old", "k"); err != nil || size != 1 {
				t.Errorf("moved queue old/k: size %d, %v; want 1", size, err)
			}
		})
	}
}
