package server

// The audit log (doc/dashboard.md, doc/API.md): auditTrail records every
// state-changing request to the admin listener, JSON API and dashboard
// alike, accepted or refused, in the admin Redis (package server/audit)
// and in the log. It is one middleware on the admin router, ahead of the
// basic auth of every route, so that a new route cannot forget it and a
// refused attempt is recorded too.
//
// What it records never holds a token's value or a password: a token in a
// route's path or in a form is recorded as its fingerprint, the path
// itself is recorded only as the route's pattern, and no body and no
// header is recorded (the basic auth's user name only, and that only when
// it names a configured account).

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/server/audit"
)

// AuditLog is where the audit entries are kept (audit.Store).
type AuditLog interface {
	// Record stores an entry and returns its sequence number.
	Record(ctx context.Context, e audit.Entry) (int64, error)
	// List returns entries newest first and the cursor of the next page.
	List(ctx context.Context, q audit.Query) ([]audit.Entry, int64, error)
}

// Context keys a handler sets for the audit entry of its request.
const (
	// auditErrorKey: why an action that answered < 400 was not done (a
	// dashboard action answers 303 either way), or the message of an
	// error page.
	auditErrorKey = "kairos.audit.error"
	// auditTokenKey: the fingerprint of a token the request created.
	auditTokenKey = "kairos.audit.token"
)

// auditWriteTimeout bounds storing one entry, so that an admin Redis that
// hangs delays an admin action by at most this much.
const auditWriteTimeout = 2 * time.Second

// noteAuditError tells the audit entry that the action failed with msg.
func noteAuditError(c *gin.Context, msg string) { c.Set(auditErrorKey, msg) }

// noteAuditToken tells the audit entry which token the request made (as
// clients send it, "pool:secret" or "secret"); the entry gets its
// fingerprint.
func noteAuditToken(c *gin.Context, token string) { c.Set(auditTokenKey, tokenFingerprint(token)) }

// auditMetrics count the entries and the ones the admin Redis refused.
type auditMetrics struct {
	entries     prometheus.Counter
	writeErrors prometheus.Counter
}

func newAuditMetrics(reg prometheus.Registerer) (*auditMetrics, error) {
	m := &auditMetrics{}
	var err error
	if m.entries, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kairos_audit_entries_total",
		Help: "State-changing admin and dashboard requests audited (stored or not).",
	})); err != nil {
		return nil, err
	}
	if m.writeErrors, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kairos_audit_write_errors_total",
		Help: "Audit entries that could not be stored in the admin Redis (they are in the log, at warn level).",
	})); err != nil {
		return nil, err
	}
	return m, nil
}

// audited reports whether a request changes state: every method but GET,
// HEAD and OPTIONS.
func audited(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// auditWriter keeps the start of an error answer, for the entry's error.
type auditWriter struct {
	gin.ResponseWriter
	body []byte
}

const auditBodyKeep = 1024

func (w *auditWriter) keep(p []byte) {
	if w.Status() >= http.StatusBadRequest && len(w.body) < auditBodyKeep {
		w.body = append(w.body, p[:min(len(p), auditBodyKeep-len(w.body))]...)
	}
}

func (w *auditWriter) Write(p []byte) (int, error) {
	w.keep(p)
	return w.ResponseWriter.Write(p)
}

func (w *auditWriter) WriteString(s string) (int, error) {
	w.keep([]byte(s))
	return w.ResponseWriter.WriteString(s)
}

// auditTrail is the admin router's audit middleware (see the top of this
// file). Requests to no route (404) are not actions and are not recorded.
func (s *Server) auditTrail(c *gin.Context) {
	if !audited(c.Request.Method) {
		c.Next()
		return
	}
	w := &auditWriter{ResponseWriter: c.Writer}
	c.Writer = w
	c.Next()
	c.Writer = w.ResponseWriter
	if c.FullPath() == "" {
		return
	}
	s.record(c, s.auditEntry(c, w.body))
}

// auditEntry builds the entry of a request that has been answered.
func (s *Server) auditEntry(c *gin.Context, body []byte) audit.Entry {
	e := audit.Entry{
		Time:      s.now().UTC(),
		RequestID: state(c).reqID,
		Remote:    c.ClientIP(),
		Source:    "api",
		Method:    c.Request.Method,
		Route:     c.FullPath(),
		Status:    c.Writer.Status(),
	}
	if strings.HasPrefix(e.Route, "/ui/") {
		e.Source = "dashboard"
	}
	switch user := c.GetString(gin.AuthUserKey); {
	case user != "":
		e.Account, e.Authenticated = user, true
	case len(s.cfg.Accounts) == 0:
		e.Account, e.Authenticated = "anonymous", true
	default:
		// Refused, or a route without basic auth: name the account the
		// request claimed only when it exists, so that a password typed
		// into the user field is never recorded.
		if u, _, ok := c.Request.BasicAuth(); ok {
			if _, known := s.cfg.Accounts[u]; known {
				e.Account = u
			}
		}
	}
	e.Target, e.Error = auditTarget(c, body)
	e.OK = e.Status < http.StatusBadRequest && e.Error == ""
	return e
}

// auditTarget names what the request acted on, from its route parameters,
// its pool query parameter and the form fields its handler read, with
// every token replaced by its fingerprint; and the error it was answered,
// with any token value in it replaced likewise.
func auditTarget(c *gin.Context, body []byte) (map[string]string, string) {
	t := make(map[string]string)
	var secrets []string // token values seen, to scrub from the error
	setToken := func(raw string) {
		if raw == "" {
			return
		}
		t["token"] = tokenFingerprint(raw)
		if pool, secret := auth.ParseToken(raw); strings.Contains(raw, ":") {
			t["pool"] = pool
			secrets = append(secrets, raw, secret)
		} else {
			secrets = append(secrets, raw)
		}
	}
	for _, p := range c.Params {
		if p.Key == "token" {
			setToken(p.Value)
		} else {
			t[p.Key] = p.Value
		}
	}
	query := c.Request.URL.Query()
	if pool := query.Get("pool"); pool != "" {
		t["pool"] = pool
	}
	setToken(query.Get("token"))
	// The form only if the handler parsed it: parsing it here would read
	// a body that the handler chose not to read, and that may be large.
	if f := c.Request.Form; f != nil {
		for _, k := range []string{"pool", "namespace"} {
			if v := f.Get(k); v != "" {
				t[k] = v
			}
		}
		if fp := f.Get("fingerprint"); auth.IsFingerprint(fp) {
			t["token"] = fp
		}
		setToken(f.Get("token"))
	}
	if fp := c.GetString(auditTokenKey); fp != "" {
		t["token"] = fp
	}
	msg := c.GetString(auditErrorKey)
	if msg == "" && len(body) > 0 {
		msg = errorText(c.Writer.Header().Get("Content-Type"), body)
	}
	for _, s := range secrets {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "[token]")
		}
	}
	if len(t) == 0 {
		t = nil
	}
	for k, v := range t {
		t[k] = clip(v, auditMaxValue)
	}
	return t, clip(msg, auditMaxError)
}

