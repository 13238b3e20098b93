package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
)

// The limits scenario (issue #32): do max_in_flight and
// group_max_in_flight hold across servers and under faults? One
// redis-server (AOF, appendfsync always: a restart loses no acknowledged
// write, so any count that drifts is Kairos's) and two kairos-servers on
// it. Queue "fair" has max_in_flight and group_max_in_flight over several
// groups (one of them hot: 40 % of its jobs) and the default group; queue
// "capped" has max_in_flight only, over grouped and ungrouped jobs. Many
// consumers, spread over both servers, long-poll "fair", "capped" or both,
// some a batch at a time, and hold each job a random time before they ACK
// it (with its receipt), release it (half of them giving the try back), or
// let it go without a word (its TTR runs out). Meanwhile the scenario
// SIGKILLs a server mid-consume (the consumers always have long-polls open)
// and starts it again, and SIGKILLs Redis and restarts it from its AOF.
//
// The consumers' ledger (flight.go) records, for each delivery, the span
// the job was certainly in flight, and counts the spans open at every
// instant, per queue and per group: a count above a limit is a violation.
// The drain takes every job left (sweeping the queues, then their dead
// letters), then the scenario reads the server's own in-flight hashes: once
// nothing is in flight they must be empty (no slot leaked, none counted
// twice). It passes with 0 violations, 0 acknowledged jobs lost, nothing
// left behind, the server's in-flight count back at 0 and never above a
// limit when sampled, and each limit reached (else the run proved nothing).

// limitsNamespace is the scenario's namespace.
const limitsNamespace = "limits"

// limitsConfig shapes the scenario (flags -limits-*; -duration is its
// chaos time).
type limitsConfig struct {
	Duration    time.Duration
	Servers     int
	Consumers   int
	Rate        int // publishes per second, all publishers together
	MaxInFlight int // fair's max_in_flight
	GroupMax    int // fair's group_max_in_flight
	Groups      int // fair's named groups (plus the default group)
	CappedMax   int // capped's max_in_flight
	TTR         time.Duration
	ServerKills int
	RedisKills  int
}

func defaultLimitsConfig() limitsConfig {
	return limitsConfig{Duration: 40 * time.Second, Servers: 2, Consumers: 24, Rate: 70, MaxInFlight: 12, GroupMax: 3,
		Groups: 8, CappedMax: 6, TTR: 2 * time.Second, ServerKills: 8, RedisKills: 3}
}

// limitsQueue is one queue of the scenario: its limits and its groups
// ("" is the default group), the first one hot.
type limitsQueue struct {
	Name             string   `json:"queue"`
	MaxInFlight      int      `json:"max_in_flight"`
	GroupMaxInFlight int      `json:"group_max_in_flight"`
	Groups           []string `json:"groups"`
}

func (lc limitsConfig) queues() []limitsQueue {
	fair := limitsQueue{Name: "fair", MaxInFlight: lc.MaxInFlight, GroupMaxInFlight: lc.GroupMax}
	for i := range lc.Groups {
		fair.Groups = append(fair.Groups, fmt.Sprintf("g%d", i))
	}
	fair.Groups = append(fair.Groups, "")
	capped := limitsQueue{Name: "capped", MaxInFlight: lc.CappedMax, Groups: []string{"", "c0", "c1", "c2"}}
	return []limitsQueue{fair, capped}
}

