package engine

import (
	"strings"
	"time"
	"unicode/utf8"
)

// MaxErrorText is the most bytes of error text a release (nack) or a
// webhook failure records: longer texts are cut at a character boundary
// (ErrorText), so a consumer's whole panic stack never fails its nack.
const MaxErrorText = 4096

// MaxAttempts is how many deliveries a job's history keeps: the last ones.
const MaxAttempts = 16

// MaxWorkerName is the most bytes of a worker name (WorkerName).
const MaxWorkerName = 64

// Attempt outcomes. An ACKed job is deleted with its history, so none
// says "acked".
const (
	// OutcomeInFlight is the current delivery.
	OutcomeInFlight = "in_flight"
	// OutcomeReleased: the consumer handed the job back keeping its try.
	OutcomeReleased = "released"
	// OutcomeNacked: the consumer handed the job back spending the try
	// (release without keep_try): it failed.
	OutcomeNacked = "nacked"
	// OutcomeTTRExpired: no ACK nor release before the TTR ran out.
	OutcomeTTRExpired = "ttr_expired"
	// OutcomeWebhookFailed: the webhook answered an error or could not be
	// reached; the error says which.
	OutcomeWebhookFailed = "webhook_failed"
)

// Attempt is one delivery of a job as its history keeps it.
type Attempt struct {
	// Delivery is the delivery's number (1 = the first).
	Delivery int
	// Start is when the job was handed out (zero when unknown: a delivery
	// of a job consumed before the history existed); End when the
	// delivery ended (zero while in flight).
	Start, End time.Time
	// Outcome is one of the Outcome constants.
	Outcome string
	// Worker is the name the consumer gave (the X-Kairos-Worker header),
	// "webhook" for a webhook delivery, else "".
	Worker string
	// Error is what the consumer (or the webhook's answer) said, else "".
	Error string
}

// ErrorText bounds an error text to MaxErrorText bytes, cut at a UTF-8
// character boundary, and reports whether it cut.
func ErrorText(s string) (string, bool) {
	if len(s) <= MaxErrorText {
		return s, false
	}
	s = s[:MaxErrorText]
	// Drop the bytes of a character the cut split (at most 3).
	for i := 0; i < 3 && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s, true
}

// WorkerName makes a consumer's worker name safe to store: at most
// MaxWorkerName bytes of letters, digits and . _ - : @ /, any other byte
// replaced by '_' (the history's fields are separated by '|', and a name
// is shown on the dashboard).
func WorkerName(s string) string {
	if len(s) > MaxWorkerName {
		s = s[:MaxWorkerName]
	}
	ok := true
	for i := 0; i < len(s); i++ {
		if !workerByte(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if workerByte(s[i]) {
			b.WriteByte(s[i])
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func workerByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == ':' || c == '@' || c == '/'
}
