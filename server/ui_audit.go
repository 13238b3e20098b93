package server

// The dashboard's audit page (doc/dashboard.md): the audit log (audit.go)
// newest first, a page at a time, with the API's filters.

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/server/audit"
)

// auditPageSize is how many entries the audit page shows at once.
const auditPageSize = 50

type auditPage struct {
	Disabled           bool
	Max                int
	Account, Namespace string
	Rows               []auditRow
	NewestURL          string
	OlderURL           string
}

type auditRow struct {
	audit.Entry
	Ago, When string
	Target    []auditKV
}

type auditKV struct{ K, V string }

func (d *dashboard) audit(c *gin.Context) {
	p := auditPage{Account: c.Query("account"), Namespace: c.Query("namespace"), Max: d.s.cfg.Kairos.AuditMaxEntries}
	if p.Max <= 0 {
		p.Max = audit.DefaultMaxEntries
	}
	if d.s.audit == nil {
		p.Disabled = true
		d.render(c, http.StatusOK, "audit", "Audit log", "audit", p)
		return
	}
	q, err := auditQuery(c)
	if err != nil {
		d.fail(c, err)
		return
	}
	if q.Limit == 0 {
		q.Limit = auditPageSize
	}
	entries, next, err := d.s.audit.List(c.Request.Context(), q)
	if err != nil {
		d.fail(c, err)
		return
	}
	for _, e := range entries {
		r := auditRow{Entry: e, Ago: ago(e.Time), When: when(e.Time)}
		for k, v := range e.Target {
			r.Target = append(r.Target, auditKV{k, v})
		}
		slices.SortFunc(r.Target, func(a, b auditKV) int { return auditKeyRank(a.K) - auditKeyRank(b.K) })
		p.Rows = append(p.Rows, r)
	}
	link := func(before int64) string {
		v := url.Values{}
		if p.Account != "" {
			v.Set("account", p.Account)
		}
		if p.Namespace != "" {
			v.Set("namespace", p.Namespace)
		}
		if before > 0 {
			v.Set("before", strconv.FormatInt(before, 10))
		}
		if len(v) == 0 {
			return "/ui/audit"
		}
		return "/ui/audit?" + v.Encode()
	}
	if q.Before > 0 {
		p.NewestURL = link(0)
	}
	if next > 0 {
		p.OlderURL = link(next)
	}
	d.render(c, http.StatusOK, "audit", "Audit log", "audit", p)
}

// auditKeyRank orders a target's fields from the widest to the narrowest.
func auditKeyRank(k string) int {
	if i := slices.Index([]string{"pool", "namespace", "queue", "job_id", "name", "token", "action"}, k); i >= 0 {
		return i
	}
	return 100
}
