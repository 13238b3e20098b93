package server

// The admin listener's door (doc/config.md#accounts, doc/API.md#admin-api):
// one gin middleware in front of every admin route, the dashboard's
// included, that decides for all of them, in this order:
//
//  1. Host: the admin listener answers only the names it is reached by
//     (its own address, localhost, [Kairos] AdminHosts), which stops DNS
//     rebinding: 403 otherwise.
//  2. Cross-site: a request a browser marks as coming from another site
//     (Sec-Fetch-Site other than same-origin or none, an Origin that is
//     not the admin listener's) changes nothing and reads nothing: 403.
//     A cross-site GET navigation (following a link) is let in: it
//     changes nothing and its page is not the linking site's to read.
//     Requests without those headers (curl, lmstfy's clients, the Go
//     client) are not browsers' and pass.
//  3. Account: with [Accounts], HTTP basic auth (plain passwords compared
//     in constant time, bcrypt hashes with bcrypt), on every route but the
//     open ones of adminRules (a client address with too many failed
//     logins is refused for a while: admin_login.go); the account's name
//     goes into the context under gin.AuthUserKey (as gin.BasicAuth puts
//     it), its role under AuthRoleKey.
//  4. Role and namespaces: adminRules gives each route the least role it
//     needs and where its namespace comes from; an account limited to some
//     namespaces is refused the others, and the routes that span every
//     namespace.
//
// A route without a rule is refused (and a test fails), so that a new
// route cannot be forgotten.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// AuthRoleKey is the gin context key under which the admin door puts the
// role of the request's account: config.RoleViewer, RoleOperator or
// RoleAdmin (RoleAdmin for every request when [Accounts] is empty). The
// account's name is under gin.AuthUserKey, as gin.BasicAuth puts it
// (absent without [Accounts] and on the routes open to all).
const AuthRoleKey = "kairos.role"

// basicRealm is lmstfy's (gin.BasicAuth's default) WWW-Authenticate value.
const basicRealm = `Basic realm="Authorization Required"`

// who says which requests a route admits.
type who uint8

const (
	whoAccount who = iota // an account, when [Accounts] is set
	whoOpen               // anyone (lmstfy leaves these open)
	whoOps                // an account unless [Kairos] ProtectAdminEndpoints = false
)

// nsFrom says where a route's namespace comes from, for the accounts
// limited to some namespaces.
type nsFrom uint8

const (
	nsAll   nsFrom = iota // the route spans every namespace: limited accounts are refused
	nsNone                // the route shows nothing of any namespace (static files)
	nsParam               // the path's :namespace
	nsQuery               // ?namespace=, every namespace when it is empty
	nsForm                // the form field namespace (a dashboard POST)
)

// adminRule is what the door asks of one route.
type adminRule struct {
	who  who
	role string // the least role needed: config.RoleViewer, RoleOperator, RoleAdmin
	ns   nsFrom
	// noStore: the answer may carry a token; it must not be cached.
	noStore bool
}

var (
	openRoute = adminRule{who: whoOpen, ns: nsNone}
	opsRoute  = adminRule{who: whoOps, role: config.RoleViewer}
	viewAll   = adminRule{role: config.RoleViewer}
	viewNS    = adminRule{role: config.RoleViewer, ns: nsParam}
	operateNS = adminRule{role: config.RoleOperator, ns: nsParam}
	adminNS   = adminRule{role: config.RoleAdmin, ns: nsParam}
)

