package server

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Query parameters are parsed strictly, as lmstfy does: unsigned decimal
// (strconv.ParseUint) with the parameter's bit size, so negative,
// non-numeric, empty and overflowing values are refused with a
// parameter-specific 400. An absent parameter takes its default.

// queryUint parses an optional unsigned parameter of the given bit size.
func queryUint(c *gin.Context, name string, bits int, def uint64, bad *apiError) (uint64, error) {
	v, ok := getQuery(c, name)
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, bits)
	if err != nil {
		return 0, bad
	}
	return n, nil
}

// queryInt64 parses an optional signed 64-bit parameter that must be at
// least min (the dead letter's limit and ttl).
func queryInt64(c *gin.Context, name string, def, min int64, bad *apiError) (int64, error) {
	v, ok := getQuery(c, name)
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min {
		return 0, bad
	}
	return n, nil
}

// secs converts whole seconds to a Duration.
func secs(n uint64) time.Duration { return time.Duration(n) * time.Second }

// maxDurationSeconds is the largest number of seconds a Duration holds.
const maxDurationSeconds = math.MaxInt64 / int64(time.Second)

// getQuery is gin's c.GetQuery (the first value of a query parameter)
// without building the url.Values map that gin caches per request: a
// query of plain name=value pairs (no '%', '+' or ';', so that unescaping
// changes nothing and no pair is refused) is scanned in place; any other
// query goes to gin, which parses it with url.ParseQuery. Both answer the
// same (FuzzQueryParam); the hot routes' queries are all plain.
func getQuery(c *gin.Context, name string) (string, bool) {
	raw := c.Request.URL.RawQuery
	if v, ok, plain := plainQuery(raw, name); plain {
		return v, ok
	}
	return c.GetQuery(name)
}

// queryString is getQuery's value alone ("" when absent), as c.Query.
func queryString(c *gin.Context, name string) string {
	v, _ := getQuery(c, name)
	return v
}

// maxPlainQuery bounds the queries plainQuery scans: far fewer pairs than
// url.ParseQuery's limit on parameters (GODEBUG urlmaxqueryparams, 10,000
// by default), beyond which it refuses the whole query.
const maxPlainQuery = 2048

// plainQuery finds name's first value in raw when raw is plain (see
// getQuery); plain is false, and the other results meaningless, otherwise.
func plainQuery(raw, name string) (value string, found, plain bool) {
	if len(raw) > maxPlainQuery || strings.ContainsAny(raw, "%+;") {
		return "", false, false
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if k, v, _ := strings.Cut(pair, "="); k == name && pair != "" {
			return v, true, true
		}
	}
	return "", false, true
}

// The Kairos extensions of the public API (doc/API.md, "Kairos
// extensions"): receipts, release (nack), touch, millisecond parameters,
// due_at, priority, idempotency keys, pause/resume, dead-letter browsing and
// job inspection. Each is a new route or a new optional parameter; without
// them every lmstfy route answers exactly as before. Every engine has the
// extensions (engine.Extensions is part of engine.Engine). Each extension
// sits in the file of the resource it extends (publish.go, consume.go,
// ack.go, queue.go, job.go, deadletter.go); what several of them share
// (the opt-in header, limits, errors, millisecond parameters) is here.

// extHeader opts a request into the Kairos fields of lmstfy's job
// responses: receipt in consume, state and friends in peek and peek job.
// Without it those responses stay lmstfy's byte for byte, so that strict
// lmstfy clients (and the compatibility tests) see no new key.
const extHeader = "X-Kairos-Extensions"

// Limits of the extension parameters.
const (
	// maxParamMS is the largest millisecond delay, TTL or TTR: what the
	// second forms allow (uint32 seconds).
	maxParamMS = math.MaxUint32 * 1000
	// maxJobKey is the longest idempotency key, in bytes.
	maxJobKey = 256
	// maxDeadPage is the largest page of the dead-letter listing.
	maxDeadPage = 100
	// defaultDeadPage is its default page size.
	defaultDeadPage = 20
)

// Errors of the extensions.
var (
	errStaleReceipt     = newAPIError(http.StatusConflict, "error", "stale receipt")
	errKeyNotFound      = newAPIError(http.StatusNotFound, "error", "job key not found")
	errMissingReceipt   = badRequest("missing receipt")
	errInvalidReceipt   = badRequest("invalid receipt")
	errInvalidDelayMS   = badRequest("invalid delay_ms")
	errInvalidTTLMS     = badRequest("invalid ttl_ms")
	errInvalidTTRMS     = badRequest("invalid ttr_ms")
	errInvalidTimeoutMS = badRequest("invalid timeout_ms")
	errInvalidDueAt     = badRequest("invalid due_at")
	errDueAtConflict    = badRequest("due_at conflicts with delay")
	errInvalidPriority  = badRequest("invalid priority")
	errInvalidGroup     = badRequest("invalid group")
	errInvalidJobKey    = badRequest("invalid job_key")
	errJobKeyConflict   = badRequest("job_key and Idempotency-Key differ")
	errBulkJobKey       = badRequest("job_key is not allowed in bulk publish")
	errInvalidKeepTry   = badRequest("invalid keep_try")
	errInvalidOffset    = badRequest("invalid offset")
	errInvalidDeadOrder = badRequest("invalid order: oldest or newest")
	errInvalidReason    = badRequest("invalid reason: nacked, ttr_expired or webhook_failed")
)

// wantsExt reports whether the request asked for the Kairos fields
// (X-Kairos-Extensions: 1, true or yes, any case).
func wantsExt(c *gin.Context) bool { return extOn(c.GetHeader(extHeader)) }

// extOn reports whether a value of extHeader asks for the Kairos fields;
// the event loops ask it too (fastpath.go).
func extOn(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// validReceipt reports whether r is a receipt as the API writes them: 16
// hex digits (parseReceipt's check, the event loops' too).
func validReceipt(r string) bool {
	return len(r) == 16 && strings.Trim(r, "0123456789abcdefABCDEF") == ""
}

// queryMS parses an optional millisecond parameter (unsigned decimal, at
// most maxParamMS) and reports whether it was given.
func queryMS(c *gin.Context, name string, bad *apiError) (time.Duration, bool, error) {
	v, ok := getQuery(c, name)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > maxParamMS {
		return 0, true, bad
	}
	return time.Duration(n) * time.Millisecond, true, nil
}
