package server

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/migration"
)

// The dashboard's data endpoints on the admin listener (doc/dashboard.md,
// "Data endpoints"): history series, the queues of a namespace with their
// sizes in bulk, jobs by state, a job by ID, pools and totals. They read
// what engine.Dashboard offers; a pool whose engine lacks it answers 501.

var (
	errNoDashboard      = newAPIError(http.StatusNotImplemented, "error", "this pool's engine keeps no dashboard data")
	errInvalidRange     = badRequest("invalid range: one of 15m, 1h, 6h, 24h")
	errInvalidFrom      = badRequest("invalid from: Unix milliseconds or RFC 3339")
	errInvalidTo        = badRequest("invalid to: Unix milliseconds or RFC 3339, after from")
	errInvalidWindow    = badRequest("invalid window: from and to at most 24h apart")
	errInvalidStep      = badRequest("invalid step: seconds, a multiple of 60 from 60 to 3600")
	errInvalidOffset2   = badRequest("invalid offset")
	errInvalidPageLimit = badRequest("invalid limit")
	errInvalidSort      = badRequest("invalid sort: one of name, ready, scheduled, dead, oldest_ready, published, consumed")
	errInvalidOrder     = badRequest("invalid order: asc or desc")
	errInvalidJobState  = badRequest("invalid state: one of ready, delayed, in_flight, scheduled")
	errInvalidCursor    = badRequest("invalid cursor")
	errInvalidJobID     = badRequest("invalid job id")
)

// Page sizes and the cache of namespace sizes.
const (
	defaultQueuePage = 50
	maxQueuePage     = 500
	defaultJobPage   = 50
	maxJobPage       = 200
	historyWindowMax = 24 * time.Hour
)

// dashboardOf returns the dashboard reads of a pool: its engine's, or for
// a migrating pool its own (old) engine's.
func (s *Server) dashboardOf(pool string) (engine.Dashboard, error) {
	eng, ok := s.engines[pool]
	if !ok {
		return nil, errAdminPool
	}
	if m, ok := eng.(*migration.Engine); ok {
		eng = m.Old
	}
	d, ok := eng.(engine.Dashboard)
	if !ok {
		return nil, errNoDashboard
	}
	return d, nil
}

// validateNamespace checks a namespace alone as validateNames does.
func validateNamespace(ns string) error {
	if len(ns) > engine.MaxNameLength {
		return errNameTooLong
	}
	if !engine.ValidName(ns) {
		return errNamespaceChars
	}
	return nil
}

// queryPool is the pool query parameter, "default" when absent.
func queryPool(c *gin.Context) string {
	if p := c.Query("pool"); p != "" {
		return p
	}
	return auth.DefaultPool
}

// historyResponse is a series (doc/dashboard.md).
type historyResponse struct {
	Pool            string `json:"pool"`
	Namespace       string `json:"namespace"`
	Queue           string `json:"queue"`
	FromMS          int64  `json:"from_ms"`
	ToMS            int64  `json:"to_ms"`
	Step            int    `json:"step"`
	FlushIntervalMS int64  `json:"flush_interval_ms"`
	// PartialFromMS is the start of the first point that may still grow:
	// the step holding now minus the flush interval (the counts of a
	// step are complete once every server has flushed after its end).
	PartialFromMS int64               `json:"partial_from_ms"`
	T             []int64             `json:"t"`
	Published     []int64             `json:"published"`
	Consumed      []int64             `json:"consumed"`
	Acked         []int64             `json:"acked"`
	Retried       []int64             `json:"retried"`
	Dead          []int64             `json:"dead"`
	LatencyMS     map[string][]*int64 `json:"latency_ms"`
}

// HistoryFlushInterval is what the series report as flush_interval_ms:
// how often every server writes its counts (app sets the engines' to it).
const HistoryFlushInterval = 5 * time.Second

// window is a series' points: minutes [first, first+minutes), step minutes
// each.
type window struct {
	first   int64 // Unix minute
	minutes int
	step    int // minutes per point
}