// adminRules is every admin route's rule, by "METHOD /path" as gin names
// the route ("* /path" for every method); TestAdminRulesCoverEveryRoute
// fails for a route without one. doc/config.md#roles lists them for
// users.
var adminRules = map[string]adminRule{
	"GET /healthz":      openRoute,
	"GET /readyz":       openRoute,
	"GET /pools":        openRoute,
	"GET /version":      openRoute,
	"GET /openapi.yaml": openRoute,
	"GET /accesslog":    openRoute,

	"GET /info":               opsRoute,
	"GET /metrics":            opsRoute,
	"* /debug/pprof/*profile": {who: whoOps, role: config.RoleAdmin}, // memory, command line, CPU time

	"POST /accesslog": {role: config.RoleAdmin},
	// Every limit with its token (in clear without HashTokens).
	"GET /limits": {role: config.RoleAdmin, noStore: true},

	"GET /token/:namespace":                 {role: config.RoleAdmin, ns: nsParam, noStore: true},
	"POST /token/:namespace":                {role: config.RoleAdmin, ns: nsParam, noStore: true},
	"DELETE /token/:namespace/:token":       adminNS,
	"GET /token/:namespace/:token/limit":    viewNS,
	"POST /token/:namespace/:token/limit":   adminNS,
	"PUT /token/:namespace/:token/limit":    adminNS,
	"DELETE /token/:namespace/:token/limit": adminNS,

	"GET /queue/:namespace/:queue/config": viewNS,
	"PUT /queue/:namespace/:queue/config": operateNS,
	"GET /webhooks":                       viewAll,
	"GET /webhook/:namespace/:queue":      viewNS,
	"PUT /webhook/:namespace/:queue":      operateNS,
	"DELETE /webhook/:namespace/:queue":   operateNS,
	// A namespace may read its own quota and usage; only an admin over
	// every namespace may set one, since a quota protects the other
	// namespaces from this one (an admin limited to a namespace is its
	// tenant, not the pool's operator).
	"GET /quota":               viewAll,
	"GET /quota/:namespace":    viewNS,
	"PUT /quota/:namespace":    {role: config.RoleAdmin},
	"DELETE /quota/:namespace": {role: config.RoleAdmin},

	"GET /overview":                                viewAll,
	"GET /history":                                 viewAll,
	"GET /history/:namespace":                      viewNS,
	"GET /history/:namespace/:queue":               viewNS,
	"GET /queues/:namespace":                       viewNS,
	"GET /queue/:namespace/:queue/jobs":            viewNS,
	"GET /queue/:namespace/:queue/job/:job_id":     viewNS,
	"GET /queue/:namespace/:queue/deadletter/jobs": viewNS,
	"GET /queue/:namespace/:queue/groups":          viewNS,
	"GET /job/:job_id":                             viewAll,
	// Who did what where (audit.go): every namespace's entries.
	"GET /audit": viewAll,

	// The dashboard (ui_pages.go).
	"GET /ui/static/*file":                        {role: config.RoleViewer, ns: nsNone},
	"GET /ui/":                                    viewAll,
	"GET /ui/ns/:pool/:namespace":                 viewNS,
	"GET /ui/queue/:pool/:namespace/:queue":       viewNS,
	"GET /ui/job/:pool/:namespace/:queue/:job_id": viewNS,
	"GET /ui/lookup":                              {role: config.RoleViewer, ns: nsQuery},
	"GET /ui/audit":                               viewAll,
	// Fingerprints and descriptions, never a token; a token just created
	// is shown once, on the page of GET /ui/tokens/created.
	"GET /ui/tokens":                                          {role: config.RoleViewer, ns: nsQuery, noStore: true},
	"GET /ui/tokens/created":                                  {role: config.RoleAdmin, ns: nsNone, noStore: true},
	"POST /ui/queue/:pool/:namespace/:queue/:action":          operateNS,
	"POST /ui/job/:pool/:namespace/:queue/:job_id/:action":    operateNS,
	"POST /ui/schedule/:pool/:namespace/:queue/:name/:action": operateNS,
	"POST /ui/tokens/create":                                  {role: config.RoleAdmin, ns: nsForm, noStore: true},
	"POST /ui/tokens/revoke":                                  {role: config.RoleAdmin, ns: nsForm},
}

// adminRuleOf returns the rule of the route c matched.
func adminRuleOf(method, path string) (adminRule, bool) {
	if r, ok := adminRules[method+" "+path]; ok {
		return r, true
	}
	r, ok := adminRules["* "+path]
	return r, ok
}

// roleRank orders the roles: a role may do what a lower one may.
func roleRank(role string) int { return slices.Index(config.Roles, role) }

