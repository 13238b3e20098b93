package engine

// TraceParentLen is the length of a W3C traceparent of version 00:
// "00-" + 32 hex digits (trace ID) + "-" + 16 hex digits (parent span ID)
// + "-" + 2 hex digits (flags).
const TraceParentLen = 55

// MaxTraceState is the longest tracestate stored with a job: the W3C
// recommends propagating at least 512 characters; a longer one is dropped.
const MaxTraceState = 512

// ValidTraceParent reports whether s is a W3C traceparent Kairos stores:
// the 55-character form (lower-case hex, a version other than ff, a trace
// ID and a parent ID that are not all zeros). A traceparent that is not
// valid is ignored, as W3C Trace Context asks of receivers: the job is
// stored without a trace context. It does not allocate: the publish path
// calls it on every request that carries the header.
func ValidTraceParent(s string) bool {
	if len(s) != TraceParentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if s[0] == 'f' && s[1] == 'f' {
		return false
	}
	zeroTrace, zeroParent := true, true
	for i := 0; i < TraceParentLen; i++ {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
		if c != '0' {
			switch {
			case i > 2 && i < 35:
				zeroTrace = false
			case i > 35 && i < 52:
				zeroParent = false
			}
		}
	}
	return !zeroTrace && !zeroParent
}

// ValidTraceState reports whether s can be stored as a job's tracestate:
// at most MaxTraceState printable ASCII characters (what a header value
// can carry back unchanged). Kairos passes it on without reading it.
func ValidTraceState(s string) bool {
	if len(s) > MaxTraceState {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