// parseTime reads a from/to value: Unix milliseconds or RFC 3339.
func parseTime(v string) (time.Time, bool) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
			return time.Time{}, false
		}
		return time.UnixMilli(n), true
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// historyWindow reads range or from/to, and step.
func (s *Server) historyWindow(c *gin.Context) (window, error) {
	now := s.now()
	step := 60
	if v, ok := c.GetQuery("step"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 60 || n > 3600 || n%60 != 0 {
			return window{}, errInvalidStep
		}
		step = n
	}
	to := now
	var from time.Time
	fromV, hasFrom := c.GetQuery("from")
	toV, hasTo := c.GetQuery("to")
	if hasFrom || hasTo {
		if _, ok := c.GetQuery("range"); ok {
			return window{}, errInvalidRange
		}
		if !hasFrom {
			return window{}, errInvalidFrom
		}
		var ok bool
		if from, ok = parseTime(fromV); !ok {
			return window{}, errInvalidFrom
		}
		if hasTo {
			if to, ok = parseTime(toV); !ok {
				return window{}, errInvalidTo
			}
		}
		if !from.Before(to) {
			return window{}, errInvalidTo
		}
		if to.Sub(from) > historyWindowMax {
			return window{}, errInvalidWindow
		}
	} else {
		d := time.Hour
		if v, ok := c.GetQuery("range"); ok {
			switch v {
			case "15m":
				d = 15 * time.Minute
			case "1h":
				d = time.Hour
			case "6h":
				d = 6 * time.Hour
			case "24h":
				d = 24 * time.Hour
			default:
				return window{}, errInvalidRange
			}
		}
		from = to.Add(-d)
	}
	sm := int64(step / 60)
	first := floorDiv(from.Unix(), 60)
	first -= mod(first, sm)
	last := floorDiv(to.Unix(), 60) + 1 // exclusive: the minute of to is shown
	if r := mod(last, sm); r != 0 {
		last += sm - r
	}
	return window{first: first, minutes: int(last - first), step: int(sm)}, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// historyOf returns the minutes of w for ns/q of the pools named.
func (s *Server) historyOf(ctx context.Context, pools []string, ns, q string, w window) ([]engine.Counts, error) {
	sum := make([]engine.Counts, w.minutes)
	for _, p := range pools {
		d, err := s.dashboardOf(p)
		if err != nil {
			return nil, err
		}
		got, err := d.History(ctx, ns, q, time.Unix(w.first*60, 0), w.minutes)
		if err != nil {
			return nil, err
		}
		for i := range got {
			sum[i].Add(&got[i])
		}
	}
	return sum, nil
}

// series serves GET /history, /history/:namespace and
// /history/:namespace/:queue.
func (s *Server) series(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	if q != "" {
		if err := validateNames(ns, q); err != nil {
			s.failAdmin(c, err)
			return
		}
	} else if ns != "" {
		if err := validateNamespace(ns); err != nil {
			s.failAdmin(c, err)
			return
		}
	}
	pool := c.Query("pool")
	pools := []string{pool}
	switch {
	case pool == "" && ns == "":
		pools = s.pools // the deployment: every pool
	case pool == "":
		pool, pools = auth.DefaultPool, []string{auth.DefaultPool}
	}
	w, err := s.historyWindow(c)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	minutes, err := s.historyOf(c.Request.Context(), pools, ns, q, w)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	n := w.minutes / w.step
	sm := int64(w.step)
	partial := floorDiv(floorDiv(s.now().Add(-HistoryFlushInterval).Unix(), 60), sm) * sm
	out := historyResponse{
		Pool: pool, Namespace: ns, Queue: q,
		FromMS: w.first * 60_000, ToMS: (w.first + int64(w.minutes)) * 60_000, Step: w.step * 60,
		FlushIntervalMS: HistoryFlushInterval.Milliseconds(), PartialFromMS: partial * 60_000,
		T: make([]int64, n), Published: make([]int64, n), Consumed: make([]int64, n),
		Acked: make([]int64, n), Retried: make([]int64, n), Dead: make([]int64, n),
		LatencyMS: map[string][]*int64{"p50": make([]*int64, n), "p90": make([]*int64, n), "p99": make([]*int64, n)},
	}
	for i := 0; i < n; i++ {
		var pt engine.Counts
		for _, m := range minutes[i*w.step : (i+1)*w.step] {
			pt.Add(&m)
		}
		out.T[i] = (w.first + int64(i*w.step)) * 60_000
		out.Published[i], out.Consumed[i], out.Acked[i], out.Retried[i], out.Dead[i] = pt.Published, pt.Consumed, pt.Acked, pt.Retried, pt.Dead
		for name, p := range map[string]float64{"p50": 0.5, "p90": 0.9, "p99": 0.99} {
			if v := pt.LatencyPercentile(p); v >= 0 {
				out.LatencyMS[name][i] = &v
			}
		}
	}
	c.JSON(http.StatusOK, out)
}

// queueRow is one queue of GET /queues/:namespace.
type queueRow struct {
	Queue            string    `json:"queue"`
	Ready            int64     `json:"ready"`
	Delayed          int64     `json:"delayed"`
	InFlight         int64     `json:"in_flight"`
	InFlightExact    bool      `json:"in_flight_exact"`
	Scheduled        int64     `json:"scheduled"`
	Dead             int64     `json:"dead"`
	Paused           bool      `json:"paused"`
	OldestReadyAgeMS int64     `json:"oldest_ready_age_ms"`
	Rates            queueRate `json:"rates"`
}

// queueRate is per second over the recent complete minutes.
type queueRate struct {
	Published float64 `json:"published"`
	Consumed  float64 `json:"consumed"`
	Acked     float64 `json:"acked"`
	Retried   float64 `json:"retried"`
	Dead      float64 `json:"dead"`
}

type queuesResponse struct {
	Pool          string     `json:"pool"`
	Namespace     string     `json:"namespace"`
	Total         int        `json:"total"`
	Offset        int        `json:"offset"`
	Limit         int        `json:"limit"`
	GeneratedAtMS int64      `json:"generated_at_ms"`
	Queues        []queueRow `json:"queues"`
}

// queryInt reads an int parameter in [lo, hi], def when absent.
func queryInt(c *gin.Context, name string, def, lo, hi int, bad *apiError) (int, error) {
	v, ok := c.GetQuery(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, bad
	}
	return n, nil
}

// listQueues serves GET /queues/:namespace.
func (s *Server) listQueues(c *gin.Context) {
	ns := c.Param("namespace")
	if err := validateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	pool := queryPool(c)
	d, err := s.dashboardOf(pool)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	offset, err := queryInt(c, "offset", 0, 0, math.MaxInt32, errInvalidOffset2)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	limit, err := queryInt(c, "limit", defaultQueuePage, 1, maxQueuePage, errInvalidPageLimit)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	var key func(st *engine.QueueStats) int64
	sortBy := c.DefaultQuery("sort", "name")
	switch sortBy {
	case "name":
	case "oldest_ready", "published", "consumed":
		// by the activity of every queue, below
	case "ready":
		key = func(st *engine.QueueStats) int64 { return st.Ready }
	case "scheduled":
		key = func(st *engine.QueueStats) int64 { return st.Timer }
	case "dead":
		key = func(st *engine.QueueStats) int64 { return st.DeadLetter }
	default:
		s.failAdmin(c, errInvalidSort)
		return
	}
	desc := false
	switch c.DefaultQuery("order", "asc") {
	case "asc":
	case "desc":
		desc = true
	default:
		s.failAdmin(c, errInvalidOrder)
		return
	}
	filter := c.Query("filter")
	ctx := c.Request.Context()
	all, _, err := s.namespaceSizes(ctx, pool, ns, d, 0)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if key == nil && sortBy != "name" {
		act, _, err := s.namespaceActivity(ctx, pool, ns, d, 0)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		by := make(map[string]*engine.QueueDetail, len(act))
		for i := range act {
			by[act[i].Queue] = &act[i]
		}
		now, k := s.now(), strings.TrimSuffix(sortBy, "_ready")
		key = func(st *engine.QueueStats) int64 { return activityKey(by[st.Queue], k, now) }
	}
	rows := make([]engine.QueueStats, 0, len(all))
	for _, st := range all {
		if filter == "" || strings.Contains(st.Queue, filter) {
			rows = append(rows, st)
		}
	}
	// all is sorted by name; a stable sort keeps names in ascending order
	// among equals, whatever the order.
	switch {
	case key != nil:
		sign := 1
		if desc {
			sign = -1
		}
		slices.SortStableFunc(rows, func(a, b engine.QueueStats) int {
			ka, kb := key(&a), key(&b)
			switch {
			case ka < kb:
				return -sign
			case ka > kb:
				return sign
			}
			return 0
		})
	case desc:
		slices.Reverse(rows)
	}
	out := queuesResponse{Pool: pool, Namespace: ns, Total: len(rows), Offset: offset, Limit: limit, GeneratedAtMS: s.now().UnixMilli(), Queues: []queueRow{}}
	if offset < len(rows) {
		page := rows[offset:min(len(rows), offset+limit)]
		names := make([]string, len(page))
		for i := range page {
			names[i] = page[i].Queue
		}
		details, err := d.QueueDetails(ctx, ns, names)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		now := s.now()
		secs := float64(engine.RecentMinutes * 60)
		for _, dt := range details {
			r := queueRow{
				Queue: dt.Queue, Ready: dt.Ready, Delayed: dt.Delayed, InFlight: dt.InFlight, InFlightExact: dt.InFlightExact,
				Scheduled: dt.Timer, Dead: dt.DeadLetter, Paused: dt.Paused,
				Rates: queueRate{
					Published: float64(dt.Recent.Published) / secs, Consumed: float64(dt.Recent.Consumed) / secs,
					Acked: float64(dt.Recent.Acked) / secs, Retried: float64(dt.Recent.Retried) / secs, Dead: float64(dt.Recent.Dead) / secs,
				},
			}
			if !dt.OldestReady.IsZero() && dt.Ready > 0 {
				r.OldestReadyAgeMS = max(0, now.Sub(dt.OldestReady).Milliseconds())
			}
			out.Queues = append(out.Queues, r)
		}
	}
	c.JSON(http.StatusOK, out)
}

// jobsResponse is a page of GET /queue/:namespace/:queue/jobs.
type jobsResponse struct {
	Jobs       []jobDetail `json:"jobs"`
	NextCursor string      `json:"next_cursor"`
}

// listJobs serves GET /queue/:namespace/:queue/jobs?state=&cursor=&limit=.
func (s *Server) listJobs(c *gin.Context) {
	pool, ns, q, _, ok := s.adminQueue(c)
	if !ok {
		return
	}
	d, err := s.dashboardOf(pool)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	list := engine.JobList(c.DefaultQuery("state", string(engine.ListReady)))
	switch list {
	case engine.ListReady, engine.ListDelayed, engine.ListInFlight, engine.ListScheduled:
	default:
		s.failAdmin(c, errInvalidJobState)
		return
	}
	var cursor int64
	if v := c.Query("cursor"); v != "" {
		if cursor, err = strconv.ParseInt(v, 10, 64); err != nil || cursor < 0 {
			s.failAdmin(c, errInvalidCursor)
			return
		}
	}
	limit, err := queryInt(c, "limit", defaultJobPage, 1, maxJobPage, errInvalidPageLimit)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	jobs, next, err := d.ListJobs(c.Request.Context(), ns, q, list, cursor, limit)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	out := jobsResponse{Jobs: make([]jobDetail, len(jobs))}
	now := s.now()
	for i, j := range jobs {
		out.Jobs[i] = newJobDetail(j, ns, q, now)
	}
	if next > 0 {
		out.NextCursor = strconv.FormatInt(next, 10)
	}
	c.JSON(http.StatusOK, out)
}

// adminPeekJob serves GET /queue/:namespace/:queue/job/:job_id.
func (s *Server) adminPeekJob(c *gin.Context) {
	_, ns, q, x, ok := s.adminQueue(c)
	if !ok {
		return
	}
	job, err := x.PeekJob(c.Request.Context(), ns, q, c.Param("job_id"))
	if err == nil && job == nil {
		err = errJobNotFound
	}
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusOK, newJobDetailAttempts(job, ns, q, s.now()))
}

