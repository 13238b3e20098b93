package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestMain removes the kairos-server binary serverBin built.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built is the kairos-server binary of this checkout that the chaos tests
// share: one go build (its link alone takes seconds) instead of one per
// test.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// serverBin builds kairos-server at its first call and returns its path.
func serverBin(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "kairos-chaos-test-")
		if built.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		built.bin, built.err = buildServer(ctx, built.dir)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// TestChaosCI is the short chaos run of every `go test ./...`: at least 10
// SIGKILLs of a real kairos-server, one SCRIPT FLUSH and one CLIENT PAUSE
// of a real redis-server (AOF everysec) and a consumer dropping jobs, while
// jobs flow. It fails when an acknowledged job is lost, when a job is left
// behind, or when a disruption did not happen; then a 14 s soak checks
// that the entries of expired jobs of unconsumed queues are reclaimed.
// `make chaos` is the full suite, `make soak` the long soak.
func TestChaosCI(t *testing.T) {
	t.Parallel()
	redisBin := redistest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := serverBin(t)
	log := logrus.New()
	log.Out = testWriter{t}
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	rc := runConfig{
		ServerBin: bin, RedisBin: redisBin, Dir: dir, Rate: 200, Publishers: 3, Consumers: 3,
		DrainLimit: 30 * time.Second, Log: log,
	}
	sc := ciScenario(12 * time.Second)
	start := time.Now()
	res, err := sc.run(ctx, rc)
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	var table bytes.Buffer
	writeTable(&table, []Result{res})
	line, _ := json.Marshal(res)
	t.Logf("chaos run in %v:\n%s\n%s", time.Since(start).Round(time.Millisecond), line, table.String())

	if res.ServerKills < 10 || res.ScriptFlushes < 1 || res.ClientPauses < 1 {
		t.Errorf("disruptions: %d server kills, %d flushes, %d pauses; want >= 10, 1, 1", res.ServerKills, res.ScriptFlushes, res.ClientPauses)
	}
	if res.Lost != 0 {
		t.Errorf("LOST %d acknowledged jobs (must be 0), e.g. seqs %v", res.Lost, res.LostSeqs)
	}
	if res.Delivered+res.DeadOnly != res.Acknowledged {
		t.Errorf("delivered %d + dead only %d != acknowledged %d", res.Delivered, res.DeadOnly, res.Acknowledged)
	}
	if !res.Pass {
		t.Errorf("scenario failed: %v", res.Failures)
	}

	// A short soak with the same server: two queues nobody consumes, whose
	// jobs expire after 2 or 4 s; their entries must go without a consumer
	// (make soak is the long run that also judges memory and keys).
	start = time.Now()
	soak, err := runSoak(ctx, rc, soakConfig{Duration: 14 * time.Second, Rate: 300, Queues: 10, Unconsumed: 2,
		TTLs: []int{2, 4}, Every: time.Second, StaleOnly: true})
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	var out bytes.Buffer
	writeSoak(&out, soak)
	t.Logf("soak in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if !soak.Pass {
		t.Errorf("soak failed: %v", soak.Failures)
	}
}