// adminDoor is the admin router's first middleware after the request
// state, the access log and recovery: see the top of this file.
func (s *Server) adminDoor(c *gin.Context) {
	r := c.Request
	if strings.HasPrefix(r.URL.Path, "/ui/") {
		setDashHeaders(c) // on the door's answers too
	}
	if !s.adminHostAllowed(r) {
		s.refuse(c, http.StatusForbidden, "this admin listener does not answer the host "+strconv.Quote(r.Host)+
			" (add it to [Kairos] AdminHosts)", "host")
		return
	}
	if why := s.crossSite(r); why != "" {
		s.refuse(c, http.StatusForbidden, "cross-site request refused: "+why, "cross-site")
		return
	}
	path := c.FullPath()
	if path == "" {
		c.Next() // no such route: 404 as lmstfy
		return
	}
	rule, ok := adminRuleOf(r.Method, path)
	if !ok {
		s.reqLogger(c).WithField("route", r.Method+" "+path).Error("admin route without an access rule (adminRules): refused")
		s.refuse(c, http.StatusForbidden, "this route has no access rule", "no rule")
		return
	}
	if rule.noStore {
		c.Header("Cache-Control", "no-store")
	}
	if len(s.cfg.Accounts) == 0 {
		c.Set(AuthRoleKey, config.RoleAdmin)
		c.Next()
		return
	}
	if rule.who == whoOpen || rule.who == whoOps && !s.cfg.Kairos.AdminEndpointsProtected() {
		c.Next()
		return
	}
	client := clientKey(r)
	if wait := s.logins.blocked(client); wait > 0 {
		c.Header("Retry-After", retryAfter(wait))
		s.refuse(c, http.StatusTooManyRequests, fmt.Sprintf("too many failed logins from %s: try again in %s", client, retryAfter(wait)+"s"), "logins")
		return
	}
	user, access, ok := s.authenticate(r)
	if !ok {
		if _, _, sent := r.BasicAuth(); sent {
			s.logins.failed(client)
		}
		c.Header("WWW-Authenticate", basicRealm)
		c.AbortWithStatus(http.StatusUnauthorized)
		return
	}
	c.Set(gin.AuthUserKey, user)
	c.Set(AuthRoleKey, access.Role)
	if roleRank(access.Role) < roleRank(rule.role) {
		s.refuse(c, http.StatusForbidden, fmt.Sprintf("account %q has the role %s; this needs %s", user, access.Role, rule.role), "role")
		return
	}
	if access.Namespaces != nil && rule.ns != nsNone {
		if ns, all := routeNamespace(c, rule.ns); all || !slices.Contains(access.Namespaces, ns) {
			if all && path == "/ui/" {
				// The overview spans every namespace: the account's own
				// first namespace is its home page instead.
				c.Redirect(http.StatusSeeOther, "/ui/ns/"+url.PathEscape(auth.DefaultPool)+"/"+url.PathEscape(access.Namespaces[0]))
				c.Abort()
				return
			}
			msg := fmt.Sprintf("account %q may not touch the namespace %q", user, ns)
			if all {
				msg = fmt.Sprintf("account %q may touch only the namespaces %s; this spans every namespace", user, strings.Join(access.Namespaces, ", "))
			}
			s.refuse(c, http.StatusForbidden, msg, "namespace")
			return
		}
	}
	c.Next()
}

// routeNamespace returns the namespace a request touches, or all = true
// when it spans every namespace (or names none where it should).
func routeNamespace(c *gin.Context, from nsFrom) (ns string, all bool) {
	switch from {
	case nsParam:
		ns = c.Param("namespace")
	case nsQuery:
		ns = c.Query("namespace")
	case nsForm:
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody)
		ns = strings.TrimSpace(c.PostForm("namespace"))
	}
	return ns, ns == ""
}

// refuse answers a request the door turns away: status and a JSON error.
func (s *Server) refuse(c *gin.Context, status int, msg, reason string) {
	s.reqLogger(c).WithField("reason", reason).WithField("host", c.Request.Host).Warn("admin: request refused: " + msg)
	ae := newAPIError(status, "error", msg)
	c.Data(ae.status, jsonContentType, ae.body)
	c.Abort()
}