// adminDeadJobs serves GET /queue/:namespace/:queue/deadletter/jobs: the
// public listDeadLetter on the admin listener, for the pool of ?pool=.
func (s *Server) adminDeadJobs(c *gin.Context) {
	_, _, _, x, ok := s.adminQueue(c)
	if !ok {
		return
	}
	state(c).eng = x
	s.listDeadLetter(c)
}

// findJob serves GET /job/:job_id?pool=: the job, whatever its queue.
func (s *Server) findJob(c *gin.Context) {
	id := c.Param("job_id")
	if _, err := engine.ParseJobID(id); err != nil {
		s.failAdmin(c, errInvalidJobID)
		return
	}
	d, err := s.dashboardOf(queryPool(c))
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	job, err := d.FindJob(c.Request.Context(), id)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusOK, newJobDetail(job, job.Namespace, job.Queue, s.now()))
}

// overviewResponse is GET /overview.
type overviewResponse struct {
	Pools         []poolOverview `json:"pools"`
	Totals        sizeTotals     `json:"totals"`
	GeneratedAtMS int64          `json:"generated_at_ms"`
	// Attention is the dashboard's attention list (ui_attention.go),
	// most urgent first; AttentionMore counts the rows left out.
	Attention     []attentionJSON `json:"attention"`
	AttentionMore int             `json:"attention_more"`
}

