package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one scenario's report, printed as one JSON line.
type Result struct {
	Scenario string  `json:"scenario"`
	Setup    string  `json:"setup"`
	Tries    int     `json:"tries"`
	TTRS     int     `json:"ttr_s"`
	ChaosS   float64 `json:"chaos_s"`
	DrainS   float64 `json:"drain_s"`

	ServerKills   int      `json:"server_kills"`
	RedisKills    int      `json:"redis_kills"`
	ScriptFlushes int      `json:"script_flushes"`
	ClientPauses  int      `json:"client_pauses"`
	Failovers     int      `json:"failovers"`
	FailoverKinds []string `json:"failover_kinds,omitempty"`
	// The cluster scenarios': slot moves (Reshards of them, each a
	// targeted move of a busy queue's slot and a redis-cli reshard of 200
	// more) and master kills, with the failover times (kill to the
	// replica serving, every node agreeing) and rejoin times (restart to
	// every slot with a replica again).
	Reshards    int     `json:"reshards,omitempty"`
	SlotsMoved  int     `json:"slots_moved,omitempty"`
	KeysMoved   int     `json:"keys_migrated,omitempty"`
	SlotMoveMs  []int64 `json:"slot_move_ms,omitempty"`
	MasterKills int     `json:"master_kills,omitempty"`
	FailoverMs  []int64 `json:"failover_ms,omitempty"`
	RejoinMs    []int64 `json:"rejoin_ms,omitempty"`

	ConsumerCuts  int `json:"consumer_cuts"`
	JobsAbandoned int `json:"jobs_abandoned"`

	Attempted    int `json:"publishes_attempted"`
	Acknowledged int `json:"acknowledged"`
	// Delivered counts acknowledged jobs delivered at least once.
	Delivered int `json:"delivered"`
	// DeadLettered counts acknowledged jobs found in the dead letter;
	// DeadOnly those of them never delivered.
	DeadLettered int     `json:"dead_lettered"`
	DeadOnly     int     `json:"dead_only"`
	Lost         int     `json:"lost"`
	LostSeqs     []int64 `json:"lost_seqs,omitempty"`
	// LostByDisruption attributes lost jobs to the disruption during
	// which they were published.
	LostByDisruption map[string]int `json:"lost_by_disruption,omitempty"`
	LossExpected     bool           `json:"loss_expected"`
	// Duplicates counts deliveries beyond the first of any job;
	// RedeliveredAfterAck those that came after a successful ACK.
	Duplicates          int `json:"duplicates"`
	RedeliveredAfterAck int `json:"redelivered_after_ack"`
	// UnackedDelivered counts jobs whose publish got no 201 (the answer
	// was lost) but which were delivered: published after all.
	UnackedDelivered int `json:"unacked_delivered"`
	Phantom          int `json:"phantom"`

	LateP50Ms int64 `json:"late_p50_ms"`
	LateP99Ms int64 `json:"late_p99_ms"`
	LateMaxMs int64 `json:"late_max_ms"`
	Late1s    int   `json:"late_over_1s"`
	Early     int   `json:"early"`

	OutageMs      int64   `json:"outage_ms"`
	PublishP50Ms  float64 `json:"publish_p50_ms"`
	PublishP99Ms  float64 `json:"publish_p99_ms"`
	PublishMaxMs  float64 `json:"publish_max_ms"`
	PublishErrors int     `json:"publish_errors"`
	ConsumeErrors int     `json:"consume_errors"`
	AckErrors     int     `json:"ack_errors"`
	Residual      int     `json:"residual"`

	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
}

// result turns a ledger summary and the disruption counts into a Result.
func (sc scenario) result(c counts, done map[string]int, kinds []string) Result {
	return Result{
		Scenario: sc.Name, Setup: sc.setupName(), Tries: sc.Tries, TTRS: sc.TTR,
		ServerKills: done[evServerKill], RedisKills: done[evRedisKill], ScriptFlushes: done[evFlush],
		ClientPauses: done[evPause], Failovers: done[evFailover], FailoverKinds: kinds,
		Reshards: done[evReshard], MasterKills: done[evMasterKill],
		ConsumerCuts: c.Cuts, JobsAbandoned: c.Abandoned,
		Attempted: c.Attempted, Acknowledged: c.Acknowledged, Delivered: c.Delivered,
		DeadLettered: c.DeadLettered, DeadOnly: c.DeadOnly, Lost: c.Lost, LostSeqs: c.LostSeqs,
		LossExpected: sc.LossExpected, Duplicates: c.Duplicates, RedeliveredAfterAck: c.AfterAck,
		UnackedDelivered: c.UnackedDelivered, Phantom: c.Phantom,
		LateP50Ms: c.LateP50, LateP99Ms: c.LateP99, LateMaxMs: c.LateMax, Late1s: c.Late1s, Early: c.Early,
		OutageMs:     c.Outage.Milliseconds(),
		PublishP50Ms: ms2(c.PubP50), PublishP99Ms: ms2(c.PubP99), PublishMaxMs: ms2(c.PubMax),
		PublishErrors: c.PublishErrors, ConsumeErrors: c.ConsumeErrors, AckErrors: c.AckErrors,
	}
}