// TestChaosClusterCI is the short cluster chaos run of every `go test
// ./...`: on a real 6-node Redis Cluster (3 masters, 1 replica each) that
// the run starts itself, while jobs flow, the slot of a busy queue moves to
// another master (key by key, MIGRATE) and redis-cli --cluster reshard
// moves 200 more slots, twice; the master of a busy queue is SIGKILLed
// (its replica takes over; the pool has WaitReplicas = 1) and comes back as
// a replica; kairos-server is SIGKILLed three times. It fails on a single
// lost job, a job left behind, or a disruption not done. `make chaos` runs
// the full cluster scenarios.
func TestChaosClusterCI(t *testing.T) {
	t.Parallel()
	redisBin, _ := redistest.ClusterBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := serverBin(t)
	log := logrus.New()
	log.Out = testWriter{t}
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	rc := runConfig{
		ServerBin: bin, RedisBin: redisBin, Dir: dir, Rate: 200, Publishers: 3, Consumers: 3,
		DrainLimit: 30 * time.Second, Log: log,
	}
	start := time.Now()
	res, err := ciClusterScenario(12*time.Second).run(ctx, rc)
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	var table bytes.Buffer
	writeTable(&table, []Result{res})
	line, _ := json.Marshal(res)
	t.Logf("cluster chaos run in %v:\n%s\n%s", time.Since(start).Round(time.Millisecond), line, table.String())
	if res.Reshards < 2 || res.MasterKills < 1 || res.ServerKills < 3 {
		t.Errorf("disruptions: %d reshards, %d master kills, %d server kills; want >= 2, 1, 3", res.Reshards, res.MasterKills, res.ServerKills)
	}
	if res.KeysMoved == 0 {
		t.Errorf("the slot moves migrated no key: the busy queues' slots were empty")
	}
	if len(res.FailoverMs) != 1 {
		t.Errorf("failover times %v; want one", res.FailoverMs)
	}
	if res.Lost != 0 {
		t.Errorf("LOST %d acknowledged jobs (must be 0), e.g. seqs %v", res.Lost, res.LostSeqs)
	}
	if res.Delivered+res.DeadOnly != res.Acknowledged {
		t.Errorf("delivered %d + dead only %d != acknowledged %d", res.Delivered, res.DeadOnly, res.Acknowledged)
	}
	if !res.Pass {
		t.Errorf("scenario failed: %v", res.Failures)
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		values []int64
		p      int
		want   int64
	}{
		{"empty", nil, 50, 0},
		{"one", []int64{7}, 99, 7},
		{"p50 of 4", []int64{1, 2, 3, 4}, 50, 2},
		{"p99 of 100", seq(1, 100), 99, 99},
		{"p100", seq(1, 100), 100, 100},
		{"p50 of 101", seq(1, 101), 50, 51},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.values, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %d) = %d, want %d", tc.values, tc.p, got, tc.want)
			}
		})
	}
}

