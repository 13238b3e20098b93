package server

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// appendConsumed appends consumedBody's JSON, as json.Marshal writes it,
// to b. The plain jobs of the consume fast path (no attributes, names and
// strings of printable ASCII that JSON writes as they are) are written
// directly, without reflection; anything else goes through json.Marshal
// (TestAppendConsumedMatchesMarshal holds the two equal).
func appendConsumed(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case jobResponse:
		if out, ok := appendJobResponse(b, &v); ok {
			return out, nil
		}
	case []jobResponse:
		if v == nil {
			break
		}
		out := append(b, '[')
		ok := true
		for i := range v {
			if i > 0 {
				out = append(out, ',')
			}
			if out, ok = appendJobResponse(out, &v[i]); !ok {
				break
			}
		}
		if ok {
			return append(out, ']'), nil
		}
		b = out[:len(b)]
	}
	j, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, j...), nil
}

// appendJobResponse appends r as json.Marshal writes it, or reports false
// (b's content past its length then undefined) when r has something only
// json.Marshal writes right: attributes, or a string with a byte it
// escapes.
func appendJobResponse(b []byte, r *jobResponse) ([]byte, bool) {
	if r.Attributes != nil || r.Data == nil {
		return b, false
	}
	for _, s := range [...]string{r.Group, r.JobID, r.Msg, r.Namespace, r.Queue, r.Receipt, r.TraceParent, r.TraceState} {
		if !plainJSON(s) {
			return b, false
		}
	}
	b = append(b, `{"attributes":null,"data":"`...)
	b = base64.StdEncoding.AppendEncode(b, r.Data)
	b = append(b, `","elapsed_ms":`...)
	b = strconv.AppendInt(b, r.ElapsedMS, 10)
	if r.Group != "" {
		b = append(append(append(b, `,"group":"`...), r.Group...), '"')
	}
	b = append(append(append(b, `,"job_id":"`...), r.JobID...), '"')
	if r.Msg != "" {
		b = append(append(append(b, `,"msg":"`...), r.Msg...), '"')
	}
	b = append(append(append(b, `,"namespace":"`...), r.Namespace...), '"')
	b = append(append(append(b, `,"queue":"`...), r.Queue...), '"')
	if r.Receipt != "" {
		b = append(append(append(b, `,"receipt":"`...), r.Receipt...), '"')
	}
	b = append(b, `,"remain_tries":`...)
	b = strconv.AppendUint(b, uint64(r.RemainTries), 10)
	if r.TraceParent != "" {
		b = append(append(append(b, `,"traceparent":"`...), r.TraceParent...), '"')
	}
	if r.TraceState != "" {
		b = append(append(append(b, `,"tracestate":"`...), r.TraceState...), '"')
	}
	b = append(b, `,"ttl":`...)
	b = strconv.AppendInt(b, r.TTL, 10)
	return append(b, '}'), true
}

// plainJSON reports whether json.Marshal writes s as it is between its
// quotes: printable ASCII without '"', '\\' and the characters it escapes
// for HTML ('<', '>', '&').
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
