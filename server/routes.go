package server

import (
	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/tracing"
	"github.com/kairos-dev/kairos/server/evloop"
)

// loopRoutes are the requests the event loops (package server/evloop, on
// Linux) may serve themselves, in batches, before net/http and gin see
// them; every other request, and every request that does not meet all of
// these conditions, goes with its connection to net/http and the routes
// of apiRoutes below, which answer it as they would without loops. A
// request taken by a loop is admitted by admit (admit.go) like gin's, and
// its parameters are checked by loopHost.Take (fastpath.go) as the
// handler checks them: a value out of range (tries=0, ttl < delay,
// count > 32) sends it to net/http too, to answer the 400.
//
//	PUT    /api/:namespace/:queue               publish; ?delay ttl tries group token; body 1 B…MaxBodySize by Content-Length
//	GET    /api/:namespace/:queue               consume of one queue; ?ttr timeout count token; no body
//	DELETE /api/:namespace/:queue/job/:job_id   ACK; ?token receipt; no body; job ID letters and digits, at most 64
//
// A consume may carry X-Kairos-Extensions (once): its answer then has the
// receipts, as net/http's has (consumedBody); an ACK with a receipt (16 hex
// digits; anything else is net/http's 400) is the ACK of that delivery
// (engine.JobRef.Receipt). These are what the Go client's Worker sends, so
// that its jobs stay on the loops.
//
// For all three: HTTP/1.1, one Host, a head of at most 8 KiB, no
// percent-encoding in the path, plain query values (letters, digits and
// "-._~:"), no Transfer-Encoding, Expect, Upgrade, Connection other than
// keep-alive, nor a header of a Kairos extension other than
// X-Kairos-Extensions (Idempotency-Key, Enable-Job-Version, Job-Attr-*). A publish's W3C
// trace context (traceparent, tracestate, each at most once) is read and
// stored as net/http stores it; with tracing on, a request carrying one
// is net/http's instead (Server.loopTable). A consume's X-Kairos-Worker
// (at most once) names the worker in the jobs' histories, as on net/http.
var loopRoutes = evloop.Table{
	Routes: []evloop.Route{
		{Kind: evloop.Publish, Method: "PUT", Path: "/api/:namespace/:queue",
			Params: []string{"delay", "ttl", "tries", "group", "token"},
			Body:   evloop.Body{Min: 1, Max: engine.MaxBodySize}},
		{Kind: evloop.Consume, Method: "GET", Path: "/api/:namespace/:queue",
			Params: []string{"ttr", "timeout", "count", "token"}},
		{Kind: evloop.Ack, Method: "DELETE", Path: "/api/:namespace/:queue/job/:job_id",
			Params: []string{"token", "receipt"}},
	},
	MaxHead:              8 << 10,
	MaxJobID:             64,
	TokenHeader:          "X-Token",
	TokenParam:           "token",
	RefuseHeaders:        []string{"Idempotency-Key", "Enable-Job-Version"},
	ExtHeader:            extHeader,
	RefuseHeaderPrefixes: []string{attributePrefix},
	TraceContext:         true,
	WorkerHeader:         workerHeader,
}

// apiRoutes builds the public API (spec 3.1): global middleware in
// lmstfy's order (request id, access log, metrics, recovery), then per
// route the guard (names → pool → token → scope → throttle) and the
// handler. Unknown routes and wrong methods answer 404 "api not found".
func (s *Server) apiRoutes() *gin.Engine {
	r := newGin()
	r.Use(requestState, s.accessLogger(false), s.collectMetrics, s.recovery)

	publish := s.guard(optsPublish)
	consume := s.guard(optsConsume)
	ack := s.guard(optsAck)
	read := s.guard(routeOpts{role: auth.RoleRead})
	manage := s.guard(routeOpts{role: auth.RoleManage})
	public := s.sizeGuard() // no token check unless Kairos.AuthenticateSize

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)

	g := r.Group("/api")
	g.PUT("/:namespace/:queue", s.traced(tracing.SpanPublish, trace.SpanKindServer, publish, s.publish)...)
	g.PUT("/:namespace/:queue/bulk", s.traced(tracing.SpanPublish, trace.SpanKindServer, s.guard(optsBulk), s.publishBulk)...)
	g.PUT("/:namespace/:queue/job/:job_id", s.traced(tracing.SpanPublish, trace.SpanKindServer, publish, s.publish)...)
	g.GET("/:namespace/:queue", s.tracedConsume(consume, s.consume)...)
	g.GET("/:namespace/:queue/peek", read, s.peekQueue)
	g.GET("/:namespace/:queue/job/:job_id", read, s.peekJob)
	g.DELETE("/:namespace/:queue/job/:job_id", s.traced(tracing.SpanAck, trace.SpanKindServer, ack, s.ack)...)
	g.DELETE("/:namespace/:queue", manage, s.destroy)
	g.GET("/:namespace/:queue/deadletter", read, s.peekDeadLetter)
	g.PUT("/:namespace/:queue/deadletter", manage, s.respawnDeadLetter)
	g.DELETE("/:namespace/:queue/deadletter", manage, s.deleteDeadLetter)
	g.GET("/:namespace/:queue/size", public, s.size)
	g.GET("/:namespace/:queue/deadletter/size", public, s.deadLetterSize)

	// Kairos extensions (in the file of the resource each extends;
	// schedules in schedule.go).
	unthrottledPublish := s.guard(routeOpts{role: auth.RolePublish})
	g.PUT("/:namespace/:queue/job/:job_id/release", s.traced(tracing.SpanRelease, trace.SpanKindServer, ack, s.release)...)
	g.PUT("/:namespace/:queue/job/:job_id/touch", ack, s.touch)
	g.DELETE("/:namespace/:queue/job_key/*key", unthrottledPublish, s.cancelKey)
	g.PUT("/:namespace/:queue/pause", manage, s.setPaused(true))
	g.PUT("/:namespace/:queue/resume", manage, s.setPaused(false))
	g.GET("/:namespace/:queue/deadletter/jobs", read, s.listDeadLetter)
	g.PUT("/:namespace/:queue/deadletter/job/:job_id", manage, s.respawnDeadJob)
	g.DELETE("/:namespace/:queue/deadletter/job/:job_id", manage, s.deleteDeadJob)
	g.POST("/:namespace/:queue/deadletter/jobs/respawn", manage, s.deadLetterBulk(true))
	g.POST("/:namespace/:queue/deadletter/jobs/delete", manage, s.deadLetterBulk(false))
	g.GET("/:namespace/:queue/schedule", unthrottledPublish, s.schedules(s.listSchedules))
	g.PUT("/:namespace/:queue/schedule/:name", unthrottledPublish, s.schedules(s.putSchedule))
	g.GET("/:namespace/:queue/schedule/:name", unthrottledPublish, s.schedules(s.getSchedule))
	g.DELETE("/:namespace/:queue/schedule/:name", unthrottledPublish, s.schedules(s.deleteSchedule))
	g.PUT("/:namespace/:queue/schedule/:name/pause", unthrottledPublish, s.schedules(s.pauseSchedule(true)))
	g.PUT("/:namespace/:queue/schedule/:name/resume", unthrottledPublish, s.schedules(s.pauseSchedule(false)))

	r.NoRoute(noRoute)
	return r
}

