package server

// The web dashboard (doc/dashboard.md): server-rendered pages at /ui/ on
// the admin listener, behind the admin basic auth, with a strict
// Content-Security-Policy and CSRF-checked forms (ui_security.go). The pages
// read the engines directly; state changes are HTML form POSTs answered by
// a redirect (303) back to the page, with a one-shot flash message.

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/migration"
	"github.com/kairos-dev/kairos/server/ui"
	"github.com/kairos-dev/kairos/server/webhook"
)

// dashboard renders the pages; one per server.
type dashboard struct {
	s       *Server
	pages   map[string]*template.Template
	static  http.Handler
	refresh int // seconds between live refreshes
}

// dashPages are the page templates, each parsed with layout.html.
var dashPages = []string{"overview", "namespace", "queue", "job", "tokens", "token_created", "audit", "error"}

func newDashboard(s *Server) (*dashboard, error) {
	d := &dashboard{s: s, pages: make(map[string]*template.Template), refresh: s.cfg.Dashboard.RefreshSecond}
	if d.refresh <= 0 {
		d.refresh = 5
	}
	funcs := template.FuncMap{
		"pathEsc": url.PathEscape,
		"deadReasons": func() []engine.DeadReason {
			return []engine.DeadReason{engine.ReasonNacked, engine.ReasonTTRExpired, engine.ReasonWebhookFailed}
		},
		"ago":   ago,
		"when":  when,
		"add":   func(a, b int) int { return a + b },
		"bytes": humanBytes,
	}
	for _, p := range dashPages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(ui.Templates(), "layout.html", p+".html")
		if err != nil {
			return nil, err
		}
		d.pages[p] = t
	}
	d.static = http.StripPrefix("/ui/static/", http.FileServer(http.FS(ui.Static())))
	return d, nil
}

// dashboardRoutes mounts /ui/ on the admin engine, behind its door
// (admin_door.go: Host, cross-site, account, role).
func (s *Server) dashboardRoutes(r *gin.Engine) error {
	d, err := newDashboard(s)
	if err != nil {
		return err
	}
	g := r.Group("/ui") // the door has set the security headers
	g.GET("/static/*file", d.serveStatic)

	pg := g.Group("", d.csrfCookie)
	pg.GET("/", d.overview)
	pg.GET("/ns/:pool/:namespace", d.namespace)
	pg.GET("/queue/:pool/:namespace/:queue", d.queue)
	pg.GET("/job/:pool/:namespace/:queue/:job_id", d.job)
	pg.GET("/lookup", d.lookup)
	pg.GET("/tokens", d.tokens)
	pg.GET("/audit", d.audit) // ui_audit.go

	post := g.Group("", d.checkCSRF)
	post.POST("/queue/:pool/:namespace/:queue/:action", d.queueAction)
	post.POST("/job/:pool/:namespace/:queue/:job_id/:action", d.jobAction)
	post.POST("/schedule/:pool/:namespace/:queue/:name/:action", d.scheduleAction)
	pg.GET("/tokens/created", d.tokenCreatedPage)
	post.POST("/tokens/create", d.createToken)
	post.POST("/tokens/revoke", d.revokeToken)
	return nil
}

func (d *dashboard) serveStatic(c *gin.Context) {
	if c.Param("file") == "/" || strings.HasSuffix(c.Param("file"), "/") {
		d.notFound(c, "no such file")
		return
	}
	c.Header("Cache-Control", "public, max-age=300")
	d.static.ServeHTTP(c.Writer, c.Request)
}

// pageData is what every page template gets; Page holds the page's own.
type pageData struct {
	Title   string
	Nav     string // which menu entry is current
	CSRF    string
	Flash   string
	FlashOK bool
	Refresh int
	Pools   []string
	// Lookup prefills the job lookup form.
	LookupPool, LookupNS, LookupQueue string
	// Account and Role are the signed-in account (none without
	// [Accounts]) and its role; CanOperate and CanAdmin say which forms
	// the pages show (the door refuses the others either way).
	Account, Role        string
	CanOperate, CanAdmin bool
	Page                 any
}

func (d *dashboard) render(c *gin.Context, status int, page, title, nav string, data any) {
	if ep, ok := data.(errorPage); ok {
		noteAuditError(c, ep.Message)
	}
	pd := pageData{Title: title, Nav: nav, CSRF: csrfToken(c), Refresh: d.refresh, Pools: d.s.pools, Page: data,
		LookupPool: c.Param("pool"), LookupNS: c.Param("namespace"), LookupQueue: c.Param("queue")}
	if pd.LookupPool == "" {
		pd.LookupPool = auth.DefaultPool
	}
	pd.Account, pd.Role = c.GetString(gin.AuthUserKey), c.GetString(AuthRoleKey)
	pd.CanOperate = roleRank(pd.Role) >= roleRank(config.RoleOperator)
	pd.CanAdmin = roleRank(pd.Role) >= roleRank(config.RoleAdmin)
	if c.GetHeader("X-Kairos-Live") == "" { // a live refresh leaves the flash to the page
		pd.Flash, pd.FlashOK = takeFlash(c)
	}
	var buf bytes.Buffer
	if err := d.pages[page].Execute(&buf, pd); err != nil {
		d.s.reqLogger(c).WithError(err).Error("dashboard: rendering failed")
		c.Data(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("internal error"))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// errorPage is the error page's data: a message and, when set, a link
// that offers the way on (the new-queue page of an unknown queue).
type errorPage struct {
	Message        string
	Link, LinkText string
}

func (d *dashboard) notFound(c *gin.Context, msg string) {
	d.render(c, http.StatusNotFound, "error", "Not found", "", errorPage{Message: msg})
}

// fail renders a page for err: the admin API's status and message.
func (d *dashboard) fail(c *gin.Context, err error) {
	ae := mapAdminError(c.Request.Context(), err)
	if serverFault(ae.status) {
		d.s.reqLogger(c).WithError(err).Error("dashboard request failed")
	}
	if ae.retryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(ae.retryAfter))
	}
	d.render(c, ae.status, "error", "Error", "", errorPage{Message: ae.msg})
}

// errMessage is the message of err as the admin API would give it.
func errMessage(ctx context.Context, err error) string {
	return mapAdminError(ctx, err).msg
}

// poolEngine returns the engine of the route's pool, or renders a 404.
func (d *dashboard) poolEngine(c *gin.Context) (string, engine.Engine, bool) {
	pool := c.Param("pool")
	if pool == "" {
		pool = c.Query("pool")
	}
	if pool == "" {
		pool = auth.DefaultPool
	}
	x, ok := d.s.engines[pool]
	if !ok {
		d.notFound(c, "unknown pool "+strconv.Quote(pool))
		return "", nil, false
	}
	return pool, x, true
}

// ---- overview ----

type poolView struct {
	Name      string
	Kind      string // standalone, sentinel, embedded
	Reachable bool
	Error     string
	// Full says that the pool's Redis is at maxmemory under noeviction
	// (its /readyz check reads "full"): publishes are refused with 507.
	Full bool
	// Reserve says that the pool is in its memory reserve (its /readyz
	// check reads "reserve"): the heaviest namespaces' publishes are
	// refused with 507, the others' go on.
	Reserve bool
	// Quotas says that the pool's engine keeps usage and quotas: the
	// namespaces' table has their columns.
	Quotas     bool
	Namespaces []nsView
	Totals     uiQueueRow
}

