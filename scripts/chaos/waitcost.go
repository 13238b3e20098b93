package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// WaitCost measures what the durability options cost a publish: the
// engine's publish alone, and followed by WAIT 1 <timeout> on the same
// connection (what a per-pool "wait for one replica" option would do),
// with appendfsync everysec and always, and with the replica hung.
type WaitCost struct {
	Scenario string        `json:"scenario"`
	Setup    string        `json:"setup"`
	Variants []WaitVariant `json:"variants"`
}

// WaitVariant is one measured publish path (sequential publishes on one
// connection).
type WaitVariant struct {
	Name     string  `json:"name"`
	N        int     `json:"n"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	PerSec   float64 `json:"per_s"`
	NotAcked int     `json:"not_acknowledged_by_replica"`
}

// waitTimeout is the WAIT timeout measured (the proposed default).
const waitTimeout = 100 * time.Millisecond

// measureWaitCost starts a master and a replica and times n publishes per
// variant through the Redis engine itself (the HTTP layer adds the same
// constant to every variant).
func measureWaitCost(ctx context.Context, rc runConfig, n int) (WaitCost, error) {
	wc := WaitCost{Scenario: "wait-cost", Setup: "redis master + 1 replica (loopback), engine publish on one connection"}
	dir := filepath.Join(rc.Dir, "wait-cost")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return wc, err
	}
	s := &setup{sup: newSupervisor(dir), ports: map[int]bool{}, log: rc.Log}
	defer s.sup.killAll()
	for i := range 2 {
		port, err := freePort(s.ports)
		if err != nil {
			return wc, err
		}
		replicaOf := 0
		if i > 0 {
			replicaOf = s.data[0].port
		}
		node, err := s.sup.newRedis("redis-"+string(rune('a'+i)), rc.RedisBin, port, redisConf{fsync: "everysec", replicaOf: replicaOf})
		if err != nil {
			return wc, err
		}
		if err := node.up(ctx); err != nil {
			return wc, err
		}
		s.data = append(s.data, node)
	}
	if err := s.waitReplicaOnline(ctx, s.data[0]); err != nil {
		return wc, err
	}
	master, replica := s.data[0], s.data[1]
	// One connection: WAIT waits for the writes of its own connection.
	client := redis.NewClient(&redis.Options{Addr: master.addr, PoolSize: 1, ContextTimeoutEnabled: true})
	defer client.Close()
	e, err := rdb.New(ctx, client, rdb.Options{Pool: "waitcost"})
	if err != nil {
		return wc, err
	}
	seq := 0
	// publish times one publish (and WAIT); notAcked reports a WAIT that
	// counted no replica.
	publish := func(wait bool) (d time.Duration, notAcked bool, err error) {
		seq++
		t := time.Now()
		_, err = e.Publish(ctx, &engine.PublishRequest{
			Namespace: "waitcost", Queue: "q", Body: []byte(strconv.Itoa(seq)), TTL: time.Hour, Tries: 1,
		})
		if err != nil {
			return 0, false, fmt.Errorf("publish: %w", err)
		}
		if wait {
			got, err := client.Wait(ctx, 1, waitTimeout).Result()
			if err != nil {
				return 0, false, fmt.Errorf("WAIT: %w", err)
			}
			notAcked = got < 1
		}
		return time.Since(t), notAcked, nil
	}
	type acc struct {
		lat      []time.Duration
		total    time.Duration
		notAcked int
	}
	variant := func(name string, a *acc) WaitVariant {
		slices.Sort(a.lat)
		return WaitVariant{
			Name: name, N: len(a.lat), P50Ms: ms2(percentile(a.lat, 50)), P99Ms: ms2(percentile(a.lat, 99)),
			MaxMs: ms2(a.lat[len(a.lat)-1]), PerSec: float64(int(float64(len(a.lat))/a.total.Seconds()*10)) / 10,
			NotAcked: a.notAcked,
		}
	}
	// measure runs n publishes without and n with WAIT, alternating in
	// rounds of 100 so that both see the same disk and CPU weather.
	measure := func(label string, n int) error {
		var plain, waited acc
		for done := 0; done < n; done += 100 {
			for _, a := range []*acc{&plain, &waited} {
				start := time.Now()
				for range min(100, n-done) {
					d, na, err := publish(a == &waited)
					if err != nil {
						return fmt.Errorf("%s: %w", label, err)
					}
					a.lat = append(a.lat, d)
					if na {
						a.notAcked++
					}
				}
				a.total += time.Since(start)
			}
		}
		wc.Variants = append(wc.Variants, variant("publish, "+label, &plain), variant("publish + WAIT 1 100, "+label, &waited))
		return nil
	}
	rc.Log.Info("wait-cost: measuring")
	if err := measure("warm-up", 200); err != nil {
		return wc, err
	}
	wc.Variants = wc.Variants[:0]
	for _, fsync := range []string{"everysec", "always"} {
		if err := master.client.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
			return wc, err
		}
		if err := measure("appendfsync "+fsync, n); err != nil {
			return wc, err
		}
	}
	// A hung replica: every WAIT runs into its timeout and the publish
	// would be refused (the availability cost of the option).
	if err := replica.stop(); err != nil {
		return wc, err
	}
	var hung acc
	start := time.Now()
	for range 20 {
		d, na, err := publish(true)
		if err != nil {
			_ = replica.cont()
			return wc, fmt.Errorf("replica hung: %w", err)
		}
		hung.lat = append(hung.lat, d)
		if na {
			hung.notAcked++
		}
	}
	hung.total = time.Since(start)
	wc.Variants = append(wc.Variants, variant("publish + WAIT 1 100, replica hung", &hung))
	return wc, replica.cont()
}

// writeWaitCost prints the wait-cost variants as a table.
func writeWaitCost(out io.Writer, wc WaitCost) {
	fmt.Fprintf(out, "\nwait-cost: %s\n", wc.Setup)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tn\tp50 ms\tp99 ms\tmax ms\tpublishes/s\tnot acked by replica\t")
	for _, v := range wc.Variants {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.0f\t%d\t\n", v.Name, v.N, v.P50Ms, v.P99Ms, v.MaxMs, v.PerSec, v.NotAcked)
	}
	_ = tw.Flush()
}