// adminRoutes builds the admin API (spec 4). Every route goes through
// one door (admin_door.go): the Host and cross-site checks, then, with
// Accounts configured, basic auth and the account's role and namespaces as
// adminRules says. As in lmstfy the token and limit routes and POST
// /accesslog need an account; so do /metrics, /info and /debug/pprof
// (Kairos hardening, unless Kairos.ProtectAdminEndpoints is false) and
// every Kairos route.
func (s *Server) adminRoutes() *gin.Engine {
	r := newGin()
	// auditTrail before the door, so that refused attempts are recorded
	// (with the account the door names); around recovery, so that a
	// panic is too.
	r.Use(requestState, s.accessLogger(true), s.auditTrail, s.recovery, s.adminDoor)

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	r.GET("/pools", s.listPools)
	r.GET("/version", s.showVersion)
	r.GET("/openapi.yaml", s.serveOpenAPI) // Kairos: doc/openapi.yaml
	r.GET("/info", s.info)
	r.GET("/metrics", s.serveMetrics)
	r.Any("/debug/pprof/*profile", s.pprof)
	r.GET("/accesslog", s.getAccessLog)
	r.POST("/accesslog", s.setAccessLog)
	r.GET("/limits", s.listLimits)
	r.GET("/audit", s.listAudit) // Kairos: audit.go

	t := r.Group("/token")
	t.GET("/:namespace", s.listTokens)
	t.POST("/:namespace", s.createToken)
	t.DELETE("/:namespace/:token", s.deleteToken)
	t.GET("/:namespace/:token/limit", s.getLimit)
	t.POST("/:namespace/:token/limit", s.addLimit)
	t.PUT("/:namespace/:token/limit", s.setLimit)
	t.DELETE("/:namespace/:token/limit", s.deleteLimit)

	// Kairos extensions (queue.go, webhook.go).
	r.GET("/queue/:namespace/:queue/config", s.getQueueConfig)
	r.PUT("/queue/:namespace/:queue/config", s.putQueueConfig)
	r.GET("/webhooks", s.listWebhooks)
	r.GET("/webhook/:namespace/:queue", s.getWebhook)
	r.PUT("/webhook/:namespace/:queue", s.putWebhook)
	r.DELETE("/webhook/:namespace/:queue", s.deleteWebhook)
	r.GET("/quota", s.listQuotas) // quota.go
	r.GET("/quota/:namespace", s.getQuota)
	r.PUT("/quota/:namespace", s.putQuota)
	r.DELETE("/quota/:namespace", s.deleteQuota)

	// The dashboard's data (dashboard.go, doc/dashboard.md).
	r.GET("/overview", s.overview)
	r.GET("/history", s.series)
	r.GET("/history/:namespace", s.series)
	r.GET("/history/:namespace/:queue", s.series)
	r.GET("/queues/:namespace", s.listQueues)
	r.GET("/queue/:namespace/:queue/jobs", s.listJobs)
	r.GET("/queue/:namespace/:queue/job/:job_id", s.adminPeekJob)
	r.GET("/queue/:namespace/:queue/deadletter/jobs", s.adminDeadJobs)
	r.GET("/queue/:namespace/:queue/groups", s.listGroups) // groups.go
	r.GET("/job/:job_id", s.findJob)

	// The web dashboard (ui_pages.go), unless [Dashboard] Enabled = false.
	if s.cfg.DashboardEnabled() {
		if err := s.dashboardRoutes(r); err != nil {
			panic("server: the dashboard's embedded templates do not parse: " + err.Error())
		}
	}

	r.NoRoute(noRoute)
	return r
}

// newGin returns a bare gin engine: no default middleware, no 405s (wrong
// methods fall through to NoRoute, as in lmstfy), trailing-slash redirects
// kept (lmstfy's 301/307), and ClientIP from the peer address only.
func newGin() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = false
	r.RedirectTrailingSlash = true
	r.RedirectFixedPath = false
	_ = r.SetTrustedProxies(nil)
	return r
}