type poolOverview struct {
	Name       string              `json:"name"`
	Kind       string              `json:"kind"`
	Reachable  bool                `json:"reachable"`
	Error      string              `json:"error"`
	Namespaces []namespaceOverview `json:"namespaces"`
	Totals     sizeTotals          `json:"totals"`
}

type namespaceOverview struct {
	Name   string `json:"name"`
	Queues int    `json:"queues"`
}

type sizeTotals struct {
	Queues    int   `json:"queues"`
	Ready     int64 `json:"ready"`
	Scheduled int64 `json:"scheduled"`
	Dead      int64 `json:"dead"`
}

func (t *sizeTotals) add(o sizeTotals) {
	t.Queues += o.Queues
	t.Ready += o.Ready
	t.Scheduled += o.Scheduled
	t.Dead += o.Dead
}

// poolKind is what the config says of a pool's Redis, or what its engine
// talks to.
func (s *Server) poolKind(name string, d engine.Dashboard) string {
	if rc, ok := s.cfg.Pool[name]; ok {
		switch {
		case s.cfg.UsesEmbedded(rc):
			return "embedded"
		case rc.IsSentinel():
			return "sentinel"
		}
	}
	if d == nil {
		return "unknown"
	}
	return d.Topology()
}

// overview serves GET /overview: every pool, reachable or not, with its
// namespaces and size totals (each namespace's sizes through the cache of
// GET /queues).
func (s *Server) overview(c *gin.Context) {
	ctx := c.Request.Context()
	out := overviewResponse{Pools: make([]poolOverview, 0, len(s.pools)), GeneratedAtMS: s.now().UnixMilli()}
	var att attentionList
	_, checks := s.ready(ctx) // /readyz's result, reused for 250 ms
	for _, name := range s.pools {
		po := poolOverview{Name: name, Namespaces: []namespaceOverview{}}
		d, err := s.dashboardOf(name)
		po.Kind = s.poolKind(name, d)
		if err == nil {
			err = s.poolOverview(ctx, name, d, &po)
		}
		if err != nil {
			if ctx.Err() != nil {
				s.failAdmin(c, ctx.Err())
				return
			}
			po.Error = err.Error()
		} else {
			po.Reachable = true
		}
		out.Totals.add(po.Totals)
		out.Pools = append(out.Pools, po)
		att.judgePool(&poolView{Name: name, Reachable: po.Reachable, Error: po.Error,
			Full: checks["pool "+name] == "full", Reserve: checks["pool "+name] == "reserve"})
		usage := s.poolUsage(ctx, name)
		nss := make([]string, 0, len(po.Namespaces))
		for _, ns := range po.Namespaces {
			nss = append(nss, ns.Name)
		}
		for ns := range usage {
			if !slices.Contains(nss, ns) {
				nss = append(nss, ns)
			}
		}
		slices.Sort(nss)
		for _, ns := range nss {
			att.judgeNamespace(name, &nsView{Name: ns, Usage: usage[ns]})
		}
		if po.Reachable && po.Totals.Queues > 0 {
			names := make([]string, 0, len(po.Namespaces))
			for _, ns := range po.Namespaces {
				if ns.Queues > 0 {
					names = append(names, ns.Name)
				}
			}
			s.judgeQueues(ctx, &att, name, d, names, po.Totals.Queues, s.now())
		}
	}
	att.finish(s.now())
	out.Attention, out.AttentionMore = att.json(), att.More
	c.JSON(http.StatusOK, out)
}

