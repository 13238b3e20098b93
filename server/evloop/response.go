package evloop

import (
	"net/http"
	"strconv"
)

// JSONContentType is the Content-Type of the answers with a body, as gin
// writes it.
const JSONContentType = "application/json; charset=utf-8"

// AppendResponse appends a whole HTTP/1.1 response as net/http writes
// gin's: a JSON body, or none for a 204; retryAfter > 0 adds Retry-After
// (seconds); traceParent and traceState, when not empty, add the W3C
// trace context headers (a consumed job's); closes adds Connection: close,
// where net/http writes it (Item.Close).
func AppendResponse(b []byte, code, retryAfter int, traceParent, traceState string, closes bool, reqID, date, body []byte) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	// net/http writes the handler's headers sorted by name.
	if code != http.StatusNoContent {
		b = append(b, "\r\nContent-Type: "+JSONContentType...)
	}
	if retryAfter > 0 {
		b = append(b, "\r\nRetry-After: "...)
		b = strconv.AppendInt(b, int64(retryAfter), 10)
	}
	if traceParent != "" {
		b = append(b, "\r\nTraceparent: "...)
		b = append(b, traceParent...)
	}
	if traceState != "" {
		b = append(b, "\r\nTracestate: "...)
		b = append(b, traceState...)
	}
	b = append(b, "\r\nX-Request-Id: "...)
	b = append(b, reqID...)
	b = append(b, "\r\nDate: "...)
	b = append(b, date...)
	if code != http.StatusNoContent {
		b = append(b, "\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
	}
	if closes {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}