func seq(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func TestUnionLength(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name  string
		spans []interval
		want  time.Duration
	}{
		{"none", nil, 0},
		{"one", []interval{{at(0), at(100)}}, 100 * time.Millisecond},
		{"disjoint", []interval{{at(500), at(600)}, {at(0), at(100)}}, 200 * time.Millisecond},
		{"overlapping", []interval{{at(0), at(100)}, {at(50), at(150)}}, 150 * time.Millisecond},
		{"nested", []interval{{at(0), at(300)}, {at(50), at(150)}}, 300 * time.Millisecond},
		{"touching", []interval{{at(0), at(100)}, {at(100), at(200)}}, 200 * time.Millisecond},
		{"empty span ignored", []interval{{at(100), at(100)}, {at(200), at(150)}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := unionLength(tc.spans); got != tc.want {
				t.Errorf("unionLength = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLedgerAfterAck: a delivery answered after the job's ACK counts as
// after it when its consume was sent after the ACK's answer, and as an
// overlap (its take may have come first) when it was sent before.
func TestLedgerAfterAck(t *testing.T) {
	l := newLedger()
	l.sent(1, 9_000, 9_000)
	l.published([]int64{1}, time.Millisecond)
	before := time.Now()
	l.deliverTaken(1, before, time.Now())
	l.ackDone(1)
	l.deliverTaken(1, before, time.Now()) // sent before the ACK, answered after
	l.ackDone(1)                          // a second ACK keeps the first's time
	l.deliverTaken(1, time.Now(), time.Now())
	c := l.summarize()
	if c.AfterAck != 1 || c.AfterAckOverlap != 1 || c.Duplicates != 2 {
		t.Fatalf("after ACK %d, overlap %d, duplicates %d; want 1, 1, 2", c.AfterAck, c.AfterAckOverlap, c.Duplicates)
	}
}

// TestLedgerSummarize checks every figure of the report on a small,
// hand-made history.
func TestLedgerSummarize(t *testing.T) {
	l := newLedger()
	now := time.UnixMilli(10_000)
	// 1: acknowledged, delivered 300 ms late, ACKed, delivered again.
	l.sent(1, 9_000, 9_000)
	l.published([]int64{1}, 2*time.Millisecond)
	l.deliver(1, time.UnixMilli(9_300))
	l.ackDone(1)
	l.deliver(1, now)
	// 2: acknowledged, never delivered: lost.
	l.sent(2, 9_000, 9_000)
	l.published([]int64{2}, 4*time.Millisecond)
	// 3: acknowledged, dead-lettered only.
	l.sent(3, 9_000, 9_000)
	l.published([]int64{3}, 6*time.Millisecond)
	l.deadFound(3)
	// 4: no 201 but delivered (the answer was lost), 2 s late.
	l.sent(4, 8_000, 8_000)
	l.deliver(4, now)
	// 5: acknowledged, delivered 1.5 s late, then also dead-lettered.
	l.sent(5, 8_500, 8_500)
	l.published([]int64{5}, 8*time.Millisecond)
	l.deliver(5, now)
	l.deadFound(5)
	// A delivery of a job never sent.
	l.deliver(99, now)
	l.outage(time.UnixMilli(0), time.UnixMilli(100))
	l.outage(time.UnixMilli(50), time.UnixMilli(120))

	c := l.summarize()
	want := counts{
		Attempted: 5, Acknowledged: 4, Delivered: 2, DeadLettered: 2, DeadOnly: 1,
		Lost: 1, LostSeqs: []int64{2}, LostSent: []int64{9_000},
		Duplicates: 1, AfterAck: 1, UnackedDelivered: 1, Phantom: 1,
		Late1s: 1, LateP50: 300, LateP99: 1500, LateMax: 1500,
		Outage: 120 * time.Millisecond, PubP50: 4 * time.Millisecond, PubP99: 8 * time.Millisecond, PubMax: 8 * time.Millisecond,
		DeliveriesRecorded: 4,
	}
	got := c
	if !slices.Equal(got.LostSeqs, want.LostSeqs) || !slices.Equal(got.LostSent, want.LostSent) {
		t.Errorf("lost seqs %v sent %v, want %v %v", got.LostSeqs, got.LostSent, want.LostSeqs, want.LostSent)
	}
	got.LostSeqs, got.LostSent, want.LostSeqs, want.LostSent = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summarize:\n got %+v\nwant %+v", got, want)
	}
	if n, maxDue := l.missing(); n != 1 || maxDue != 9_000 {
		t.Errorf("missing() = %d, %d; want 1, 9000", n, maxDue)
	}
}

func TestParseJobs(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []string
		wantErr bool
	}{
		{"object", `{"job_id":"a","queue":"q0","data":"eyJzZXEiOjF9"}`, []string{"a"}, false},
		{"array", `[{"job_id":"a","queue":"q0"},{"job_id":"b","queue":"q1"}]`, []string{"a", "b"}, false},
		{"garbage", `nope`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := parseJobs([]byte(tc.body))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			var ids []string
			for _, j := range jobs {
				ids = append(ids, j.JobID)
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("ids = %v, want %v", ids, tc.want)
			}
		})
	}
	jobs, _ := parseJobs([]byte(`{"job_id":"a","data":"eyJzZXEiOjF9"}`))
	if s, err := seqOf(jobs[0].Data); err != nil || s != 1 {
		t.Errorf("seqOf = %d, %v; want 1", s, err)
	}
	if _, err := seqOf([]byte(`{"seq":0}`)); err == nil {
		t.Error("seqOf accepted seq 0")
	}
}

func TestSchedule(t *testing.T) {
	sc := scenario{ServerKills: 7, Flushes: 2, Pauses: 3, Failovers: 3, RedisKills: 1}
	evs := sc.schedule()
	count := map[string]int{}
	for _, e := range evs {
		count[e]++
	}
	want := map[string]int{evServerKill: 7, evFlush: 2, evPause: 3, evFailover: 3, evRedisKill: 1}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("%s: %d events, want %d (schedule %v)", k, count[k], v, evs)
		}
	}
	if len(evs) != 16 {
		t.Errorf("%d events, want 16", len(evs))
	}
	if evs[0] != evFailover {
		t.Errorf("schedule starts with %s, want a failover first", evs[0])
	}
}

func TestJudge(t *testing.T) {
	base := Result{Acknowledged: 1000, Delivered: 1000, ServerKills: 10, ScriptFlushes: 1, ClientPauses: 1, ConsumerCuts: 3}
	sc := ciScenario(time.Second)
	tests := []struct {
		name     string
		mod      func(*Result)
		sc       scenario
		wantPass bool
	}{
		{"clean", func(*Result) {}, sc, true},
		{"lost", func(r *Result) { r.Lost = 1 }, sc, false},
		{"lost where redis may lose", func(r *Result) { r.Lost = 1 }, scenario{LossExpected: true}, true},
		{"control lost", func(r *Result) { r.Lost = 1 }, scenario{LossExpected: true, MustLose: true}, true},
		{"control lost nothing", func(*Result) {}, scenario{LossExpected: true, MustLose: true}, false},
		{"phantom", func(r *Result) { r.Phantom = 1 }, sc, false},
		{"residual", func(r *Result) { r.Residual = 2 }, sc, false},
		{"too few kills", func(r *Result) { r.ServerKills = 9 }, sc, false},
		{"no traffic", func(r *Result) { r.Acknowledged = 10 }, sc, false},
		{"no drop", func(r *Result) { r.ConsumerCuts = 0 }, sc, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.mod(&r)
			r.judge(tc.sc)
			if r.Pass != tc.wantPass {
				t.Errorf("pass = %v, want %v (failures %v)", r.Pass, tc.wantPass, r.Failures)
			}
		})
	}
}