// Limits is the scenario's report (one JSON line).
type Limits struct {
	Scenario    string        `json:"scenario"`
	Setup       string        `json:"setup"`
	Servers     int           `json:"servers"`
	Consumers   int           `json:"consumers"`
	TTRMs       int64         `json:"ttr_ms"`
	Queues      []limitsQueue `json:"queues"`
	ServerKills int           `json:"server_kills"`
	RedisKills  int           `json:"redis_kills"`
	ChaosS      float64       `json:"chaos_s"`
	DrainS      float64       `json:"drain_s"`

	Attempted    int `json:"attempted"`
	Acknowledged int `json:"acknowledged"`
	// Deliveries seen by the consumers and the sweep, and what became of
	// them: ACKed (204), released (204), let go (TTR), stale (409: the
	// TTR ran out first).
	Deliveries int `json:"deliveries"`
	Acked      int `json:"acked"`
	Released   int `json:"released"`
	LetGo      int `json:"let_go"`
	Stale      int `json:"stale"`
	// AckUnknown: ACKs and releases still without a definite answer after
	// ackPatience of retries (their jobs may count as lost).
	AckUnknown int `json:"ack_unknown"`
	// AckInferred: ACKs answered 404 after an attempt whose outcome was
	// unknown (a transport error, a 5xx), counted as ACKed: that attempt
	// deleted the job, for a job in flight under this receipt leaves no
	// other way (but a loss, which this count would hide: it says how
	// many ACKs the ledger inferred). Kairos never sends an ACK to Redis
	// twice itself (a connection lost mid-command answers 503), so a 404
	// to an ACK's first definite answer is about the job, not the ACK.
	AckInferred int `json:"ack_inferred"`
	// AckNotFound: ACKs answered 404 at once (no earlier attempt): this
	// delivery's ACK did not delete the job; its job counts as lost
	// unless another delivery's ACK or the dead letter accounts for it.
	// LostNotFound: the lost jobs among them.
	AckNotFound  int `json:"ack_not_found"`
	LostNotFound int `json:"lost_not_found"`
	DeadLettered int `json:"dead_lettered"`
	// Lost: acknowledged publishes never ACKed by a consumer nor found in
	// the dead letter.
	Lost     int     `json:"lost"`
	LostSeqs []int64 `json:"lost_seqs,omitempty"`
	// AfterAck: deliveries of a job after its ACK was answered 204 (or
	// inferred), by a consume sent after that answer. AfterAckOverlap:
	// deliveries answered after it by a consume sent before it, whose
	// take may have come first (a consume answered late, whose TTR ran out
	// meanwhile while another consumer took and ACKed the job); not a
	// failure (Redis's AOF tells them apart: -keep).
	AfterAck        int `json:"after_ack"`
	AfterAckOverlap int `json:"after_ack_overlap"`
	Phantom         int `json:"phantom"`
	Mismatches      int `json:"mismatches"` // answers whose queue or group is not the job's
	Residual        int `json:"residual"`

	Scopes []FlightScope `json:"scopes"`
	// EmptySpans counts deliveries answered after t0 + TTR (a long-poll
	// that waited most of the TTR before the take): the ledger cannot say
	// when they were in flight and leaves them out (at most 5 %).
	EmptySpans int `json:"empty_spans"`
	// The server's own in-flight hashes, sampled every 100 ms during the
	// run (the most seen per queue) and read after the drain (must be 0).
	ServerPeak   map[string]int `json:"server_peak"`
	ServerLeft   int            `json:"server_left"`
	ServerCounts int            `json:"server_counts_left"`
	// ReportedLeft is what GET /queue/:ns/:q/groups (the engine's
	// Grouper) says is in flight after the drain, queue and groups summed
	// (-1: the engine has no Grouper, 501; the raw hashes above still
	// judge the drift).
	ReportedLeft int `json:"reported_left"`

	PublishErrors int `json:"publish_errors"`
	ConsumeErrors int `json:"consume_errors"`
	AckErrors     int `json:"ack_errors"`

	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
}

// limitsBody is a job's body: the ledger's sequence number, and the
// queue and group the publisher sent it to.
type limitsBody struct {
	Seq   int64  `json:"seq"`
	Due   int64  `json:"due"`
	Queue string `json:"queue"`
	Group string `json:"group,omitempty"`
}

// limitsJob is what a consume answer (with extensions) says of one job.
type limitsJob struct {
	JobID   string  `json:"job_id"`
	Queue   string  `json:"queue"`
	Data    []byte  `json:"data"`
	Receipt string  `json:"receipt"`
	Group   *string `json:"group"` // absent for the default group
}

// ackPatience bounds the retries of one ACK or release: longer than any
// restart of the scenario's servers and Redis.
const ackPatience = 60 * time.Second

// limitsRun is one run's state.
type limitsRun struct {
	lc      limitsConfig
	queues  []limitsQueue
	servers []*kairosNode
	redis   *redisNode
	w       *workload // HTTP client, token, the publish ledger
	fl      flightLedger
	log     logrus.FieldLogger

	deliveries, acked, released, letGo, stale, mismatches, ackUnknown atomic.Int64
	ackInferred, ackNotFound                                          atomic.Int64

	peakMu     sync.Mutex
	serverPeak map[string]int
}

