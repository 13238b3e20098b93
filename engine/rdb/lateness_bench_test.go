package rdb

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// BenchmarkDelayedLateness is the delayed scenario of kairos bench on the
// engine alone (issue #31), whatever b.N: 16 publishers publish 20,000
// jobs with delays of 1–5 s while 64 consumers wait; lateness is the
// consume time minus the job's due time (taken before its publish, as
// kairos bench does). It reports late-p50-ms, late-p99-ms and
// late-max-ms (the target is p99 ≤ 10 ms), which depend on the machine's
// load: run it with -benchtime 1x.
//
//	go test ./engine/rdb -run '^$' -bench DelayedLateness -benchtime 1x
func BenchmarkDelayedLateness(b *testing.B) {
	t := b
	const jobs, publishers, consumers = 20000, 16, 64
	e := startEngineOpts(t, realClient(t), Options{HistoryFlush: 5 * time.Second})
	var consumed atomic.Int64
	late := make([][]time.Duration, consumers)
	var cwg sync.WaitGroup
	done := make(chan struct{})
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for consumed.Load() < jobs {
				select {
				case <-done:
					return
				default:
				}
				js, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"delayed"}, Count: 1, TTR: time.Minute, Timeout: time.Second})
				now := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				for _, j := range js {
					due, _ := strconv.ParseInt(string(j.Body), 10, 64)
					late[c] = append(late[c], now.Sub(time.Unix(0, due)))
					consumed.Add(1)
				}
			}
		}()
	}
	var next atomic.Int64
	var pwg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := next.Add(1) - 1; i < jobs; i = next.Add(1) - 1 {
				// As kairos bench: the due time is taken before the
				// publish, so lateness includes the publish's own time.
				delay := time.Duration(1+i%5) * time.Second
				due := strconv.FormatInt(time.Now().Add(delay).UnixNano(), 10)
				if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "delayed", Body: []byte(due), Tries: 1, TTL: time.Hour, Delay: delay}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for consumed.Load() < jobs && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(done)
	cwg.Wait()
	var all []time.Duration
	for _, l := range late {
		all = append(all, l...)
	}
	if len(all) != jobs {
		t.Fatalf("consumed %d of %d jobs", len(all), jobs)
	}
	slices.Sort(all)
	p50, p99 := all[len(all)/2], all[len(all)*99/100]
	t.Logf("lateness of %d delayed jobs: min %v p50 %v p99 %v max %v; load average %s", jobs,
		all[0].Round(10*time.Microsecond), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), all[len(all)-1].Round(10*time.Microsecond), loadAverage())
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(msOf(p50), "late-p50-ms")
	b.ReportMetric(msOf(p99), "late-p99-ms")
	b.ReportMetric(msOf(all[len(all)-1]), "late-max-ms")
}