// addCluster adds what the cluster disruptions measured.
func (r *Result) addCluster(c clusterStats) {
	r.SlotsMoved, r.KeysMoved = c.slotsMoved, c.keysMoved
	r.SlotMoveMs = msList(c.reshardTimes)
	r.FailoverMs, r.RejoinMs = msList(c.failovers), msList(c.rejoins)
}

// ms2 is d in milliseconds with two decimals.
func ms2(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*100) / 100
}

// judge decides Pass: no loss unless the scenario expects Redis to lose
// writes, no phantom delivery, nothing left after the drain, every
// disruption asked for done, and enough traffic to mean something.
func (r *Result) judge(sc scenario) {
	var f []string
	if r.Lost > 0 && !sc.LossExpected {
		f = append(f, fmt.Sprintf("%d acknowledged jobs lost", r.Lost))
	}
	if sc.MustLose && r.Lost == 0 {
		f = append(f, "the negative control lost nothing: the suite would not see a loss")
	}
	if r.Phantom > 0 {
		f = append(f, fmt.Sprintf("%d deliveries of jobs never published", r.Phantom))
	}
	if r.Residual > 0 {
		f = append(f, fmt.Sprintf("%d jobs left after the drain", r.Residual))
	}
	if r.Acknowledged < 100 {
		f = append(f, fmt.Sprintf("only %d publishes acknowledged", r.Acknowledged))
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"server kills", r.ServerKills, sc.ServerKills},
		{"redis kills", r.RedisKills, sc.RedisKills},
		{"script flushes", r.ScriptFlushes, sc.Flushes},
		{"client pauses", r.ClientPauses, sc.Pauses},
		{"failovers", r.Failovers, sc.Failovers},
		{"reshards", r.Reshards, sc.Reshards},
		{"master kills", r.MasterKills, sc.MasterKills},
	} {
		if c.got < c.want {
			f = append(f, fmt.Sprintf("%d %s of %d", c.got, c.what, c.want))
		}
	}
	if sc.Droppers > 0 && r.ConsumerCuts+r.JobsAbandoned == 0 {
		f = append(f, "no consumer dropped a job")
	}
	r.Failures = f
	r.Pass = len(f) == 0
}

// disruptions describes what was done to the setup, briefly.
func (r *Result) disruptions() string {
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.ServerKills, "server kills")
	add(r.RedisKills, "redis kills")
	add(r.ScriptFlushes, "flushes")
	add(r.ClientPauses, "pauses")
	add(r.Failovers, "failovers")
	add(r.Reshards, fmt.Sprintf("reshards (%d slots, %d keys migrated)", r.SlotsMoved, r.KeysMoved))
	add(r.MasterKills, fmt.Sprintf("master kills (failover ms %v, rejoin ms %v)", r.FailoverMs, r.RejoinMs))
	add(r.ConsumerCuts+r.JobsAbandoned, "consumer drops")
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// writeTable prints the results as an aligned table.
func writeTable(out io.Writer, results []Result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tfsync\ttries\tacked\tdelivered\tdead\tlost\tdups\tafter-ack\tlate p50/p99/max ms\t>1s\toutage ms\tpub p50/p99/max ms\tresult\t")
	for _, r := range results {
		fsync := r.Setup[strings.LastIndex(r.Setup, " ")+1:]
		if fsync == "no" {
			fsync = "no AOF"
		}
		result := "PASS"
		if !r.Pass {
			result = "FAIL"
		}
		lost := formatCount(r.Lost)
		if r.Lost > 0 && r.LossExpected {
			lost += " (redis)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%s\t%s\t%.1f/%.0f/%.0f\t%s\t\n",
			r.Scenario, fsync, r.Tries, formatCount(r.Acknowledged), formatCount(r.Delivered),
			formatCount(r.DeadLettered), lost, formatCount(r.Duplicates), formatCount(r.RedeliveredAfterAck),
			r.LateP50Ms, r.LateP99Ms, r.LateMaxMs, formatCount(r.Late1s), formatCount(int(r.OutageMs)),
			r.PublishP50Ms, r.PublishP99Ms, r.PublishMaxMs, result)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	for _, r := range results {
		fmt.Fprintf(out, "%-20s %s; %s\n", r.Scenario, r.Setup, r.disruptions())
		if len(r.LostByDisruption) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.LostByDisruption)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, r.LostByDisruption[k]))
			}
			fmt.Fprintf(out, "%-20s lost by disruption: %s\n", "", strings.Join(parts, ", "))
		}
		for _, f := range r.Failures {
			fmt.Fprintf(out, "%-20s FAIL: %s\n", "", f)
		}
	}
}