// runLimits starts Redis and the servers and runs the scenario.
func runLimits(ctx context.Context, rc runConfig, lc limitsConfig) (Limits, error) {
	res := Limits{Scenario: "limits", Servers: lc.Servers, Consumers: lc.Consumers, TTRMs: lc.TTR.Milliseconds(),
		Setup: fmt.Sprintf("redis appendfsync always; %d kairos-servers", lc.Servers)}
	log := rc.Log.WithField("scenario", "limits")
	dir := filepath.Join(rc.Dir, "limits")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	s := &setup{sup: newSupervisor(dir), ports: map[int]bool{}, log: log}
	defer s.sup.killAll()
	port, err := freePort(s.ports)
	if err != nil {
		return res, err
	}
	rn, err := s.sup.newRedis("redis", rc.RedisBin, port, redisConf{fsync: "always"})
	if err != nil {
		return res, err
	}
	if err := rn.up(ctx); err != nil {
		return res, err
	}
	r := &limitsRun{lc: lc, queues: lc.queues(), redis: rn, log: log, serverPeak: map[string]int{}}
	res.Queues = r.queues
	for i := range lc.Servers {
		k, err := s.sup.newKairos("kairos-"+string(rune('a'+i)), rc.ServerBin, s.ports, kairosRedis{addr: rn.addr})
		if err != nil {
			return res, err
		}
		if err := k.up(ctx); err != nil {
			return res, err
		}
		k.hc.Timeout = 5 * time.Second
		r.servers = append(r.servers, k)
	}
	token, err := r.servers[0].token(ctx, limitsNamespace)
	if err != nil {
		return res, err
	}
	conns := 2*lc.Consumers + 16
	r.w = &workload{
		cfg: workloadConfig{API: r.servers[0].api, Token: token, Namespace: limitsNamespace, TTR: int(lc.TTR / time.Second), Extensions: true},
		led: newLedger(), log: log,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second}},
	}
	defer r.w.hc.CloseIdleConnections()
	for _, q := range r.queues {
		if err := r.setLimits(ctx, q); err != nil {
			return res, err
		}
	}

	pctx, stopPub := context.WithCancel(ctx)
	cctx, stopCons := context.WithCancel(ctx)
	sctx, stopSample := context.WithCancel(ctx)
	defer stopPub()
	defer stopCons()
	defer stopSample()
	var pubs, cons, sampler sync.WaitGroup
	const publishers = 4
	for i := range publishers {
		pubs.Go(func() { r.publisher(pctx, i, publishers) })
	}
	for i := range lc.Consumers {
		cons.Go(func() { r.consumer(cctx, i) })
	}
	sampler.Go(func() { r.sample(sctx) })

	// The faults, spread over the duration as the other scenarios do.
	var evs []string
	for range lc.ServerKills {
		evs = append(evs, evServerKill)
	}
	for range lc.RedisKills {
		evs = append(evs, evRedisKill)
	}
	rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	start := time.Now()
	for k, ev := range evs {
		at := start.Add(time.Duration((float64(k) + 0.2 + 0.6*rand.Float64()) * float64(lc.Duration) / float64(len(evs))))
		sleepCtx(ctx, time.Until(at))
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		switch ev {
		case evServerKill:
			k := r.servers[res.ServerKills%len(r.servers)]
			k.kill()
			sleepCtx(ctx, rand.N(300*time.Millisecond))
			if err := k.up(ctx); err != nil {
				return res, fmt.Errorf("server kill #%d: %w", res.ServerKills+1, err)
			}
			res.ServerKills++
		case evRedisKill:
			if err := rn.restart(ctx, 200*time.Millisecond+rand.N(1300*time.Millisecond)); err != nil {
				return res, fmt.Errorf("redis kill #%d: %w", res.RedisKills+1, err)
			}
			res.RedisKills++
			log.Infof("redis kill #%d done", res.RedisKills)
		}
	}
	sleepCtx(ctx, time.Until(start.Add(lc.Duration)))
	res.ChaosS = time.Since(start).Seconds()
	for _, k := range r.servers {
		if !k.alive() {
			return res, fmt.Errorf("%s died on its own:\n%s", k.name, k.logTail(30))
		}
		if err := waitFor(ctx, 30*time.Second, 100*time.Millisecond, func() error { return k.ready(ctx) }); err != nil {
			return res, err
		}
	}
	log.Infof("chaos over after %.1f s (%d server kills, %d redis kills); draining", res.ChaosS, res.ServerKills, res.RedisKills)

	// Drain: no more publishes; the consumers go on until every
	// acknowledged job is ACKed (or nothing has come for a while), then
	// stop; what they let go comes back after its TTR and is swept, then
	// the dead letters are.
	drainStart := time.Now()
	stopPub()
	pubs.Wait()
	deadline := time.Now().Add(rc.DrainLimit)
	lastProgress, lastPending := time.Now(), -1
	for ctx.Err() == nil && time.Now().Before(deadline) {
		p := r.pending()
		if p == 0 {
			break
		}
		if p != lastPending {
			lastProgress, lastPending = time.Now(), p
		}
		if time.Since(lastProgress) > 2*lc.TTR+3*time.Second {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	stopCons()
	cons.Wait()
	sleepCtx(ctx, lc.TTR+time.Second)
	if err := r.sweep(ctx, false); err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	for _, q := range r.queues {
		if err := r.respawnDead(ctx, q.Name); err != nil {
			return res, err
		}
	}
	if err := r.sweep(ctx, true); err != nil {
		return res, fmt.Errorf("dead letter sweep: %w", err)
	}
	for _, q := range r.queues {
		for _, path := range []string{"/size", "/deadletter/size"} {
			n, err := r.size(ctx, q.Name, path)
			if err != nil {
				return res, err
			}
			res.Residual += n
		}
	}
	res.DrainS = time.Since(drainStart).Seconds()
	stopSample()
	sampler.Wait()
	if res.ServerLeft, res.ServerCounts, _, err = r.serverInFlight(ctx); err != nil {
		return res, fmt.Errorf("read the server's in-flight hashes: %w", err)
	}
	for _, q := range r.queues {
		n, err := r.reportedInFlight(ctx, q.Name)
		if err != nil {
			// The raw hashes above judge the drift all the same.
			log.WithError(err).Warn("GET …/groups after the drain")
			res.ReportedLeft = -1
			break
		}
		res.ReportedLeft += n
	}

	r.fill(&res)
	res.judge(lc)
	return res, ctx.Err()
}

// base is server k's API prefix of the namespace.
func (r *limitsRun) base(k *kairosNode) string { return k.api + "/api/" + limitsNamespace }

// setLimits sets a queue's limits through the admin API.
func (r *limitsRun) setLimits(ctx context.Context, q limitsQueue) error {
	body := fmt.Sprintf(`{"max_in_flight":%d,"group_max_in_flight":%d}`, q.MaxInFlight, q.GroupMaxInFlight)
	k := r.servers[0]
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, k.admin+"/queue/"+limitsNamespace+"/"+q.Name+"/config", strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return fmt.Errorf("queue config of %s: %w", q.Name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("queue config of %s %s: status %d: %s", q.Name, body, resp.StatusCode, b)
	}
	return nil
}

// pickGroup picks a group of q: the first (hot) one 40 % of the time,
// else any of them.
func pickGroup(q limitsQueue) string {
	if rand.IntN(100) < 40 {
		return q.Groups[0]
	}
	return q.Groups[rand.IntN(len(q.Groups))]
}

// publisher i of n publishes its share of the rate, to a random server,
// until ctx ends; publisher 0 publishes bulks of bulkSize jobs of one group.
func (r *limitsRun) publisher(ctx context.Context, i, n int) {
	per := 1
	if i == 0 {
		per = bulkSize
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) * float64(n*per) / float64(max(r.lc.Rate, 1))))
	defer tick.Stop()
	w := r.w
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		q := r.queues[0]
		if rand.IntN(100) < 40 {
			q = r.queues[1]
		}
		group := pickGroup(q)
		start := time.Now()
		seqs := make([]int64, per)
		parts := make([]string, per)
		for j := range seqs {
			seqs[j] = w.seq.Add(1)
			w.led.sent(seqs[j], start.UnixMilli(), start.UnixMilli())
			b, _ := json.Marshal(limitsBody{Seq: seqs[j], Due: start.UnixMilli(), Queue: q.Name, Group: group})
			parts[j] = string(b)
		}
		k := r.servers[rand.IntN(len(r.servers))]
		url := r.base(k) + "/" + q.Name
		body := []byte(parts[0])
		if per > 1 {
			url += "/bulk"
			body = []byte("[" + strings.Join(parts, ",") + "]")
		}
		url += "?ttl=3600&tries=10"
		if group != "" {
			url += "&group=" + group
		}
		// Not ctx: a publish under way when the publishers stop completes.
		resp, err := w.do(context.Background(), http.MethodPut, url, body, 5*time.Second)
		if err == nil && resp.status == http.StatusCreated {
			w.led.published(seqs, time.Since(start))
			continue
		}
		w.led.count(&w.led.publishErrors)
		if err == nil && resp.status < 500 {
			w.warn("limits publish: unexpected status %d: %s", resp.status, resp.body)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// consumer i long-polls its queues on its server until ctx ends and does
// with each job what chance says.
func (r *limitsRun) consumer(ctx context.Context, i int) {
	k := r.servers[i%len(r.servers)]
	var queues string
	switch i % 3 {
	case 0:
		queues = r.queues[0].Name
	case 1:
		queues = r.queues[1].Name
	default:
		queues = r.queues[0].Name + "," + r.queues[1].Name
	}
	count := 1
	if i%4 == 3 {
		count = 3
	}
	for ctx.Err() == nil {
		t0 := time.Now()
		jobs, ok := r.consume(ctx, k, queues, r.lc.TTR, 1000, count)
		t1 := time.Now()
		if !ok {
			if ctx.Err() == nil {
				r.w.led.count(&r.w.led.consumeErrors)
				sleepCtx(ctx, 50*time.Millisecond)
			}
			continue
		}
		for _, j := range jobs {
			b, ok := r.record(j, t0, t1)
			if !ok {
				continue
			}
			switch p := rand.IntN(100); {
			case p < 10:
				// Let it go: the TTR runs out.
				r.letGo.Add(1)
				r.fl.add(b.Queue, b.Group, t1, deliveryEnd(t0, r.lc.TTR, time.Time{}))
			case p < 25:
				sleepCtx(ctx, 20*time.Millisecond+rand.N(280*time.Millisecond))
				r.finish(k, j, b, t0, t1, r.lc.TTR, p < 18)
			default:
				sleepCtx(ctx, 20*time.Millisecond+rand.N(280*time.Millisecond))
				r.finish(k, j, b, t0, t1, r.lc.TTR, false)
			}
		}
	}
}

// consume asks server k for up to count jobs of queues (comma-separated).
func (r *limitsRun) consume(ctx context.Context, k *kairosNode, queues string, ttr time.Duration, timeoutMs, count int) ([]limitsJob, bool) {
	url := fmt.Sprintf("%s/%s?ttr_ms=%d&timeout_ms=%d&count=%d", r.base(k), queues, ttr.Milliseconds(), timeoutMs, count)
	resp, err := r.w.do(ctx, http.MethodGet, url, nil, time.Duration(timeoutMs)*time.Millisecond+5*time.Second)
	if err != nil {
		return nil, false
	}
	switch resp.status {
	case http.StatusOK:
		var jobs []limitsJob
		b := strings.TrimSpace(string(resp.body))
		if strings.HasPrefix(b, "[") {
			err = json.Unmarshal(resp.body, &jobs)
		} else {
			var j limitsJob
			err = json.Unmarshal(resp.body, &j)
			jobs = []limitsJob{j}
		}
		if err != nil {
			r.w.warn("limits consume: bad answer %q: %v", resp.body, err)
			return nil, false
		}
		return jobs, true
	case http.StatusNotFound:
		return nil, true
	default:
		if resp.status < 500 {
			r.w.warn("limits consume: unexpected status %d: %s", resp.status, resp.body)
		}
		return nil, false
	}
}

// record enters a delivery of a consume sent at t0 and answered at t1 in
// the publish ledger; ok is false for a body that is not the scenario's.
func (r *limitsRun) record(j limitsJob, t0, t1 time.Time) (limitsBody, bool) {
	var b limitsBody
	if err := json.Unmarshal(j.Data, &b); err != nil || b.Seq <= 0 {
		r.w.warn("limits: job %s: body %q is not the scenario's: %v", j.JobID, j.Data, err)
		r.mismatches.Add(1)
		return b, false
	}
	r.deliveries.Add(1)
	if !r.w.led.deliverTaken(b.Seq, t0, t1) {
		r.w.warn("limits: job %s carries seq %d, never published", j.JobID, b.Seq)
	}
	got := "" // the default group: no "group" in the answer
	if j.Group != nil {
		got = *j.Group
	}
	if j.Queue != b.Queue || got != b.Group {
		r.w.warn("limits: job %s of %s/%q answered as %s/%q", j.JobID, b.Queue, b.Group, j.Queue, got)
		r.mismatches.Add(1)
	}
	return b, true
}

// finish ACKs (or releases) one delivery with its receipt, retrying on
// transport errors and 5xx over every server until a definite answer
// (at most ackPatience), and records its span. A 404 after an attempt whose
// outcome is unknown is the ACK that attempt did: a job whose ACK was not
// applied comes back after its TTR and is not gone (ack_inferred). Giving
// up earlier would leave an ACK that Redis applied (its answer lost with a
// killed server or Redis) counted as none, and its job as lost. A 404 at
// once did not delete the job (ack_not_found): a server never sends an ACK
// to Redis twice itself, and a 503 says its outcome is unknown.
func (r *limitsRun) finish(k *kairosNode, j limitsJob, b limitsBody, t0, t1 time.Time, ttr time.Duration, release bool) {
	path := "/" + j.Queue + "/job/" + j.JobID
	method := http.MethodDelete
	if release {
		path += "/release"
		method = http.MethodPut
	}
	path += "?receipt=" + j.Receipt
	if release && rand.IntN(2) == 0 {
		path += "&keep_try=true"
	}
	sent := time.Now()
	r.fl.add(b.Queue, b.Group, t1, deliveryEnd(t0, ttr, sent))
	deadline := time.Now().Add(ackPatience)
	unknown := false
	for n := 0; ; n++ {
		srv := r.servers[(slices.Index(r.servers, k)+n)%len(r.servers)]
		resp, err := r.w.do(context.Background(), method, r.base(srv)+path, nil, 3*time.Second)
		switch {
		case err == nil && resp.status == http.StatusNoContent:
			if release {
				r.released.Add(1)
			} else {
				r.acked.Add(1)
				r.w.led.ackDone(b.Seq)
			}
			return
		case err == nil && resp.status == http.StatusConflict:
			r.stale.Add(1)
			return
		case err == nil && resp.status == http.StatusNotFound:
			switch {
			case release: // the job is gone: another delivery's ACK, or lost
			case unknown:
				r.acked.Add(1)
				r.ackInferred.Add(1)
				r.w.led.ackDone(b.Seq)
			default:
				r.ackNotFound.Add(1)
				r.w.led.notFound(b.Seq)
			}
			return
		case err == nil && resp.status < 500:
			r.w.warn("limits: %s %s: status %d: %s", method, path, resp.status, resp.body)
			return
		}
		unknown = true
		r.w.led.count(&r.w.led.ackErrors)
		if time.Now().After(deadline) {
			r.ackUnknown.Add(1)
			r.w.warn("limits: %s %s: no answer for %v", method, path, ackPatience)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pending counts acknowledged publishes neither ACKed nor dead.
func (r *limitsRun) pending() int {
	l := r.w.led
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, j := range l.jobs {
		if j.acked && !j.ackOK && !j.dead {
			n++
		}
	}
	return n
}

// sweep consumes every ready job of the queues (up to the limits, ACKing
// each before the next consume) through the first server and ACKs it,
// until no queue gives one; with dead, the jobs come from respawned dead
// letters and are recorded as dead.
func (r *limitsRun) sweep(ctx context.Context, dead bool) error {
	k := r.servers[0]
	const ttr = 30 * time.Second
	for i := 0; i < 100000 && ctx.Err() == nil; i++ {
		got := 0
		for _, q := range r.queues {
			t0 := time.Now()
			jobs, ok := r.consume(ctx, k, q.Name, ttr, 0, 20)
			t1 := time.Now()
			if !ok {
				return errors.New("consume failed while the setup is healthy")
			}
			got += len(jobs)
			for _, j := range jobs {
				b, ok := r.record(j, t0, t1)
				if !ok {
					continue
				}
				if dead {
					r.w.led.deadFound(b.Seq)
				}
				r.finish(k, j, b, t0, t1, ttr, false)
			}
		}
		if got == 0 {
			return nil
		}
	}
	return ctx.Err()
}

// respawnDead moves queue q's whole dead letter back to its ready list.
func (r *limitsRun) respawnDead(ctx context.Context, q string) error {
	n, err := r.size(ctx, q, "/deadletter/size")
	if err != nil || n == 0 {
		return err
	}
	resp, err := r.w.do(ctx, http.MethodPut, fmt.Sprintf("%s/%s/deadletter?limit=%d&ttl=3600", r.base(r.servers[0]), q, n), nil, 10*time.Second)
	if err != nil || resp.status != http.StatusOK {
		return fmt.Errorf("respawn dead letter of %s: status %d %s: %v", q, resp.status, resp.body, err)
	}
	return nil
}

// size reads a size route of queue q.
func (r *limitsRun) size(ctx context.Context, q, path string) (int, error) {
	resp, err := r.w.do(ctx, http.MethodGet, r.base(r.servers[0])+"/"+q+path, nil, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("%s of %s: %w", path, q, err)
	}
	var s struct{ Size int }
	if resp.status != http.StatusOK || json.Unmarshal(resp.body, &s) != nil {
		return 0, fmt.Errorf("%s of %s: status %d: %s", path, q, resp.status, resp.body)
	}
	return s.Size, nil
}

// serverInFlight reads the server's in-flight bookkeeping of the
// scenario's queues straight from Redis (doc/keys.md: the hash
// g/{T}ns/q/i of the jobs in flight, g/{T}ns/q/c of the count per group):
// the jobs in the i hashes, the sum of the c counts, and the i hash's
// length per queue.
func (r *limitsRun) serverInFlight(ctx context.Context) (jobs, counts int, perQueue map[string]int, err error) {
	perQueue = map[string]int{}
	c := r.redis.client
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "g/*"+limitsNamespace+"/*", 1000).Result()
		if err != nil {
			return 0, 0, nil, err
		}
		for _, key := range keys {
			switch {
			case strings.HasSuffix(key, "/i"):
				n, err := c.HLen(ctx, key).Result()
				if err != nil {
					return 0, 0, nil, err
				}
				jobs += int(n)
				q := strings.TrimSuffix(key[strings.Index(key, limitsNamespace+"/")+len(limitsNamespace)+1:], "/i")
				perQueue[q] += int(n)
			case strings.HasSuffix(key, "/c"):
				vals, err := c.HVals(ctx, key).Result()
				if err != nil {
					return 0, 0, nil, err
				}
				for _, v := range vals {
					n, _ := strconv.Atoi(v)
					counts += n
				}
			}
		}
		cursor = next
		if cursor == 0 {
			return jobs, counts, perQueue, nil
		}
	}
}

// reportedInFlight asks the admin API for queue q's groups and returns the
// jobs it says are in flight: the queue's count plus every group's.
func (r *limitsRun) reportedInFlight(ctx context.Context, q string) (int, error) {
	k := r.servers[0]
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.admin+"/queue/"+limitsNamespace+"/"+q+"/groups?limit=500", nil)
	if err != nil {
		return 0, err
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("groups of %s: %w", q, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var g struct {
		InFlight int `json:"in_flight"`
		Groups   []struct {
			InFlight int `json:"in_flight"`
		} `json:"groups"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &g) != nil {
		return 0, fmt.Errorf("groups of %s: status %d: %s", q, resp.StatusCode, b)
	}
	n := g.InFlight
	for _, x := range g.Groups {
		n += x.InFlight
	}
	return n, nil
}

// sample reads the server's in-flight hashes every 100 ms until ctx ends
// and keeps the most seen per queue (errors, as while Redis restarts, skip
// a sample).
func (r *limitsRun) sample(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _, per, err := r.serverInFlight(sctx)
		cancel()
		if err == nil {
			r.peakMu.Lock()
			for q, n := range per {
				r.serverPeak[q] = max(r.serverPeak[q], n)
			}
			r.peakMu.Unlock()
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// fill copies the ledgers' figures into res.
func (r *limitsRun) fill(res *Limits) {
	c := r.w.led.summarize()
	res.Attempted, res.Acknowledged, res.DeadLettered = c.Attempted, c.Acknowledged, c.DeadLettered
	res.AfterAck, res.AfterAckOverlap, res.Phantom = c.AfterAck, c.AfterAckOverlap, c.Phantom
	res.PublishErrors, res.ConsumeErrors, res.AckErrors = c.PublishErrors, c.ConsumeErrors, c.AckErrors
	l := r.w.led
	l.mu.Lock()
	seqs := make([]int64, 0, len(l.jobs))
	for s, j := range l.jobs {
		if j.acked && !j.ackOK && !j.dead {
			seqs = append(seqs, s)
			if j.notFound {
				res.LostNotFound++
			}
		}
	}
	l.mu.Unlock()
	slices.Sort(seqs)
	res.Lost = len(seqs)
	res.LostSeqs = seqs[:min(len(seqs), 20)]
	res.Deliveries, res.Acked, res.Released = int(r.deliveries.Load()), int(r.acked.Load()), int(r.released.Load())
	res.LetGo, res.Stale, res.Mismatches = int(r.letGo.Load()), int(r.stale.Load()), int(r.mismatches.Load())
	res.AckUnknown = int(r.ackUnknown.Load())
	res.AckInferred, res.AckNotFound = int(r.ackInferred.Load()), int(r.ackNotFound.Load())
	limits := map[string]flightLimits{}
	for _, q := range r.queues {
		limits[q.Name] = flightLimits{MaxInFlight: q.MaxInFlight, GroupMaxInFlight: q.GroupMaxInFlight}
	}
	res.Scopes, res.EmptySpans = r.fl.check(limits)
	r.peakMu.Lock()
	res.ServerPeak = maps.Clone(r.serverPeak)
	r.peakMu.Unlock()
}

// violations sums the violations of every scope.
func (res *Limits) violations() int {
	n := 0
	for _, s := range res.Scopes {
		n += s.Violations
	}
	return n
}

// judge decides Pass.
func (res *Limits) judge(lc limitsConfig) {
	var f []string
	fail := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }
	for _, s := range res.Scopes {
		name := s.Queue
		if s.Group != "" {
			name += "/" + s.Group
		}
		if s.Violations > 0 {
			fail("%s: %d violations of the limit %d (peak %d, %.1f ms above it, first at %s)", name, s.Violations, s.Limit,
				s.Peak, s.OverMs, s.FirstOver.Format("15:04:05.000"))
		}
	}
	for _, q := range res.Queues {
		var groupPeak int
		for _, s := range res.Scopes {
			if s.Queue != q.Name {
				continue
			}
			if s.Group == "" && s.Peak < q.MaxInFlight {
				fail("%s: the consumers never held %d jobs at once (peak %d): the limit was not tested", q.Name, q.MaxInFlight, s.Peak)
			}
			if s.Group != "" {
				groupPeak = max(groupPeak, s.Peak)
			}
		}
		if q.GroupMaxInFlight > 0 && groupPeak < q.GroupMaxInFlight {
			fail("%s: no group ever had %d jobs in flight (peak %d): the group limit was not tested", q.Name, q.GroupMaxInFlight, groupPeak)
		}
		if p := res.ServerPeak[q.Name]; p > q.MaxInFlight {
			fail("%s: the server counted %d jobs in flight at once, above its limit %d", q.Name, p, q.MaxInFlight)
		} else if p == 0 {
			fail("%s: the server's in-flight hash was never seen non-empty (g/{T}%s/%s/i): the drift check would prove nothing", q.Name, limitsNamespace, q.Name)
		}
	}
	if res.ServerLeft != 0 || res.ServerCounts != 0 || res.ReportedLeft > 0 {
		fail("after the drain the server still counts jobs in flight: %d in its in-flight hashes, %d in its per-group counts, %d by GET …/groups: the count drifted",
			res.ServerLeft, res.ServerCounts, res.ReportedLeft)
	}
	if res.Lost > 0 {
		fail("%d acknowledged jobs lost, e.g. seqs %v (%d ACKs or releases never answered; %d of the lost jobs' ACKs answered 404 at once)",
			res.Lost, res.LostSeqs, res.AckUnknown, res.LostNotFound)
	}
	if res.Residual > 0 {
		fail("%d jobs left after the drain", res.Residual)
	}
	if res.AfterAck > 0 {
		fail("%d deliveries after a successful ACK", res.AfterAck)
	}
	if res.Phantom > 0 || res.Mismatches > 0 {
		fail("%d deliveries of jobs never published, %d answers with the wrong queue or group", res.Phantom, res.Mismatches)
	}
	if res.EmptySpans*20 > res.Deliveries {
		fail("%d of %d deliveries answered after t0 + TTR (a long-poll that waited most of the TTR): the ledger places too few; raise -limits-ttr", res.EmptySpans, res.Deliveries)
	}
	if res.ServerKills < lc.ServerKills || res.RedisKills < lc.RedisKills {
		fail("faults: %d of %d server kills, %d of %d redis kills", res.ServerKills, lc.ServerKills, res.RedisKills, lc.RedisKills)
	}
	res.Failures = f
	res.Pass = len(f) == 0
}

// writeLimits prints the scenario's counts and verdict.
func writeLimits(out io.Writer, r Limits) {
	fmt.Fprintf(out, "\nlimits: %s, %d consumers, TTR %d ms, %.0f s of chaos (%d server SIGKILLs, %d redis SIGKILLs), drain %.1f s\n",
		r.Setup, r.Consumers, r.TTRMs, r.ChaosS, r.ServerKills, r.RedisKills, r.DrainS)
	fmt.Fprintf(out, "deliveries the ledger could not place (answered after t0 + TTR): %d\n", r.EmptySpans)
	fmt.Fprintf(out, "publishes acknowledged %s of %s; deliveries %s: ACKed %s (%d of them 404 after an unknown outcome), released %s, let go %s, stale %d, not found %d, unanswered %d; dead-lettered %d; lost %d; residual %d\n",
		formatCount(r.Acknowledged), formatCount(r.Attempted), formatCount(r.Deliveries), formatCount(r.Acked), r.AckInferred,
		formatCount(r.Released), formatCount(r.LetGo), r.Stale, r.AckNotFound, r.AckUnknown, r.DeadLettered, r.Lost, r.Residual)
	if r.AfterAckOverlap > 0 {
		fmt.Fprintf(out, "deliveries answered after the job's ACK by a consume sent before it (taken before it, or after: see the AOF): %d\n", r.AfterAckOverlap)
	}
	fmt.Fprintf(out, "server in flight: most seen %v; after the drain %d (per-group counts %d, GET …/groups %d)\n", r.ServerPeak, r.ServerLeft, r.ServerCounts, r.ReportedLeft)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queue\tgroup\tlimit\tdeliveries\tpeak\tat limit s\tviolations\t")
	for _, s := range r.Scopes {
		limit := "-"
		if s.Limit > 0 {
			limit = strconv.Itoa(s.Limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.1f\t%d\t\n", s.Queue, s.Group, limit, formatCount(s.Deliveries), s.Peak, s.AtLimitS, s.Violations)
	}
	_ = tw.Flush()
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	fmt.Fprintf(out, "limits: %s\n", verdict)
}
