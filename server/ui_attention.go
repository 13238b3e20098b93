package server

// The overview's attention list (doc/dashboard.md, "Needs attention"):
// what needs an operator now, across every pool and namespace. Queues are
// judged from their activity (dashboard_cache.go: paused, oldest ready
// job, the counts of the recent minutes, whether its max_in_flight holds
// back ready jobs), read for every queue of the pool at most once per the
// activity cache's lifetime; pools and namespaces from what the overview
// reads anyway (readiness, quotas).

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// attentionAge is how long a ready job may wait, and a backlog go
// unconsumed, before its queue is listed: the recent minutes of the
// queues' counts (5), as docker/prometheus-alerts.yml's KairosQueueStuck.
const attentionAge = engine.RecentMinutes * time.Minute

// attentionNear is the share of a quota (percent) from which a namespace
// is listed as near it.
const attentionNear = 90

// attentionMax bounds the rows of the list; the summary counts the rest.
const attentionMax = 100

// Why something is listed, most urgent first.
const (
	whyPoolDown     = "unreachable" // pool
	whyPoolFull     = "pool full"   // pool
	whyPoolReserve  = "pool reserve"
	whyQuotaFull    = "quota full" // namespace
	whyStuck        = "not consumed"
	whyDeadGrowing  = "dead letter growing"
	whyFallingBehnd = "old ready job"
	whyAtLimit      = "at in-flight limit"
	whyQuotaNear    = "near quota" // namespace
	whyPaused       = "paused"
)

var whyRank = map[string]int{whyPoolDown: 0, whyPoolFull: 1, whyPoolReserve: 2, whyQuotaFull: 3, whyStuck: 4,
	whyDeadGrowing: 5, whyFallingBehnd: 6, whyAtLimit: 7, whyQuotaNear: 8, whyPaused: 9}

// attentionRow is one line of the list: a pool, a namespace or a queue,
// and why.
type attentionRow struct {
	Pool, Namespace, Queue string
	URL                    string
	Why                    []attentionWhy
	rank                   int
	weight                 int64 // orders rows of one rank: bigger first
	// The queue's figures (Queue != ""), for the page and for JSON.
	Ready, Dead, DeadRecent int64
	OldestReady             string
	PubRate, ConRate        string
	oldestMS                int64
	pub, con                float64
}

// attentionJSON is a row of GET /overview's attention.
type attentionJSON struct {
	Pool             string            `json:"pool"`
	Namespace        string            `json:"namespace"`
	Queue            string            `json:"queue"`
	Why              []attentionWhyRow `json:"why"`
	Ready            int64             `json:"ready"`
	Dead             int64             `json:"dead"`
	DeadRecent       int64             `json:"dead_recent"`
	OldestReadyAgeMS int64             `json:"oldest_ready_age_ms"`
	Rates            struct {
		Published float64 `json:"published"`
		Consumed  float64 `json:"consumed"`
	} `json:"rates"`
}

type attentionWhyRow struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// json renders the rows for GET /overview.
func (a *attentionList) json() []attentionJSON {
	out := make([]attentionJSON, len(a.Rows))
	for i, r := range a.Rows {
		o := attentionJSON{Pool: r.Pool, Namespace: r.Namespace, Queue: r.Queue, Ready: r.Ready, Dead: r.Dead,
			DeadRecent: r.DeadRecent, OldestReadyAgeMS: r.oldestMS}
		o.Rates.Published, o.Rates.Consumed = r.pub, r.con
		for _, w := range r.Why {
			o.Why = append(o.Why, attentionWhyRow{w.Kind, w.Text})
		}
		out[i] = o
	}
	return out
}

// attentionWhy is one reason: a short Kind (the badge, and the row's
// data-why) and a sentence.
type attentionWhy struct {
	Kind, Text string
	Bad        bool // red rather than amber
}

// attentionList is the overview's section.
type attentionList struct {
	Rows []attentionRow
	// More counts the rows left out past attentionMax.
	More int
	// Age is how old the oldest activity read behind the list is, when
	// over 3 s ("" otherwise); Errors name the pools whose queues could
	// not be judged.
	Age    string
	Errors []string
	asOf   time.Time // the oldest read
}

func (a *attentionList) add(r attentionRow) {
	r.rank = len(whyRank)
	for _, w := range r.Why {
		r.rank = min(r.rank, whyRank[w.Kind])
	}
	a.Rows = append(a.Rows, r)
}