type nsView struct {
	Name   string
	Queues int
	Totals uiQueueRow
	// Usage is the namespace's usage against its quota (ui_quota.go);
	// nil when the pool's engine keeps none.
	Usage *uiUsage
}

type overviewPage struct {
	Pools  []poolView
	Totals uiQueueRow
	Queues int
}

func (d *dashboard) overview(c *gin.Context) {
	if c.Request.URL.Path != "/ui/" {
		d.notFound(c, "no such page")
		return
	}
	ctx := c.Request.Context()
	var page overviewPage
	_, checks := d.s.ready(ctx) // /readyz's result, reused for 250 ms
	for _, pool := range d.s.pools {
		db, derr := d.s.dashboardOf(pool)
		pv := poolView{Name: pool, Kind: d.s.poolKind(pool, db), Reachable: true, Full: checks["pool "+pool] == "full", Reserve: checks["pool "+pool] == "reserve"}
		rows, err := d.poolSizes(ctx, pool, db, derr)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			pv.Reachable, pv.Error = false, errMessage(ctx, err)
		}
		byNS := map[string]*nsView{}
		for _, r := range rows {
			v := byNS[r.Namespace]
			if v == nil {
				v = &nsView{Name: r.Namespace}
				byNS[r.Namespace] = v
			}
			v.Queues++
			v.Totals.addSizes(r)
			pv.Totals.addSizes(r)
		}
		usage := d.poolUsage(ctx, pool)
		pv.Quotas = usage != nil
		for ns := range usage {
			if byNS[ns] == nil && engine.ValidName(ns) {
				byNS[ns] = &nsView{Name: ns} // a quota, or jobs, without a queue listed yet
			}
		}
		for _, v := range byNS {
			v.Usage = usage[v.Name]
			pv.Namespaces = append(pv.Namespaces, *v)
		}
		slices.SortFunc(pv.Namespaces, func(a, b nsView) int { return strings.Compare(a.Name, b.Name) })
		page.Totals.addSizes(pv.Totals)
		page.Queues += len(rows)
		page.Pools = append(page.Pools, pv)
	}
	d.render(c, http.StatusOK, "overview", "Overview", "overview", page)
}

// poolSizes returns the sizes of every queue of a pool: through the
// engine's dashboard reads and the server's sizes cache (a few pipelines
// per namespace, shared with GET /queues), or, for an engine without
// them, its Stats.
func (d *dashboard) poolSizes(ctx context.Context, pool string, db engine.Dashboard, derr error) ([]uiQueueRow, error) {
	if derr != nil {
		return d.poolStats(ctx, pool, "")
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := db.Ping(pctx); err != nil {
		return nil, err
	}
	info, err := d.s.engines[pool].Info(pctx)
	if err != nil {
		return nil, err
	}
	var rows []uiQueueRow
	for ns := range info {
		if !engine.ValidName(ns) {
			continue
		}
		stats, err := d.s.sizes.get(pctx, pool, ns, db)
		if err != nil {
			return nil, err
		}
		for _, q := range stats {
			rows = append(rows, uiQueueRow{Pool: pool, Namespace: ns, Queue: q.Queue, Ready: q.Ready, Timer: q.Timer, Dead: q.DeadLetter})
		}
	}
	return rows, nil
}

// ---- namespace: the queues table ----

// uiQueueRow is one queue's line in the tables.
type uiQueueRow struct {
	Pool, Namespace, Queue string
	Ready, Timer, Dead     int64
	// Delayed and InFlight split Timer when the engine can tell.
	Delayed, InFlight int64
	Split             bool
	InFlightExact     bool
	Paused            bool
	// OldestReady is the age of the oldest ready job ("" when none).
	OldestReady string
	// PubRate and ConRate are jobs per second over the recent minutes.
	PubRate, ConRate string
}

func (r *uiQueueRow) addSizes(o uiQueueRow) {
	r.Ready += o.Ready
	r.Timer += o.Timer
	r.Dead += o.Dead
	r.Delayed += o.Delayed
	r.InFlight += o.InFlight
}

// statser is what engines offer for the sizes of every queue of a pool
// in a few round trips (engine/rdb's Stats: one pipeline per namespace).
type statser interface {
	Stats(ctx context.Context) ([]engine.QueueStats, error)
}

// poolStats returns the sizes of the queues of pool (of namespace ns
// when not ""), sorted by namespace and queue.
func (d *dashboard) poolStats(ctx context.Context, pool, ns string) ([]uiQueueRow, error) {
	x := d.s.engines[pool]
	var rows []uiQueueRow
	if st, ok := x.(statser); ok {
		stats, err := st.Stats(ctx)
		if err != nil {
			return nil, err
		}
		for _, q := range stats {
			if ns != "" && q.Namespace != ns {
				continue
			}
			rows = append(rows, uiQueueRow{Pool: pool, Namespace: q.Namespace, Queue: q.Queue, Ready: q.Ready, Timer: q.Timer, Dead: q.DeadLetter})
		}
	} else {
		info, err := x.Info(ctx)
		if err != nil {
			return nil, err
		}
		for n, qs := range info {
			if ns != "" && n != ns {
				continue
			}
			for _, q := range qs {
				rows = append(rows, uiQueueRow{Pool: pool, Namespace: n, Queue: q})
			}
		}
	}
	slices.SortFunc(rows, func(a, b uiQueueRow) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Queue, b.Queue)
	})
	return rows, nil
}

type namespacePage struct {
	Pool, Namespace string
	// Usage is the namespace's usage against its quota; nil when the
	// pool's engine keeps none.
	Usage          *uiUsage
	Rows           []uiQueueRow
	Filter         string
	Sort, Dir      string
	PageNo, Pages  int
	PerPage, Total int
	Matching       int
	Totals         uiQueueRow
	Sorts          []sortLink
	PrevURL        string
	NextURL        string
}

type sortLink struct {
	Key, Label, URL string
	Current         bool
	Dir             string
}

// queueSorts are the sortable columns of the queues table.
var queueSorts = []struct{ key, label string }{
	{"name", "Queue"}, {"ready", "Ready"}, {"scheduled", "Delayed + in flight"}, {"dead", "Dead"},
}

