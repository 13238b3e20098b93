package rdb

import (
	"fmt"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// Benchmarks of the hot paths against a real redis-server: one op = one
// job. Run with make bench (go test -run '^$' -bench . -benchmem).

func BenchmarkPublish(b *testing.B) {
	e := startEngine(b, realClient(b), newTestClock())
	body := make([]byte, 100)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: body, Tries: 1, TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPublishBatch64(b *testing.B) {
	e := startEngine(b, realClient(b), newTestClock())
	body := make([]byte, 100)
	reqs := make([]*engine.PublishRequest, 64)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: body, Tries: 1, TTL: time.Hour}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(reqs) {
		if _, err := e.PublishBatch(bg, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkConsumeAck(b *testing.B) {
	e := startEngine(b, realClient(b), newTestClock())
	body := make([]byte, 100)
	reqs := make([]*engine.PublishRequest, 64)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: body, Tries: 1, TTL: time.Hour}
	}
	for i := 0; i < b.N; i += len(reqs) {
		if _, err := e.PublishBatch(bg, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute}
		for pb.Next() {
			jobs, err := e.Consume(bg, req)
			if err != nil || len(jobs) != 1 {
				b.Fatalf("consume: %v %v", jobs, err)
			}
			if err := e.Delete(bg, "ns", "q", jobs[0].ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPump(b *testing.B) {
	client := realClient(b)
	clock := &frozenClock{t: time.Now()}
	e, err := New(bg, client, Options{Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*engine.PublishRequest, 64)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1, Delay: time.Second}
	}
	for i := 0; i < b.N; i += len(reqs) {
		if _, err := e.PublishBatch(bg, reqs); err != nil {
			b.Fatal(err)
		}
	}
	clock.Add(time.Second + time.Millisecond) // due times round up to the next ms
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := e.PumpOnce(bg); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPackEntry(b *testing.B) {
	id := engine.NewJobID(time.Now(), 0, false)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e := packEntry(uint16(i), id)
		if _, _, err := unpackEntry(e); err != nil {
			b.Fatal(fmt.Sprint(err))
		}
	}
}