func (s *Server) poolOverview(ctx context.Context, name string, d engine.Dashboard, po *poolOverview) error {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := d.Ping(pctx); err != nil {
		return err
	}
	info, err := s.engines[name].Info(pctx)
	if err != nil {
		return err
	}
	nss := make([]string, 0, len(info))
	for ns := range info {
		nss = append(nss, ns)
	}
	slices.Sort(nss)
	atLeast := s.sizes.ttl(poolQueues(info))
	for _, ns := range nss {
		if !engine.ValidName(ns) {
			continue
		}
		stats, _, err := s.namespaceSizes(pctx, name, ns, d, atLeast)
		if err != nil {
			return err
		}
		t := sizeTotals{Queues: len(stats)}
		for _, st := range stats {
			t.Ready += st.Ready
			t.Scheduled += st.Timer
			t.Dead += st.DeadLetter
		}
		po.Totals.add(t)
		po.Namespaces = append(po.Namespaces, namespaceOverview{Name: ns, Queues: len(stats)})
	}
	return nil
}

// poolQueues counts the queues of an engine's Info: what a read of every
// namespace's sizes or activity costs, for their caches' lifetimes.
func poolQueues(info map[string][]string) int {
	n := 0
	for _, qs := range info {
		n += len(qs)
	}
	return n
}