func TestAttribute(t *testing.T) {
	t0 := time.Unix(1000, 0)
	timeline := []disruption{
		{name: "kill-master", from: t0, to: t0.Add(3 * time.Second)},
		{name: "hang-master", from: t0.Add(20 * time.Second), to: t0.Add(25 * time.Second)},
		// Overlaps the end of hang-master: writes after its start are its.
		{name: "sentinel-failover", from: t0.Add(25 * time.Second), to: t0.Add(30 * time.Second)},
	}
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	got := attribute([]int64{
		ms(-time.Second), ms(time.Second), // kill-master, also 1 s before it
		ms(21 * time.Second),                       // hang-master
		ms(24 * time.Second), ms(26 * time.Second), // sentinel-failover (2 s margin), inside
		ms(10 * time.Second), // none
	}, timeline)
	want := map[string]int{"kill-master": 2, "hang-master": 1, "sentinel-failover": 2, "none": 1}
	if len(got) != len(want) {
		t.Fatalf("attribute = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute = %v, want %v", got, want)
		}
	}
	if attribute(nil, timeline) != nil {
		t.Error("attribute of nothing is not nil")
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string
		wait    bool
		wantErr bool
	}{
		{"default all", nil, []string{"server-kill", "redis-kill-always", "redis-kill-everysec", "flush-pause", "consumer-drop", "deadletter", "failover",
			"cluster-reshard", "cluster-master-kill", "cluster-master-kill-wait", "cluster-server-kill", "control-no-aof"}, true, false},
		{"cluster", []string{"-scenario", "cluster-reshard,cluster-master-kill-wait"}, []string{"cluster-reshard", "cluster-master-kill-wait"}, false, false},
		{"ci-cluster", []string{"-scenario", "ci-cluster"}, []string{"ci-cluster"}, false, false},
		{"two", []string{"-scenario", "server-kill, failover"}, []string{"server-kill", "failover"}, false, false},
		{"ci", []string{"-scenario", "ci"}, []string{"ci"}, false, false},
		{"wait-cost only", []string{"-scenario", "wait-cost"}, nil, true, false},
		{"soak only", []string{"-scenario", "soak"}, nil, false, false},
		{"bad soak", []string{"-scenario", "soak", "-soak-unconsumed", "50"}, nil, false, true},
		{"unknown", []string{"-scenario", "nope"}, nil, false, true},
		{"bad rate", []string{"-rate", "0"}, nil, false, true},
		{"stray argument", []string{"x"}, nil, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseFlags(tc.args, &stderr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			scs, _ := o.selected()
			var names []string
			for _, sc := range scs {
				names = append(names, sc.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("scenarios = %v, want %v", names, tc.want)
			}
			if want := strings.Contains(strings.Join(tc.args, " "), "soak"); o.wantSoak() != want {
				t.Errorf("wantSoak = %v, want %v", o.wantSoak(), want)
			}
			if o.wantWaitCost() != tc.wait {
				t.Errorf("wantWaitCost = %v, want %v", o.wantWaitCost(), tc.wait)
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	r := Result{Scenario: "failover", Setup: "sentinel …, appendfsync always", Tries: 10, Acknowledged: 1234567,
		Delivered: 1234500, Lost: 67, LossExpected: true, Failovers: 3, LostByDisruption: map[string]int{"hang-master": 67}}
	r.judge(scenario{Failovers: 3, LossExpected: true})
	var out bytes.Buffer
	writeTable(&out, []Result{r})
	for _, want := range []string{"1,234,567", "67 (redis)", "always", "PASS", "3 failovers", "hang-master 67"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
