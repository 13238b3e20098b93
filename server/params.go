package server

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/engine"
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

// publishParams are the query parameters of the publish routes.
type publishParams struct {
	delay, ttl uint64 // seconds
	tries      uint16
	versioned  bool
	attributes map[string]string
}

// parsePublish validates publish parameters in lmstfy's order: delay,
// ttl, ttl ≥ delay, tries. Attributes are collected by parseAttributes,
// after the body has been read.
func (s *Server) parsePublish(c *gin.Context) (publishParams, error) {
	var p publishParams
	var err error
	if p.delay, err = queryUint(c, "delay", 32, s.def.delay, errInvalidDelay); err != nil {
		return p, err
	}
	if p.ttl, err = queryUint(c, "ttl", 32, s.def.ttl, errInvalidTTL); err != nil {
		return p, err
	}
	if p.ttl > 0 && p.ttl < p.delay {
		return p, errTTLShorter
	}
	tries, err := queryUint(c, "tries", 16, s.def.tries, errInvalidTries)
	if err != nil {
		return p, err
	}
	if tries == 0 {
		return p, errZeroTries
	}
	p.tries = uint16(tries)
	return p, nil
}

// Attribute limits (lmstfy, spec 3.2).
const (
	maxAttributes        = 16
	maxAttributeKeyLen   = 32
	maxAttributeValueLen = 128
	attributePrefix      = "Job-Attr-"
)

// parseAttributes reads Enable-Job-Version and the Job-Attr-* headers:
// only with the version header (value "YES", any case) are attributes
// collected and the job versioned. Keys are what follows "Job-Attr-" in the
// canonical header name, truncated to 32 bytes and lower-cased; values are
// the first value when non-empty, truncated to 128 bytes.
func parseAttributes(c *gin.Context, p *publishParams) error {
	if !strings.EqualFold(c.GetHeader("Enable-Job-Version"), "YES") {
		return nil
	}
	p.versioned = true
	var attrs map[string]string
	for k, v := range c.Request.Header {
		if !strings.HasPrefix(k, attributePrefix) || len(v) == 0 || v[0] == "" {
			continue
		}
		k = k[len(attributePrefix):]
		if len(k) > maxAttributeKeyLen {
			k = k[:maxAttributeKeyLen]
		}
		val := v[0]
		if len(val) > maxAttributeValueLen {
			val = val[:maxAttributeValueLen]
		}
		if attrs == nil {
			attrs = make(map[string]string)
		}
		attrs[strings.ToLower(k)] = val
	}
	if len(attrs) > maxAttributes {
		return errTooManyAttrs
	}
	p.attributes = attrs
	return nil
}

// readBody reads at most limit bytes of the request body: errTooLarge when
// there are more (without reading them), errReadBody when reading fails.
func readBody(c *gin.Context, limit int64, errTooLarge *apiError) ([]byte, error) {
	r := c.Request
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil
	}
	// Preallocate what Content-Length announces (+1 to see EOF without
	// growing), but never more than one job's worth up front: a client
	// announcing 64 MiB must send them before they are allocated.
	capHint := int64(512)
	if r.ContentLength > 0 {
		capHint = min(r.ContentLength, engine.MaxBodySize) + 1
	}
	body := http.MaxBytesReader(c.Writer, r.Body, limit)
	// A body that outgrows buf is read into chunks (doubling up to one
	// job's size) joined once at the end: a growing slice would allocate
	// about five times a large bulk body, a chunk list twice.
	buf := make([]byte, 0, capHint)
	var full [][]byte
	size := 0
	for {
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, errTooLarge
			}
			return nil, errReadBody
		}
		if len(buf) == cap(buf) {
			full = append(full, buf)
			size += len(buf)
			buf = make([]byte, 0, min(max(2*len(buf), 4096), engine.MaxBodySize))
		}
	}
	if full == nil {
		return buf, nil
	}
	out := make([]byte, 0, size+len(buf))
	for _, b := range full {
		out = append(out, b...)
	}
	return append(out, buf...), nil
}

// maxBulkBody caps a bulk publish body: 64 jobs of 1 MiB plus room for
// the commas, brackets and whitespace between them.
const maxBulkBody = engine.MaxBulkPublish*engine.MaxBodySize + 64<<10

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