// adminHostAllowed reports whether the admin listener answers r's Host:
// an [Kairos] AdminHosts entry ("name" for any port, "name:port", "*" for
// every name: no DNS-rebinding protection), or,
// with the listener's port or none, localhost, a loopback address, the
// address the connection came in on, or AdminHost. A request without Host
// (HTTP/1.0) comes from no browser and passes.
func (s *Server) adminHostAllowed(r *http.Request) bool {
	if r.Host == "" {
		return true
	}
	name, port := splitHostPort(r.Host)
	if slices.Contains(s.cfg.Kairos.AdminHosts, "*") || s.adminHostListed(name, port) {
		return true
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if port != "" && local != nil && port != strconv.Itoa(local.Port) {
		return false
	}
	if bind := strings.TrimSpace(s.cfg.AdminHost); name == "localhost" || !hostsWildcard(bind) && strings.EqualFold(name, strings.Trim(bind, "[]")) {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && (ip.IsLoopback() || local != nil && ip.Equal(local.IP))
}

// adminHostListed reports whether name (with port, "" for none) is an
// [Kairos] AdminHosts entry: "name" for any port or "name:port". The
// entry "*" names no host: it turns the Host check off (adminHostAllowed),
// never the cross-site check.
func (s *Server) adminHostListed(name, port string) bool {
	for _, e := range s.cfg.Kairos.AdminHosts {
		if en, ep := splitHostPort(e); e != "*" && en == name && (ep == "" || ep == port) {
			return true
		}
	}
	return false
}

// hostsWildcard reports whether a bind address is every interface: not
// a name a browser would use.
func hostsWildcard(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" || h == "[::]" }

// splitHostPort splits a Host value into its lower-case name (IPv6
// without brackets) and its port ("" when it has none).
func splitHostPort(h string) (name, port string) {
	h = strings.ToLower(strings.TrimSpace(h))
	if n, p, err := net.SplitHostPort(h); err == nil {
		return n, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ""
}

// crossSite returns why r comes from another site, or "" when it does
// not (or does not say: no browser).
func (s *Server) crossSite(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		navigation := (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Sec-Fetch-Mode") == "navigate"
		if !navigation {
			return "Sec-Fetch-Site: " + site
		}
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" {
			return "Origin: " + origin
		}
		if strings.EqualFold(u.Host, r.Host) {
			return ""
		}
		if s.adminHostListed(splitHostPort(u.Host)) {
			return ""
		}
		return "Origin: " + origin
	}
	return ""
}

// authenticate checks r's basic-auth credentials against [Accounts].
func (s *Server) authenticate(r *http.Request) (string, config.AccountAccess, bool) {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return "", config.AccountAccess{}, false
	}
	want, known := s.cfg.Accounts[user]
	if !known || !s.passwords.check(r.Context(), s.logins, user, want, pass) {
		return "", config.AccountAccess{}, false
	}
	return user, s.cfg.Access(user), true
}

// passwordChecker compares passwords: plain ones in constant time (of
// their SHA-256, so that not even the length leaks), bcrypt hashes with
// bcrypt, remembering a match for passwordCacheTTL so that a dashboard
// loading a page and its data does not pay bcrypt's cost (tens of
// milliseconds of CPU, by design) on every request. A failed comparison
// is never remembered.
type passwordChecker struct {
	mu sync.Mutex
	ok map[[32]byte]time.Time // SHA-256 of user, hash and password → expiry
}

const (
	passwordCacheTTL = time.Minute
	passwordCacheMax = 256
)

// check compares got with user's password want. A bcrypt comparison
// waits for one of guard's slots (at most half the
// CPUs compare at once); it fails when ctx ends first.
func (p *passwordChecker) check(ctx context.Context, guard *loginGuard, user, want, got string) bool {
	if !config.IsBcryptHash(want) {
		a, b := sha256.Sum256([]byte(want)), sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(a[:], b[:]) == 1
	}
	key := sha256.Sum256([]byte(hex.EncodeToString([]byte(user)) + "\x00" + want + "\x00" + got))
	now := time.Now()
	p.mu.Lock()
	exp, hit := p.ok[key]
	p.mu.Unlock()
	if hit && now.Before(exp) {
		return true
	}
	release, err := guard.slot(ctx)
	if err != nil {
		return false
	}
	err = bcrypt.CompareHashAndPassword([]byte(want), []byte(got))
	release()
	if err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ok == nil || len(p.ok) >= passwordCacheMax {
		p.ok = make(map[[32]byte]time.Time) // simple and bounded: start over
	}
	p.ok[key] = now.Add(passwordCacheTTL)
	return true
}