// finish orders the rows (most urgent first, then the biggest, then by
// name) and keeps attentionMax.
func (a *attentionList) finish(now time.Time) {
	a.Age = staleFor(now, a.asOf)
	slices.SortStableFunc(a.Rows, func(x, y attentionRow) int {
		if x.rank != y.rank {
			return x.rank - y.rank
		}
		if x.weight != y.weight {
			if x.weight > y.weight {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Pool+"\x00"+x.Namespace+"\x00"+x.Queue, y.Pool+"\x00"+y.Namespace+"\x00"+y.Queue)
	})
	if len(a.Rows) > attentionMax {
		a.More = len(a.Rows) - attentionMax
		a.Rows = a.Rows[:attentionMax]
	}
}

// judgePool lists a pool that cannot take work: unreachable, or full.
func (a *attentionList) judgePool(pv *poolView) {
	var why []attentionWhy
	switch {
	case !pv.Reachable:
		why = append(why, attentionWhy{whyPoolDown, "its Redis does not answer: " + pv.Error, true})
	case pv.Full:
		why = append(why, attentionWhy{whyPoolFull, "Redis is at maxmemory: every publish answers 507 until consumers make room", true})
	case pv.Reserve:
		why = append(why, attentionWhy{whyPoolReserve, "a node is in its memory reserve: the heaviest namespaces' publishes answer 507", true})
	}
	if why != nil {
		a.add(attentionRow{Pool: pv.Name, Why: why})
	}
}

// judgeNamespace lists a namespace at or near its quota.
func (a *attentionList) judgeNamespace(pool string, v *nsView) {
	u := v.Usage
	if u == nil {
		return
	}
	url := "/ui/ns/" + url.PathEscape(pool) + "/" + url.PathEscape(v.Name)
	share := max(u.JobsPct, u.BytesPct)
	switch {
	case u.Full:
		a.add(attentionRow{Pool: pool, Namespace: v.Name, URL: url, weight: int64(share),
			Why: []attentionWhy{{whyQuotaFull, "a limit of its quota is reached: its publishes answer 429", true}}})
	case share >= attentionNear:
		a.add(attentionRow{Pool: pool, Namespace: v.Name, URL: url, weight: int64(share),
			Why: []attentionWhy{{whyQuotaNear, "it holds " + strconv.Itoa(share) + " % of its quota", false}}})
	}
}

// judgeQueue lists a queue whose backlog is not consumed, whose dead
// letter grows, whose oldest ready job has waited long, that is held at
// its max_in_flight with ready jobs waiting (throttled: by design, but
// the operator should know), or that is paused.
func (a *attentionList) judgeQueue(pool, ns string, q *engine.QueueDetail, now time.Time) {
	var age time.Duration
	if q.Ready > 0 && !q.OldestReady.IsZero() {
		age = max(0, now.Sub(q.OldestReady))
	}
	waited := age.Round(time.Second).String()
	// The window: the recent complete minutes and the current one.
	since := now.UTC().Truncate(time.Minute).Add(-engine.RecentMinutes * time.Minute).Format("15:04 UTC")
	consumed, died := q.Recent.Consumed+q.Current.Consumed, q.Recent.Dead+q.Current.Dead
	var why []attentionWhy
	switch {
	case q.Paused:
		why = append(why, attentionWhy{whyPaused, "paused: consumers get nothing (" + strconv.FormatInt(q.Ready, 10) + " ready)", false})
	case age >= attentionAge && consumed == 0:
		why = append(why, attentionWhy{whyStuck, strconv.FormatInt(q.Ready, 10) + " ready and nothing consumed since " + since +
			"; the oldest has waited " + waited, true})
	case age >= attentionAge:
		why = append(why, attentionWhy{whyFallingBehnd, "the oldest ready job has waited " + waited + " though consumers take jobs", false})
	}
	if q.AtLimit && !q.Paused {
		part := ""
		if q.LimitInFlight < q.MaxInFlight {
			part = " (a shard is at its part of it)"
		}
		why = append(why, attentionWhy{whyAtLimit, strconv.FormatInt(q.LimitInFlight, 10) + " in flight, its max_in_flight is " +
			strconv.FormatInt(q.MaxInFlight, 10) + part + ": " + strconv.FormatInt(q.Ready, 10) + " ready wait for a slot", false})
	}
	if died > 0 {
		jobs := " jobs died since "
		if died == 1 {
			jobs = " job died since "
		}
		why = append(why, attentionWhy{whyDeadGrowing, strconv.FormatInt(died, 10) + jobs + since +
			" (" + strconv.FormatInt(q.DeadLetter, 10) + " in the dead letter)", true})
	}
	if why == nil {
		return
	}
	secs := float64(engine.RecentMinutes * 60)
	r := attentionRow{Pool: pool, Namespace: ns, Queue: q.Queue, URL: queueBase(pool, ns, q.Queue), Why: why,
		Ready: q.Ready, Dead: q.DeadLetter, DeadRecent: died,
		pub: float64(q.Recent.Published) / secs, con: float64(q.Recent.Consumed) / secs,
		weight: max(age.Milliseconds(), died), oldestMS: age.Milliseconds()}
	r.PubRate, r.ConRate = rate(r.pub), rate(r.con)
	if age > 0 {
		r.OldestReady = waited
	}
	a.add(r)
}

// judgeQueues lists the queues of a pool's namespaces that need
// attention, from their cached activity; the activity of a pool of n
// queues is read at most once per the cache's lifetime for n.
func (s *Server) judgeQueues(ctx context.Context, a *attentionList, pool string, db engine.Dashboard, namespaces []string, queues int, now time.Time) {
	atLeast := s.activity.ttl(queues)
	for _, ns := range namespaces {
		act, at, err := s.namespaceActivity(ctx, pool, ns, db, atLeast)
		if err != nil {
			a.Errors = append(a.Errors, "pool "+pool+": "+errMessage(ctx, err))
			return
		}
		if a.asOf.IsZero() || at.Before(a.asOf) {
			a.asOf = at
		}
		for i := range act {
			a.judgeQueue(pool, ns, &act[i], now)
		}
	}
}