// Bounds of an entry's strings: a request refused before any check of its
// parameters (a wrong password) may carry a path or form of any length,
// and the store keeps thousands of entries.
const (
	auditMaxValue = 256 // a target value (names are at most 255 bytes)
	auditMaxError = 512
)

// clip cuts s to at most n bytes, on a UTF-8 boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// errorText is the message of an error answer: the "error" (or lmstfy's
// "msg") of a JSON body, the first line of a plain-text one.
func errorText(contentType string, body []byte) string {
	switch {
	case strings.HasPrefix(contentType, "application/json"):
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			for _, k := range []string{"error", "msg"} {
				if v, ok := m[k].(string); ok && v != "" {
					return v
				}
			}
		}
	case strings.HasPrefix(contentType, "text/plain"):
		line, _, _ := strings.Cut(string(body), "\n")
		return strings.TrimSpace(line)
	}
	return ""
}

// tokenFingerprint is how the audit log names a token given as clients
// send it ("pool:secret" or "secret") or by its fingerprint.
func tokenFingerprint(raw string) string {
	_, secret := auth.ParseToken(raw)
	if auth.IsFingerprint(secret) {
		return secret
	}
	return auth.Fingerprint(secret)
}

// record stores e and logs it: at info level once stored, at warn level
// with audit_stored=false when the admin Redis refused it (the action
// itself stands either way).
func (s *Server) record(c *gin.Context, e audit.Entry) {
	s.auditMetrics.entries.Inc()
	var err error
	if s.audit != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), auditWriteTimeout)
		e.Seq, err = s.audit.Record(ctx, e)
		cancel()
	}
	f := logrus.Fields{
		"audit": true, "req_id": e.RequestID, "account": e.Account, "authenticated": e.Authenticated,
		"remote": e.Remote, "source": e.Source, "method": e.Method, "route": e.Route,
		"status": e.Status, "ok": e.OK,
	}
	for k, v := range e.Target {
		f["target_"+k] = v
	}
	if e.Error != "" {
		f["error"] = e.Error
	}
	switch {
	case s.audit == nil:
		f["audit_stored"] = false
		s.log.WithFields(f).Info("audit")
	case err != nil:
		s.auditMetrics.writeErrors.Inc()
		f["audit_stored"] = false
		f["audit_error"] = err.Error()
		s.log.WithFields(f).Warn("audit: entry not stored")
	default:
		f["audit_seq"] = e.Seq
		s.log.WithFields(f).Info("audit")
	}
}

// auditResponse is GET /audit's answer.
type auditResponse struct {
	Entries []audit.Entry `json:"entries"`
	// Next is the before parameter of the next page; 0 when this is the
	// last one.
	Next int64 `json:"next"`
}

var errAuditDisabled = newAPIError(http.StatusNotImplemented, "error", "the audit log is not stored on this server")

// auditQuery reads GET /audit's (and the audit page's) parameters.
func auditQuery(c *gin.Context) (audit.Query, error) {
	var q audit.Query
	var err error
	if q.Before, err = audit.ParseBefore(c.Query("before")); err != nil {
		return q, badRequest(err.Error())
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxPage {
			return q, badRequest("limit must be an integer in [1, " + strconv.Itoa(audit.MaxPage) + "]")
		}
		q.Limit = n
	}
	q.Account, q.Namespace = c.Query("account"), c.Query("namespace")
	return q, nil
}

// listAudit serves GET /audit: entries newest first; ?limit (1..500,
// default 50), ?before (the previous page's next), ?account, ?namespace.
func (s *Server) listAudit(c *gin.Context) {
	if s.audit == nil {
		s.failAdmin(c, errAuditDisabled)
		return
	}
	q, err := auditQuery(c)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	entries, next, err := s.audit.List(c.Request.Context(), q)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if entries == nil {
		entries = []audit.Entry{}
	}
	c.Header("Cache-Control", "no-store")
	writeJSON(c, http.StatusOK, auditResponse{Entries: entries, Next: next})
}
