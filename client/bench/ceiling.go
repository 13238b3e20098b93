package bench

import (
	"net/http"
	"strings"
	"sync/atomic"
)

// Ceiling is a do-nothing server of the lmstfy API: it answers publish,
// bulk publish, consume, ACK and size with canned responses of the right
// shape, storing nothing. Benchmarked the same way as a real server, it
// shows what the machine and the load generator allow.
type Ceiling struct{ n atomic.Int64 }

var (
	ceilPublished = []byte(`{"job_id":"01M7Z12284MKPEZK2N8C000000","msg":"published"}`)
	ceilJob       = []byte(`{"attributes":null,"data":"eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4","elapsed_ms":1,"job_id":"01M7Z12284MKPEZK2N8C000000","msg":"new job","namespace":"bench","queue":"bench","remain_tries":2,"ttl":3600}`)
	ceilSize      = []byte(`{"namespace":"bench","queue":"bench","size":0}`)
	ceilBulk      = []byte(`{"job_ids":["01M7Z12284MKPEZK2N8C000000"],"msg":"published"}`)
)

// ServeHTTP implements http.Handler.
func (c *Ceiling) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	switch {
	case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/bulk"):
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(ceilBulk)
	case r.Method == http.MethodPut:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(ceilPublished)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case strings.HasSuffix(r.URL.Path, "/size"):
		_, _ = w.Write(ceilSize)
	default:
		_, _ = w.Write(ceilJob)
	}
}

// Requests returns how many requests the ceiling server answered.
func (c *Ceiling) Requests() int64 { return c.n.Load() }