func (d *dashboard) namespace(c *gin.Context) {
	pool, _, ok := d.poolEngine(c)
	if !ok {
		return
	}
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		d.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	db, derr := d.s.dashboardOf(pool)
	var rows []uiQueueRow
	var err error
	if derr == nil {
		var stats []engine.QueueStats
		if stats, err = d.s.sizes.get(ctx, pool, ns, db); err == nil {
			for _, q := range stats {
				rows = append(rows, uiQueueRow{Pool: pool, Namespace: ns, Queue: q.Queue, Ready: q.Ready, Timer: q.Timer, Dead: q.DeadLetter})
			}
		}
	} else {
		rows, err = d.poolStats(ctx, pool, ns)
	}
	if err != nil {
		d.fail(c, err)
		return
	}
	if len(rows) == 0 {
		// No queue: a namespace only if it has tokens, else a mistyped URL.
		toks, err := d.s.tokens.List(ctx, pool, ns, false)
		if err != nil {
			d.fail(c, err)
			return
		}
		if len(toks) == 0 {
			d.notFound(c, "no namespace "+strconv.Quote(ns)+" in pool "+strconv.Quote(pool)+": it has no queue and no token")
			return
		}
	}
	p := namespacePage{Pool: pool, Namespace: ns, Filter: strings.TrimSpace(c.Query("filter")), Sort: c.DefaultQuery("sort", "name"),
		Dir: c.DefaultQuery("order", "asc"), PerPage: 100, Total: len(rows)}
	if p.Dir != "desc" {
		p.Dir = "asc"
	}
	p.Usage = d.namespaceUsage(ctx, pool, ns)
	if n, err := strconv.Atoi(c.Query("per")); err == nil && n >= 10 && n <= 1000 {
		p.PerPage = n
	}
	for _, r := range rows {
		p.Totals.addSizes(r)
	}
	if p.Filter != "" {
		f := strings.ToLower(p.Filter)
		rows = slices.DeleteFunc(rows, func(r uiQueueRow) bool { return !strings.Contains(strings.ToLower(r.Queue), f) })
	}
	key := func(r uiQueueRow) int64 {
		switch p.Sort {
		case "ready":
			return r.Ready
		case "scheduled":
			return r.Timer
		case "dead":
			return r.Dead
		}
		return 0
	}
	if !slices.ContainsFunc(queueSorts, func(s struct{ key, label string }) bool { return s.key == p.Sort }) {
		p.Sort = "name"
	}
	slices.SortStableFunc(rows, func(a, b uiQueueRow) int {
		var c int
		if p.Sort == "name" {
			c = strings.Compare(a.Queue, b.Queue)
		} else if ka, kb := key(a), key(b); ka != kb {
			c = -1
			if ka > kb {
				c = 1
			}
		} else {
			c = strings.Compare(a.Queue, b.Queue)
			if p.Dir == "desc" {
				c = -c // keep names ascending among equals
			}
		}
		if p.Dir == "desc" {
			c = -c
		}
		return c
	})
	p.Matching = len(rows)
	p.Pages = max(1, (len(rows)+p.PerPage-1)/p.PerPage)
	p.PageNo, _ = strconv.Atoi(c.Query("page"))
	p.PageNo = min(max(p.PageNo, 1), p.Pages)
	lo := (p.PageNo - 1) * p.PerPage
	p.Rows = rows[lo:min(lo+p.PerPage, len(rows))]
	if derr == nil && len(p.Rows) > 0 {
		names := make([]string, len(p.Rows))
		for i, r := range p.Rows {
			names[i] = r.Queue
		}
		details, err := db.QueueDetails(ctx, ns, names)
		if err != nil {
			d.fail(c, err)
			return
		}
		now := d.s.now()
		for i := range p.Rows {
			if i < len(details) && details[i].Queue == p.Rows[i].Queue {
				applyDetail(&p.Rows[i], &details[i], now)
			}
		}
	}

	base := "/ui/ns/" + url.PathEscape(pool) + "/" + url.PathEscape(ns)
	link := func(sort, dir string, page int) string {
		v := url.Values{}
		if p.Filter != "" {
			v.Set("filter", p.Filter)
		}
		v.Set("sort", sort)
		v.Set("order", dir)
		if page > 1 {
			v.Set("page", strconv.Itoa(page))
		}
		if p.PerPage != 100 {
			v.Set("per", strconv.Itoa(p.PerPage))
		}
		return base + "?" + v.Encode()
	}
	for _, s := range queueSorts {
		dir := "asc"
		if s.key != "name" {
			dir = "desc"
		}
		if s.key == p.Sort {
			dir = map[string]string{"asc": "desc", "desc": "asc"}[p.Dir]
		}
		p.Sorts = append(p.Sorts, sortLink{Key: s.key, Label: s.label, URL: link(s.key, dir, 1), Current: s.key == p.Sort, Dir: p.Dir})
	}
	if p.PageNo > 1 {
		p.PrevURL = link(p.Sort, p.Dir, p.PageNo-1)
	}
	if p.PageNo < p.Pages {
		p.NextURL = link(p.Sort, p.Dir, p.PageNo+1)
	}
	d.render(c, http.StatusOK, "namespace", ns+" · queues", "overview", p)
}

// applyDetail completes a row with what QueueDetails tells.
func applyDetail(r *uiQueueRow, dt *engine.QueueDetail, now time.Time) {
	r.Ready, r.Timer, r.Dead = dt.Ready, dt.Timer, dt.DeadLetter
	r.Delayed, r.InFlight, r.Split, r.InFlightExact, r.Paused = dt.Delayed, dt.InFlight, true, dt.InFlightExact, dt.Paused
	if !dt.OldestReady.IsZero() && dt.Ready > 0 {
		r.OldestReady = max(0, now.Sub(dt.OldestReady)).Round(time.Second).String()
	}
	secs := float64(engine.RecentMinutes * 60)
	r.PubRate = rate(float64(dt.Recent.Published) / secs)
	r.ConRate = rate(float64(dt.Recent.Consumed) / secs)
}

