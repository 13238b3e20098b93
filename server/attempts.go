package server

import (
	"encoding/json"
	"io"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/engine"
)

// workerHeader names the consumer of a consume in the attempt history of
// the jobs it gets (engine.WorkerName makes it safe to store). It changes
// no answer, so it is read on the event loops as on net/http.
const workerHeader = "X-Kairos-Worker"

// maxReleaseBody bounds a release's JSON body {"error":"…"}: room for
// engine.MaxErrorText bytes of text however it is escaped.
const maxReleaseBody = 64 << 10

var (
	errInvalidReleaseBody = badRequest(`invalid body: a JSON object {"error":"…"}`)
	errInvalidErrorText   = badRequest("invalid error: at most 4096 bytes")
)

// attemptJSON is one delivery of a job's history (engine.Attempt), keys in
// alphabetical order.
type attemptJSON struct {
	Delivery   int    `json:"delivery"`
	DurationMS int64  `json:"duration_ms"`
	EndMS      int64  `json:"end_ms"`
	Error      string `json:"error"`
	Outcome    string `json:"outcome"`
	StartMS    int64  `json:"start_ms"`
	Worker     string `json:"worker"`
}

// newAttempts renders a job's history; an in-flight delivery's duration
// runs to now.
func newAttempts(as []engine.Attempt, now time.Time) []attemptJSON {
	out := make([]attemptJSON, len(as))
	for i, a := range as {
		out[i] = attemptJSON{Delivery: a.Delivery, EndMS: unixMS(a.End), Error: a.Error, Outcome: a.Outcome,
			StartMS: unixMS(a.Start), Worker: a.Worker}
		switch {
		case a.Start.IsZero():
		case !a.End.IsZero():
			out[i].DurationMS = a.End.Sub(a.Start).Milliseconds()
		default:
			out[i].DurationMS = max(0, now.Sub(a.Start).Milliseconds())
		}
	}
	return out
}

// releaseError reads a release's error text: the error query parameter,
// else a JSON body {"error":"…"} (an empty body is none). A text longer
// than engine.MaxErrorText is cut there (at a character boundary): a
// consumer's nack must not fail for the length of its stack trace.
func releaseError(c *gin.Context) (string, error) {
	if v, ok := getQuery(c, "error"); ok {
		t, _ := engine.ErrorText(v)
		return t, nil
	}
	if c.Request.Body == nil || c.Request.ContentLength == 0 {
		return "", nil
	}
	b, err := io.ReadAll(io.LimitReader(c.Request.Body, maxReleaseBody+1))
	if err != nil {
		return "", errInvalidReleaseBody
	}
	if len(b) > maxReleaseBody {
		return "", errInvalidReleaseBody
	}
	if len(b) == 0 {
		return "", nil
	}
	var body struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(b, &body); err != nil || body.Error == nil {
		return "", errInvalidReleaseBody
	}
	t, _ := engine.ErrorText(*body.Error)
	return t, nil
}