// fmtMS renders milliseconds briefly: 250 ms, 2.5 s, 5 min.
func fmtMS(ms int64) string {
	switch {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + " ms"
	case ms < 60000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(float64(ms)/60000, 'f', -1, 64) + " min"
}

// rate renders jobs per second briefly.
func rate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// ---- queue ----

type queuePage struct {
	Pool, Namespace, Queue string
	Base                   string // /ui/queue/pool/ns/q
	Row                    uiQueueRow
	Config                 engine.QueueConfig
	Backoff                string
	DeadTTL                string
	Webhook                *webhookView
	WebhooksOn             bool
	// Latency is the publish→consume percentiles over the recent minutes.
	Latency   []kv
	Lists     []jobListView
	ListError string
	// DeadJobs is a page of the dead letter, newest first whatever the
	// direction it was read in (deadPager); DeadReason is the reason
	// filter ("" for all).
	DeadJobs   []*jobView
	DeadReason string
	// DeadError is the error-text filter ("" for none).
	DeadError string
	DeadPager deadPager
	// Schedules are the queue's schedules (issue #24); SchedulesOn is
	// false when the pool's engine runs none, SchedulesError set when
	// they could not be read.
	Schedules      []scheduleView
	SchedulesOn    bool
	SchedulesError string
	// Groups are the queue's biggest groups and its limits (issue #32),
	// nil when it has neither groups nor limits or the engine keeps none;
	// GroupsError is set when they could not be read.
	Groups      *engine.QueueGroups
	GroupsError string
}

// groupsOnPage is how many groups the queue page shows.
const groupsOnPage = 20

// deadPager holds the links of the dead letter's pages on the queue page
// ("" when there is no such page). The page shows the newest death first;
// it is read newest first from dead_offset, or, with dead_order=oldest,
// oldest first from dead_offset and shown reversed. Each direction's
// offsets count from its own end, so the page just newer than one read
// newest first from X is the one read oldest first from size-X (and
// likewise the other way): both directions page exactly, with or
// without a reason filter, and "oldest" is the oldest page itself.
type deadPager struct {
	Newest, Newer, Older, Oldest string
}

// newDeadPager builds the links around page, read with dq.
func newDeadPager(base string, dq engine.DeadLetterQuery, page engine.DeadLetterPage) deadPager {
	link := func(order string, off int64) string {
		v := url.Values{}
		if order == "oldest" {
			v.Set("dead_order", order)
		}
		if off > 0 {
			v.Set("dead_offset", strconv.FormatInt(off, 10))
		}
		if dq.Reason != "" {
			v.Set("dead_reason", string(dq.Reason))
		}
		if dq.Error != "" {
			v.Set("dead_error", dq.Error)
		}
		if len(v) == 0 {
			return base + "#dead"
		}
		return base + "?" + v.Encode() + "#dead"
	}
	var p deadPager
	onNewest, onOldest := dq.Newest && dq.Offset == 0, !dq.Newest && dq.Offset == 0
	if dq.Newest {
		if dq.Offset > 0 {
			p.Newer = link("oldest", max(page.Size-dq.Offset, 0))
		}
		if page.Next >= 0 {
			p.Older = link("newest", page.Next)
		}
		onOldest = page.Next < 0
	} else {
		if page.Next >= 0 {
			p.Newer = link("oldest", page.Next)
		}
		if dq.Offset > 0 {
			p.Older = link("newest", max(page.Size-dq.Offset, 0))
		}
		onNewest = page.Next < 0
	}
	if !onNewest {
		p.Newest = link("newest", 0)
	}
	if !onOldest {
		p.Oldest = link("oldest", 0)
	}
	return p
}

// scheduleView is one schedule's line on the queue page.
type scheduleView struct {
	Name, Cron, TZ, Missed string
	Paused                 bool
	Next, LastTick         time.Time
	NextIn, LastAgo        string
	LastJob                string
	LastJobURL             string
	Fired                  int64
	Action                 string // /ui/schedule/pool/ns/q/name
}

// jobListView is one list of the queue page: ready, delayed or in flight.
type jobListView struct {
	Key, Title string
	Jobs       []*jobView
	Next, Back string // links to the next page and back to the first
}

type webhookView struct {
	URL              string
	Concurrency      int
	TTRMS, TimeoutMS int64
	SecretSet        bool
	Error            string
	Subscribed       bool
}

// deadPage is how many dead jobs the queue page lists at once.
const deadPage = 20

func (d *dashboard) queueNames(c *gin.Context) (pool, ns, q string, x engine.Engine, ok bool) {
	pool, x, ok = d.poolEngine(c)
	if !ok {
		return
	}
	ns, q = c.Param("namespace"), c.Param("queue")
	if err := validateNames(ns, q); err != nil {
		d.fail(c, err)
		return "", "", "", nil, false
	}
	return pool, ns, q, x, true
}

// setUp reports whether a queue page request is for a queue being set up
// rather than a typed URL: ?new=1 (the 404 page's link), a flash message
// (back from one of the page's forms) or a live refresh of a shown page.
func setUp(c *gin.Context) bool {
	if c.Query("new") == "1" || c.GetHeader("X-Kairos-Live") != "" {
		return true
	}
	v, err := c.Cookie(flashCookie)
	return err == nil && v != ""
}

// registrar is what engines offer to tell a queue they know from a
// mistyped name (engine/rdb: its group's registry).
type registrar interface {
	Registered(ctx context.Context, ns, q string) (bool, error)
}

// queueRegistered reports whether the pool's engine x knows queue ns/q:
// a migrating pool knows it when either side does; an engine without a
// registry knows every queue.
func queueRegistered(ctx context.Context, x engine.Engine, ns, q string) (bool, error) {
	if m, ok := x.(*migration.Engine); ok {
		known, err := queueRegistered(ctx, m.Old, ns, q)
		if err != nil || known {
			return known, err
		}
		return queueRegistered(ctx, m.New, ns, q)
	}
	r, ok := x.(registrar)
	if !ok {
		return true, nil
	}
	return r.Registered(ctx, ns, q)
}

func queueBase(pool, ns, q string) string {
	return "/ui/queue/" + url.PathEscape(pool) + "/" + url.PathEscape(ns) + "/" + url.PathEscape(q)
}

func (d *dashboard) queue(c *gin.Context) {
	pool, ns, q, x, ok := d.queueNames(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	p := queuePage{Pool: pool, Namespace: ns, Queue: q, Base: queueBase(pool, ns, q), WebhooksOn: d.s.webhooks != nil,
		Row: uiQueueRow{Pool: pool, Namespace: ns, Queue: q}}
	now := d.s.now()
	db, derr := d.s.dashboardOf(pool)
	var err error
	if derr == nil {
		details, err := db.QueueDetails(ctx, ns, []string{q})
		if err != nil {
			d.fail(c, err)
			return
		}
		if len(details) == 1 {
			applyDetail(&p.Row, &details[0], now)
		}
		// Latency percentiles over the last 5 minutes, the current one included.
		var sum engine.Counts
		hist, err := db.History(ctx, ns, q, now.Truncate(time.Minute).Add(-(engine.RecentMinutes-1)*time.Minute), engine.RecentMinutes)
		if err != nil {
			d.fail(c, err)
			return
		}
		for i := range hist {
			sum.Add(&hist[i])
		}
		for _, pc := range []struct {
			name string
			p    float64
		}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
			v := "–"
			if ms := sum.LatencyPercentile(pc.p); ms >= 0 {
				v = "≤ " + fmtMS(ms)
				if last := engine.LatencyBoundsMS[len(engine.LatencyBoundsMS)-1]; ms > last {
					v = "> " + fmtMS(last)
				}
			}
			p.Latency = append(p.Latency, kv{pc.name, v})
		}
	} else {
		if p.Row.Ready, err = x.Size(ctx, ns, q); err == nil {
			p.Row.Dead, err = x.DeadLetterSize(ctx, ns, q)
		}
		if err != nil {
			d.fail(c, err)
			return
		}
	}
	if p.Config, err = x.QueueConfig(ctx, ns, q); err != nil {
		d.fail(c, err)
		return
	}
	p.Row.Paused = p.Config.Paused
	p.Config.Shards = max(p.Config.Shards, 1)
	p.Backoff = tidyDurations(p.Config.Backoff.String())
	if p.Config.DeadTTL > 0 {
		p.DeadTTL = p.Config.DeadTTL.String()
	}
	if d.s.webhooks != nil {
		w, err := d.s.webhooks.Get(ctx, pool, ns, q)
		switch {
		case err == nil:
			p.Webhook = &webhookView{URL: w.URL, Concurrency: w.Concurrency, TTRMS: w.TTRMS, TimeoutMS: w.TimeoutMS, SecretSet: w.Secret != "", Subscribed: true}
		case errors.Is(err, webhook.ErrNotFound):
			p.Webhook = &webhookView{}
		default:
			p.Webhook = &webhookView{Error: errMessage(ctx, err)}
		}
	}
	if derr == nil {
		for _, l := range []struct {
			list       engine.JobList
			key, title string
		}{{engine.ListReady, "ready", "Ready jobs (next first)"}, {engine.ListDelayed, "delayed", "Delayed jobs (due first)"}, {engine.ListInFlight, "in_flight", "In-flight jobs (TTR ending first)"}} {
			cursor, _ := strconv.ParseInt(c.Query(l.key+"_cursor"), 10, 64)
			cursor = max(cursor, 0)
			jobs, next, err := db.ListJobs(ctx, ns, q, l.list, cursor, jobPage)
			if err != nil {
				p.ListError = errMessage(ctx, err)
				break
			}
			lv := jobListView{Key: l.key, Title: l.title}
			for _, j := range jobs {
				lv.Jobs = append(lv.Jobs, newJobView(j, ns, q, now))
			}
			if next > 0 {
				lv.Next = p.Base + "?" + l.key + "_cursor=" + strconv.FormatInt(next, 10) + "#" + l.key
			}
			if cursor > 0 {
				lv.Back = p.Base + "#" + l.key
			}
			p.Lists = append(p.Lists, lv)
		}
	} else if j, err := x.PeekQueue(ctx, ns, q); err == nil {
		p.Lists = append(p.Lists, jobListView{Key: "ready", Title: "Next ready job", Jobs: []*jobView{newJobView(j, ns, q, now)}})
	} else if !errors.Is(err, engine.ErrQueueEmpty) {
		p.ListError = errMessage(ctx, err)
	}
	dq := engine.DeadLetterQuery{Limit: deadPage, Newest: c.Query("dead_order") != "oldest"}
	dq.Offset, _ = strconv.ParseInt(c.Query("dead_offset"), 10, 64)
	dq.Offset = min(max(dq.Offset, 0), math.MaxInt64-engine.MaxDeadScan)
	if r := c.Query("dead_reason"); r != "" {
		if dq.Reason = engine.DeadReason(r); !engine.ValidDeadReason(dq.Reason) {
			d.fail(c, errInvalidReason)
			return
		}
	}
	if e := c.Query("dead_error"); e != "" {
		if len(e) > engine.MaxErrorText {
			d.fail(c, errInvalidErrorText)
			return
		}
		dq.Error = e
	}
	dead, err := x.ListDeadLetterPage(ctx, ns, q, dq)
	if err != nil {
		d.fail(c, err)
		return
	}
	if !dq.Newest {
		slices.Reverse(dead.Jobs)
	}
	for _, j := range dead.Jobs {
		p.DeadJobs = append(p.DeadJobs, newJobView(j, ns, q, now))
	}
	p.DeadReason = string(dq.Reason)
	p.DeadError = dq.Error
	p.DeadPager = newDeadPager(p.Base, dq, dead)
	if _, err := d.s.grouperOf(pool); err == nil {
		qg, err := d.s.queueGroups(ctx, pool, ns, q, groupsOnPage)
		switch {
		case err != nil:
			p.GroupsError = errMessage(ctx, err)
		case qg.Total > 0 || qg.MaxInFlight > 0 || qg.GroupMaxInFlight > 0:
			p.Groups = &qg
		}
	}
	if sc, ok := x.(engine.Scheduler); ok {
		p.SchedulesOn = true
		list, err := sc.ListSchedules(ctx, ns, q)
		switch {
		case err == nil:
			for _, s := range list {
				p.Schedules = append(p.Schedules, newScheduleView(pool, s, now))
			}
		case errors.Is(err, engine.ErrNoSchedules):
			p.SchedulesOn = false
		default:
			p.SchedulesError = errMessage(ctx, err)
		}
	}
	// A queue with no jobs, settings, webhook or schedule is known only by
	// its registry: a mistyped name is not (404, not an empty page). The
	// page stays for a queue being set up: opened through the 404 page's
	// link (?new=1), back from one of its forms (a flash), or refreshed
	// live while shown.
	if !setUp(c) && p.Row.Ready == 0 && p.Row.Timer == 0 && p.Row.Dead == 0 && !p.Config.Paused && p.Config.Backoff == nil && p.Config.DeadTTL == 0 && p.Config.Shards <= 1 &&
		p.Config.MaxInFlight == 0 && p.Config.GroupMaxInFlight == 0 && len(p.Config.GroupWeights) == 0 &&
		(p.Webhook == nil || !p.Webhook.Subscribed) && len(p.Schedules) == 0 {
		known, err := queueRegistered(ctx, x, ns, q)
		if err != nil {
			d.fail(c, err)
			return
		}
		if !known {
			d.render(c, http.StatusNotFound, "error", "Not found", "", errorPage{
				Message: "no queue " + strconv.Quote(q) + " in namespace " + strconv.Quote(ns) + " of pool " + strconv.Quote(pool) +
					": nothing was published to it and it has no settings, webhook or schedule",
				Link: p.Base + "?new=1", LinkText: "Set up a new queue " + q + " (schedules, webhook, settings)"})
			return
		}
	}
	d.render(c, http.StatusOK, "queue", ns+"/"+q, "overview", p)
}

func newScheduleView(pool string, s *engine.Schedule, now time.Time) scheduleView {
	v := scheduleView{Name: s.Name, Cron: s.Spec, TZ: s.TZ, Missed: string(s.Missed), Paused: s.Paused,
		Next: s.Next, LastTick: s.LastTick, LastJob: s.LastJob, Fired: s.Fired,
		Action: "/ui/schedule/" + url.PathEscape(pool) + "/" + url.PathEscape(s.Namespace) + "/" + url.PathEscape(s.Queue) + "/" + url.PathEscape(s.Name)}
	if !s.Next.IsZero() {
		v.NextIn = "in " + max(0, s.Next.Sub(now)).Round(time.Second).String()
	}
	if !s.LastTick.IsZero() {
		v.LastAgo = max(0, now.Sub(s.LastTick)).Round(time.Second).String() + " ago"
	}
	if s.LastJob != "" {
		v.LastJobURL = "/ui/job/" + url.PathEscape(pool) + "/" + url.PathEscape(s.Namespace) + "/" + url.PathEscape(s.Queue) + "/" + url.PathEscape(s.LastJob)
	}
	return v
}

// jobPage is how many jobs each list of the queue page shows at once.
const jobPage = 20

// ---- job ----

type jobView struct {
	Pool, Namespace, Queue string
	ID                     string
	URL                    string
	State                  string
	Body                   string // as shown
	BodyAs                 string // text, json or base64
	BodyAuto               string
	BodySize               int
	BodyPreview            string
	Attributes             []kv
	Tries                  uint16
	Deliveries             int
	Priority               int
	Group                  string
	TTL                    string
	DueAt                  time.Time
	DueIn                  string
	DeadReason             string
	DeadAt                 time.Time
	Published              time.Time
	// LastError is the error of the job's last failed delivery, with a
	// one-line preview for the dead letter's table.
	LastError, LastErrorPreview string
	// Attempts is the job's attempt history (the job page).
	Attempts []attemptView
}

// attemptView is one delivery on the job page.
type attemptView struct {
	Delivery        int
	Outcome, Worker string
	Start           time.Time
	Duration        string
	Error           string
}

type kv struct{ Key, Value string }

func newJobView(j *engine.Job, ns, q string, now time.Time) *jobView {
	v := &jobView{Namespace: ns, Queue: q, ID: j.ID, State: string(j.State), Tries: j.Tries, Deliveries: j.Deliveries,
		Priority: j.Priority, Group: j.Group, DueAt: j.DueAt, DeadReason: string(j.DeadReason), DeadAt: j.DeadAt, BodySize: len(j.Body)}
	if j.TTL > 0 {
		v.TTL = j.TTL.Round(time.Second).String()
	} else {
		v.TTL = "never expires"
	}
	if info, err := engine.ParseJobID(j.ID); err == nil {
		v.Published = info.Published
	}
	for k, val := range j.Attributes {
		v.Attributes = append(v.Attributes, kv{k, val})
	}
	slices.SortFunc(v.Attributes, func(a, b kv) int { return strings.Compare(a.Key, b.Key) })
	v.BodyAuto, v.Body = formatBody(j.Body, "")
	v.BodyAs = v.BodyAuto
	_, v.BodyPreview = formatBody(j.Body, "text") // compact: JSON as sent
	if r := []rune(v.BodyPreview); len(r) > 120 {
		v.BodyPreview = string(r[:120]) + "…"
	}
	if !j.DueAt.IsZero() {
		v.DueIn = j.DueAt.Sub(now).Round(time.Second).String()
	}
	v.LastError = j.LastError
	v.LastErrorPreview, _, _ = strings.Cut(j.LastError, "\n")
	if r := []rune(v.LastErrorPreview); len(r) > 160 {
		v.LastErrorPreview = string(r[:160]) + "…"
	}
	for _, a := range newAttempts(j.Attempts, now) {
		av := attemptView{Delivery: a.Delivery, Outcome: a.Outcome, Worker: a.Worker, Error: a.Error}
		if a.StartMS > 0 {
			av.Start = time.UnixMilli(a.StartMS)
			av.Duration = (time.Duration(a.DurationMS) * time.Millisecond).String()
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}

func (d *dashboard) job(c *gin.Context) {
	pool, ns, q, x, ok := d.queueNames(c)
	if !ok {
		return
	}
	id := c.Param("job_id")
	j, err := x.PeekJob(c.Request.Context(), ns, q, id)
	if errors.Is(err, engine.ErrJobNotFound) {
		d.notFound(c, "job "+id+" not found in "+ns+"/"+q+" (acknowledged, expired, deleted or never published)")
		return
	}
	if err != nil {
		d.fail(c, err)
		return
	}
	v := newJobView(j, ns, q, d.s.now())
	v.Pool = pool
	v.URL = queueBase(pool, ns, q)
	if as := c.Query("as"); as != "" {
		v.BodyAs, v.Body = formatBody(j.Body, as)
	}
	d.render(c, http.StatusOK, "job", "Job "+id, "", v)
}

// lookup serves GET /ui/lookup?id=&pool=&namespace=&queue=: the job page
// of a job by ID. Without a queue (or a namespace) it looks in every
// queue of the namespace (of the pool), at most lookupMaxQueues.
func (d *dashboard) lookup(c *gin.Context) {
	pool, x, ok := d.poolEngine(c)
	if !ok {
		return
	}
	id := strings.TrimSpace(c.Query("id"))
	ns, q := strings.TrimSpace(c.Query("namespace")), strings.TrimSpace(c.Query("queue"))
	if id == "" {
		d.render(c, http.StatusBadRequest, "error", "Job lookup", "", errorPage{Message: "give a job ID to look up"})
		return
	}
	ctx := c.Request.Context()
	if ns == "" && q == "" {
		if db, err := d.s.dashboardOf(pool); err == nil {
			j, err := db.FindJob(ctx, id)
			switch {
			case err == nil:
				c.Redirect(http.StatusSeeOther, "/ui/job/"+url.PathEscape(pool)+"/"+url.PathEscape(j.Namespace)+"/"+url.PathEscape(j.Queue)+"/"+url.PathEscape(id))
			case errors.Is(err, engine.ErrJobNotFound) || errors.Is(err, engine.ErrInvalid):
				d.notFound(c, "job "+id+" not found in pool "+pool)
			default:
				d.fail(c, err)
			}
			return
		}
	}
	var cands [][2]string
	if ns != "" && q != "" {
		cands = append(cands, [2]string{ns, q})
	} else {
		info, err := x.Info(ctx)
		if err != nil {
			d.fail(c, err)
			return
		}
		for n, qs := range info {
			if ns != "" && n != ns {
				continue
			}
			for _, qq := range qs {
				if q == "" || qq == q {
					cands = append(cands, [2]string{n, qq})
				}
			}
		}
	}
	if len(cands) > lookupMaxQueues {
		d.render(c, http.StatusBadRequest, "error", "Job lookup", "", errorPage{Message: "too many queues to search: give the job's namespace and queue"})
		return
	}
	for _, cand := range cands {
		if _, err := x.PeekJob(ctx, cand[0], cand[1], id); err == nil {
			c.Redirect(http.StatusSeeOther, "/ui/job/"+url.PathEscape(pool)+"/"+url.PathEscape(cand[0])+"/"+url.PathEscape(cand[1])+"/"+url.PathEscape(id))
			return
		} else if !errors.Is(err, engine.ErrJobNotFound) && !errors.Is(err, engine.ErrInvalid) {
			d.fail(c, err)
			return
		}
	}
	d.notFound(c, "job "+id+" not found in "+lookupWhere(pool, ns, q, len(cands)))
}

// lookupWhere says where a lookup searched, for its "not found" page: a
// lookup from a queue's page searches that queue only, and must not say
// it searched the pool.
func lookupWhere(pool, ns, q string, queues int) string {
	n := strconv.Itoa(queues) + " queues"
	if queues == 1 {
		n = "1 queue"
	}
	switch {
	case ns != "" && q != "":
		return "queue " + ns + "/" + q + " of pool " + pool + " (leave the queue empty to search the pool)"
	case ns != "":
		return "namespace " + ns + " (" + n + ") of pool " + pool
	case q != "":
		return "the queues named " + q + " (" + n + ") of pool " + pool
	}
	return "the " + n + " of pool " + pool
}

// lookupMaxQueues bounds the queues a lookup without a queue searches.
const lookupMaxQueues = 2000

// ---- tokens ----

type tokenRow struct {
	Fingerprint string
	Description string
	Limit       *auth.Limit
}

type tokensPage struct {
	Pool, Namespace string
	Namespaces      []string
	Rows            []tokenRow
	Hashed          bool
	Throttling      bool
	Error           string
}

func (d *dashboard) tokens(c *gin.Context) {
	pool, x, ok := d.poolEngine(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	p := tokensPage{Pool: pool, Namespace: c.Query("namespace"), Hashed: d.s.cfg.Kairos.HashTokens, Throttling: d.s.throttler != nil}
	if info, err := x.Info(ctx); err == nil {
		for ns := range info {
			p.Namespaces = append(p.Namespaces, ns)
		}
		slices.Sort(p.Namespaces)
	}
	if p.Namespace != "" {
		if err := auth.ValidateNamespace(p.Namespace); err != nil {
			d.fail(c, err)
			return
		}
		list, err := d.s.tokens.List(ctx, pool, p.Namespace, false)
		if err != nil {
			d.fail(c, err)
			return
		}
		for tok, desc := range list {
			fp := tok
			if !auth.IsFingerprint(tok) {
				fp = auth.Fingerprint(tok)
			}
			row := tokenRow{Fingerprint: fp, Description: desc}
			if d.s.throttler != nil {
				if l, ok, err := d.s.throttler.Get(ctx, pool, p.Namespace, fp); err == nil && ok {
					row.Limit = &l
				}
			}
			p.Rows = append(p.Rows, row)
		}
		slices.SortFunc(p.Rows, func(a, b tokenRow) int {
			if c := strings.Compare(a.Description, b.Description); c != 0 {
				return c
			}
			return strings.Compare(a.Fingerprint, b.Fingerprint)
		})
	}
	d.render(c, http.StatusOK, "tokens", "Tokens", "tokens", p)
}

type tokenCreated struct {
	Pool, Namespace, Token, Fingerprint, Description string
	Back                                             string
	LimitError                                       string
}

func (d *dashboard) tokensURL(pool, ns string) string {
	return "/ui/tokens?" + url.Values{"pool": {pool}, "namespace": {ns}}.Encode()
}

// createToken serves POST /ui/tokens/create: the new token is shown once,
// on the page this answers (never again: the list shows fingerprints).
func (d *dashboard) createToken(c *gin.Context) {
	pool, _, ok := d.poolEngine(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	ns, desc := strings.TrimSpace(c.PostForm("namespace")), strings.TrimSpace(c.PostForm("description"))
	back := d.tokensURL(pool, ns)
	if err := auth.ValidateNamespace(ns); err != nil {
		d.redirect(c, back, "namespace: "+errMessage(ctx, err), false)
		return
	}
	if desc == "" {
		d.redirect(c, back, "a description is required", false)
		return
	}
	scope, err := auth.ParseScope(c.PostForm("queues"), strings.Join(c.PostFormArray("roles"), ","))
	if err != nil {
		d.redirect(c, back, errMessage(ctx, err), false)
		return
	}
	var lim auth.Limit
	var limited bool
	for _, f := range []struct {
		name string
		v    *int64
	}{{"read", &lim.Read}, {"write", &lim.Write}, {"interval", &lim.Interval}} {
		s := strings.TrimSpace(c.PostForm(f.name))
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			d.redirect(c, back, "invalid "+f.name+" limit", false)
			return
		}
		*f.v = n
		// The form's interval defaults to 1: only a read or write limit
		// asks for a limit.
		limited = limited || (n > 0 && f.name != "interval")
	}
	if limited {
		if lim.Interval == 0 {
			lim.Interval = 1
		}
		if err := lim.Validate(); err != nil {
			d.redirect(c, back, err.Error(), false)
			return
		}
		if d.s.throttler == nil {
			d.redirect(c, back, "rate limits are not enabled on this server", false)
			return
		}
	}
	tok, err := d.s.tokens.Create(ctx, pool, ns, desc, "", scope)
	if err != nil {
		d.redirect(c, back, errMessage(ctx, err), false)
		return
	}
	noteAuditToken(c, tok)
	p := tokenCreated{Pool: pool, Namespace: ns, Token: tok, Description: desc, Back: back}
	_, secret := auth.ParseToken(tok)
	p.Fingerprint = auth.Fingerprint(secret)
	if limited {
		if err := d.s.throttler.Set(ctx, pool, ns, secret, lim); err != nil {
			p.LimitError = errMessage(ctx, err)
		}
	}
	d.s.reqLogger(c).WithField("scoped", !scope.IsZero()).Info("dashboard: token created")
	// Post/redirect/get: the token goes to the next page in a one-shot
	// cookie, so that reloading that page shows nothing instead of
	// creating a second token.
	setNewToken(c, p)
	c.Redirect(http.StatusSeeOther, "/ui/tokens/created")
}

// tokenCreatedPage serves GET /ui/tokens/created: the token just created,
// once (the one-shot cookie goes with this answer); afterwards a page
// saying there is nothing to show.
func (d *dashboard) tokenCreatedPage(c *gin.Context) {
	p, ok := takeNewToken(c)
	if !ok {
		d.render(c, http.StatusNotFound, "error", "Token created", "tokens",
			errorPage{Message: "no new token to show: a created token is shown once, on the page right after its creation"})
		return
	}
	d.render(c, http.StatusOK, "token_created", "Token created", "tokens", p)
}

func (d *dashboard) revokeToken(c *gin.Context) {
	pool, _, ok := d.poolEngine(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	ns, fp := c.PostForm("namespace"), c.PostForm("fingerprint")
	back := d.tokensURL(pool, ns)
	if err := auth.ValidateNamespace(ns); err != nil || !auth.IsFingerprint(fp) {
		d.redirect(c, back, "invalid namespace or token fingerprint", false)
		return
	}
	if err := d.s.tokens.Delete(ctx, pool, ns, fp); err != nil {
		d.redirect(c, back, errMessage(ctx, err), false)
		return
	}
	if d.s.throttler != nil {
		if err := d.s.throttler.Delete(ctx, pool, ns, fp); err != nil {
			d.s.reqLogger(c).WithError(err).Debug("dashboard: no rate limit deleted with the token")
		}
	}
	d.s.reqLogger(c).Info("dashboard: token revoked")
	d.redirect(c, back, "token "+fp+" revoked", true)
}

// ---- actions ----

// redirect answers a form POST: 303 to target with a flash message.
func (d *dashboard) redirect(c *gin.Context, target, msg string, ok bool) {
	if !ok {
		noteAuditError(c, msg)
	}
	setFlash(c, msg, ok)
	c.Redirect(http.StatusSeeOther, target)
}

func (d *dashboard) queueAction(c *gin.Context) {
	pool, ns, q, x, ok := d.queueNames(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	base := queueBase(pool, ns, q)
	done := func(msg string, err error) {
		if err != nil {
			d.redirect(c, base, errMessage(ctx, err), false)
			return
		}
		d.s.reqLogger(c).WithField("action", c.Param("action")).Info("dashboard: " + msg)
		d.redirect(c, base, msg, true)
	}
	switch c.Param("action") {
	case "pause", "resume":
		paused := c.Param("action") == "pause"
		cfg, err := x.QueueConfig(ctx, ns, q)
		if err == nil {
			cfg.Paused = paused
			err = x.SetQueueConfig(ctx, ns, q, cfg)
		}
		done(map[bool]string{true: "queue paused", false: "queue resumed"}[paused], err)
	case "backoff":
		cfg, err := x.QueueConfig(ctx, ns, q)
		if err == nil {
			var b *engine.Backoff
			if b, err = engine.ParseBackoff(strings.TrimSpace(c.PostForm("backoff"))); err == nil {
				cfg.Backoff = b
				err = x.SetQueueConfig(ctx, ns, q, cfg)
			} else {
				err = badRequest(strings.TrimSuffix(err.Error(), ": "+engine.ErrInvalid.Error()))
			}
		}
		done("backoff policy set", err)
	case "destroy":
		if c.PostForm("confirm") != q {
			d.redirect(c, base, "not destroyed: type the queue's name to confirm", false)
			return
		}
		n, err := x.Destroy(ctx, ns, q)
		done("queue destroyed ("+strconv.FormatInt(n, 10)+" jobs deleted)", err)
	case "dead-selected", "dead-matching":
		// The dead letter's selection: the jobs checked, or every job
		// matching the filters shown (reason, error text).
		respawn := c.PostForm("op") == "respawn"
		if !respawn && c.PostForm("op") != "delete" {
			done("", badRequest("no such operation: respawn or delete"))
			return
		}
		var ids []string
		var match *engine.DeadLetterQuery
		if c.Param("action") == "dead-selected" {
			ids = c.PostFormArray("id")
			if len(ids) == 0 || len(ids) > maxBulkIDs {
				done("", badRequest("select 1 to 1000 dead jobs first"))
				return
			}
		} else {
			match = &engine.DeadLetterQuery{Reason: engine.DeadReason(c.PostForm("dead_reason")), Error: c.PostForm("dead_error")}
			if match.Reason != "" && !engine.ValidDeadReason(match.Reason) {
				done("", errInvalidReason)
				return
			}
			if len(match.Error) > engine.MaxErrorText {
				done("", errInvalidErrorText)
				return
			}
		}
		res, err := bulkDead(ctx, x, ns, q, ids, match, respawn, d.s.cfg.DefaultTTL())
		verb := map[bool]string{true: "respawned", false: "deleted"}[respawn]
		msg := strconv.FormatInt(res.Count, 10) + " dead jobs " + verb
		if res.More {
			msg += " (more match: run it again)"
		}
		base += "#dead"
		done(msg, err)
	case "respawn-all":
		n, err := x.RespawnDeadLetter(ctx, ns, q, 1<<40, d.s.cfg.DefaultTTL())
		done(strconv.FormatInt(n, 10)+" dead jobs respawned", err)
	case "delete-all":
		n, err := x.DeleteDeadLetter(ctx, ns, q, 1<<40)
		done(strconv.FormatInt(n, 10)+" dead jobs deleted", err)
	case "webhook":
		if d.s.webhooks == nil {
			done("", errWebhooksDisabled)
			return
		}
		body := webhookBody{URL: strings.TrimSpace(c.PostForm("url")), Secret: c.PostForm("secret")}
		var err error
		if v := strings.TrimSpace(c.PostForm("concurrency")); v != "" && v != "0" {
			n, perr := strconv.Atoi(v)
			body.Concurrency, err = &n, errors.Join(err, perr)
		}
		for _, f := range []struct {
			name string
			dst  **int64
		}{{"ttr_ms", &body.TTRMS}, {"timeout_ms", &body.TimeoutMS}} {
			if v := strings.TrimSpace(c.PostForm(f.name)); v != "" && v != "0" {
				n, perr := strconv.ParseInt(v, 10, 64)
				*f.dst, err = &n, errors.Join(err, perr)
			}
		}
		if err != nil {
			done("", badRequest("invalid webhook setting: whole numbers only"))
			return
		}
		sub, err2 := body.subscription(pool, ns, q)
		if err = err2; err == nil {
			_, err = d.s.webhooks.Put(ctx, sub)
		}
		done("webhook subscribed", err)
	case "schedule":
		done2 := func(msg string, err error) { // back to the Schedules section
			base += "#schedules"
			done(msg, err)
		}
		sc, ok := x.(engine.Scheduler)
		if !ok {
			done2("", errNoSchedules)
			return
		}
		s, err := d.newSchedule(c, ns, q)
		if err == nil {
			if _, gerr := sc.GetSchedule(ctx, ns, q, s.Name); gerr == nil {
				err = badRequest("schedule " + s.Name + " exists: delete it first (or replace it through the API)")
			} else if !errors.Is(gerr, engine.ErrScheduleNotFound) {
				err = scheduleFailure(gerr)
			}
		}
		if err == nil {
			_, err = sc.PutSchedule(ctx, s)
			err = scheduleFailure(err)
		}
		done2("schedule "+s.Name+" created", err)
	case "unsubscribe":
		if d.s.webhooks == nil {
			done("", errWebhooksDisabled)
			return
		}
		done("webhook removed", d.s.webhooks.Delete(ctx, pool, ns, q))
	default:
		d.notFound(c, "no such action")
	}
}

func (d *dashboard) jobAction(c *gin.Context) {
	pool, ns, q, x, ok := d.queueNames(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	id := c.Param("job_id")
	base := queueBase(pool, ns, q)
	back := base
	if c.PostForm("back") == "job" {
		back = "/ui/job/" + url.PathEscape(pool) + "/" + url.PathEscape(ns) + "/" + url.PathEscape(q) + "/" + url.PathEscape(id)
	}
	var err error
	var msg string
	switch c.Param("action") {
	case "delete":
		err, msg = x.Delete(ctx, ns, q, id), "job "+id+" deleted"
		back = base
	case "respawn":
		err, msg = x.RespawnDeadJob(ctx, ns, q, id, d.s.cfg.DefaultTTL()), "job "+id+" respawned"
	case "delete-dead":
		err, msg = x.DeleteDeadJob(ctx, ns, q, id), "dead job "+id+" deleted"
		back = base
	default:
		d.notFound(c, "no such action")
		return
	}
	if err != nil {
		d.redirect(c, back, errMessage(ctx, err), false)
		return
	}
	d.s.reqLogger(c).WithField("action", c.Param("action")).Info("dashboard: " + msg)
	d.redirect(c, back, msg, true)
}

// newSchedule reads the queue page's schedule form: name, cron, tz
// (UTC when empty), missed (skip when empty) and the job's body; the job
// gets the server's default TTL and tries, as a PUT …/schedule/:name
// without them.
func (d *dashboard) newSchedule(c *gin.Context, ns, q string) (*engine.Schedule, error) {
	s := &engine.Schedule{Namespace: ns, Queue: q, Name: strings.TrimSpace(c.PostForm("name")),
		Spec: strings.TrimSpace(c.PostForm("cron")), TZ: strings.TrimSpace(c.PostForm("tz")),
		Body: []byte(c.PostForm("body")), TTL: time.Duration(d.s.def.ttl) * time.Second, Tries: uint16(d.s.def.tries)}
	if !engine.ValidScheduleName(s.Name) {
		return s, errScheduleName
	}
	if s.Spec == "" {
		return s, errCronMissing
	}
	if s.TZ == "" {
		s.TZ = "UTC"
	}
	if _, err := engine.ParseCron(s.Spec, s.TZ); err != nil {
		if errors.Is(err, engine.ErrBadTimeZone) {
			return s, badRequest("invalid tz: " + err.Error())
		}
		return s, badRequest("invalid cron: " + err.Error())
	}
	var err error
	if s.Missed, err = engine.ParseMissed(strings.TrimSpace(c.PostForm("missed"))); err != nil {
		return s, errInvalidMissed
	}
	if len(s.Body) > engine.MaxBodySize {
		return s, errBodyTooLarge
	}
	return s, nil
}

// scheduleAction serves POST /ui/schedule/:pool/:namespace/:queue/:name/:action:
// pause, resume or delete one of the queue's schedules, then back to the
// queue page.
func (d *dashboard) scheduleAction(c *gin.Context) {
	pool, ns, q, x, ok := d.queueNames(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	back := queueBase(pool, ns, q) + "#schedules"
	name, action := c.Param("name"), c.Param("action")
	if action != "pause" && action != "resume" && action != "delete" {
		d.notFound(c, "no such action")
		return
	}
	if !engine.ValidScheduleName(name) {
		d.render(c, http.StatusBadRequest, "error", "Bad request", "", errorPage{Message: errScheduleName.Error()})
		return
	}
	sc, ok := x.(engine.Scheduler)
	if !ok {
		d.redirect(c, back, errNoSchedules.Error(), false)
		return
	}
	var err error
	var msg string
	switch action {
	case "delete":
		err, msg = sc.DeleteSchedule(ctx, ns, q, name), "schedule "+name+" deleted"
	default:
		paused := action == "pause"
		_, err = sc.PauseSchedule(ctx, ns, q, name, paused)
		msg = "schedule " + name + map[bool]string{true: " paused", false: " resumed"}[paused]
	}
	if err != nil {
		d.redirect(c, back, errMessage(ctx, scheduleFailure(err)), false)
		return
	}
	d.s.reqLogger(c).WithField("action", action).WithField("schedule", name).Info("dashboard: " + msg)
	d.redirect(c, back, msg, true)
}

// ---- helpers ----

// ago renders the time since t, coarsely ("3m12s ago"); "" for zero t.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + (-d).Round(time.Second).String()
	}
	return d.Round(time.Second).String() + " ago"
}

// when renders t in UTC; "" for zero t.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}
