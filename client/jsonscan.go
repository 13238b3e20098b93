package client

import (
	"encoding/base64"
	"strconv"
	"time"
)

// A consume's answer is decoded by hand, as the server's fast path renders
// it, rather than through encoding/json's reflection (twice: Job's
// UnmarshalJSON decodes a wireJob): the job object of a consume (and the
// job_id of a publish's answer) is flat, its strings need no unescaping
// and its numbers are integers. Anything else — an escaped string, an
// attribute, a nested value, a number with a fraction — makes the scanner
// give up, and encoding/json decodes the answer as before; so the result
// is always json.Unmarshal's (TestScanJobMatchesJSON).

// scanObject calls member for each member of the flat JSON object data,
// with the raw value: a string's content (without its quotes), or the
// literal (number, true, false, null). It reports false when data is not
// such an object (the caller then uses encoding/json) or member does.
func scanObject(data []byte, member func(key, val []byte, str bool) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		key, next, ok := scanString(data, i)
		if !ok {
			return false
		}
		i = skipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		if i >= len(data) {
			return false
		}
		var val []byte
		str := data[i] == '"'
		if str {
			if val, next, ok = scanString(data, i); !ok {
				return false
			}
		} else {
			j := i
			for j < len(data) && (data[j] >= '0' && data[j] <= '9' || data[j] == '-' || data[j] >= 'a' && data[j] <= 'z') {
				j++
			}
			val, next = data[i:j], j
			if len(val) == 0 {
				return false // an object, an array: not flat
			}
		}
		if !member(key, val, str) {
			return false
		}
		i = skipSpace(data, next)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// scanString reads the string at data[i] (its opening quote) and returns
// its content and the index after its closing quote; false for an escaped
// string or a control character (encoding/json decides those).
func scanString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			// Escapes, and non-ASCII (encoding/json replaces invalid
			// UTF-8): encoding/json's to decode.
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// scanInt parses a JSON integer literal as encoding/json does into an
// integer of bits bits.
func scanInt(val []byte, str bool, bits int) (int64, bool) {
	if str || len(val) == 0 || string(val) == "-0" {
		return 0, false
	}
	if len(val) > 1 && val[0] == '0' || len(val) > 2 && val[0] == '-' && val[1] == '0' {
		return 0, false // not JSON
	}
	n, err := strconv.ParseInt(string(val), 10, bits)
	return n, err == nil
}

// jobKeys are the members scanJob reads, each at most once (seen's bits).
var jobKeys = [...]string{"job_id", "namespace", "queue", "receipt", "state", "dead_reason", "traceparent",
	"tracestate", "group", "data", "ttl", "elapsed_ms", "due_at_ms", "dead_at_ms", "remain_tries", "priority",
	"deliveries", "msg"}

// scanJob decodes a job object as Job.UnmarshalJSON does, or reports false.
// Its strings share one copy of data (a consume's answer is all job), so
// that a job costs three allocations: the Job, that copy and the body.
func scanJob(data []byte, j *Job) bool {
	var out Job
	var dueMS, deadMS int64
	var seen uint32
	var text string // data as a string, made at the first string member
	// str returns val, a part of data, as a part of text.
	str := func(val []byte) string {
		if text == "" {
			text = string(data)
		}
		// val is data[off:off+len(val)], sliced without a capacity.
		off := cap(data) - cap(val)
		return text[off : off+len(val)]
	}
	ok := scanObject(data, func(key, val []byte, isStr bool) bool {
		k := -1
		for i, name := range jobKeys {
			if string(key) == name {
				k = i
				break
			}
		}
		switch {
		case k < 0:
			// "attributes" (only null is flat) or an unknown member:
			// encoding/json's.
			if string(key) == "attributes" && !isStr && string(val) == "null" {
				return true
			}
			return false
		case seen&(1<<k) != 0:
			return false // a repeated key: encoding/json's
		}
		seen |= 1 << k
		if !isStr && string(val) == "null" {
			// encoding/json sets a slice (data) to nil and leaves a
			// string or a number as it is.
			if string(key) == "data" {
				out.Body = nil
			}
			return true
		}
		var n int64
		var good bool
		switch string(key) {
		case "job_id", "namespace", "queue", "receipt", "state", "dead_reason", "traceparent", "tracestate", "group":
			if !isStr {
				return false
			}
			s := str(val)
			switch string(key) {
			case "job_id":
				out.ID = s
			case "namespace":
				out.Namespace = s
			case "queue":
				out.Queue = s
			case "receipt":
				out.Receipt = s
			case "state":
				out.State = s
			case "dead_reason":
				out.DeadReason = s
			case "traceparent":
				out.TraceParent = s
			case "tracestate":
				out.TraceState = s
			case "group":
				out.Group = s
			}
		case "data":
			if !isStr {
				return false
			}
			b := make([]byte, base64.StdEncoding.DecodedLen(len(val)))
			m, err := base64.StdEncoding.Decode(b, val)
			if err != nil {
				return false
			}
			out.Body = b[:m]
		case "ttl", "elapsed_ms", "due_at_ms", "dead_at_ms":
			if n, good = scanInt(val, isStr, 64); !good {
				return false
			}
			switch string(key) {
			case "ttl":
				out.TTL = time.Duration(n) * time.Second
			case "elapsed_ms":
				out.ElapsedMS = n
			case "due_at_ms":
				dueMS = n
			case "dead_at_ms":
				deadMS = n
			}
		case "remain_tries", "priority", "deliveries":
			if n, good = scanInt(val, isStr, strconv.IntSize); !good {
				return false
			}
			switch string(key) {
			case "remain_tries":
				out.RemainTries = int(n)
			case "priority":
				out.Priority = int(n)
			case "deliveries":
				out.Deliveries = int(n)
			}
		case "msg":
			// A consume's "new job": encoding/json ignores it (no
			// field of Job matches it in any case). Without this
			// case every consume fell back to encoding/json, twice
			// (Job.UnmarshalJSON): 12 % of the Worker's CPU.
			if !isStr {
				return false
			}
		}
		return true
	})
	if !ok {
		return false
	}
	out.DueAt, out.DeadAt = unixMS(dueMS), unixMS(deadMS)
	*j = out
	return true
}

// scanJobID reads the job_id of a publish's answer ({"job_id":…,"msg":…}).
func scanJobID(data []byte) (string, bool) {
	var id string
	n := 0
	ok := scanObject(data, func(key, val []byte, str bool) bool {
		switch string(key) {
		case "job_id":
			if !str || n&1 != 0 {
				return false
			}
			n |= 1
			id = string(val)
		case "msg":
			if !str || n&2 != 0 {
				return false
			}
			n |= 2
		default:
			return false
		}
		return true
	})
	return id, ok && n&1 != 0
}

// scanJobIDs reads the job_ids of a bulk publish's answer
// ({"job_ids":[…],"msg":…}), as json.Unmarshal would into a []string, or
// reports false. The IDs share one copy of data.
func scanJobIDs(data []byte) ([]string, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	var ids []string
	var text string
	seen := 0
	for i = skipSpace(data, i+1); ; {
		key, next, ok := scanString(data, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return nil, false
		}
		i = skipSpace(data, i+1)
		switch string(key) {
		case "msg":
			if seen&2 != 0 {
				return nil, false
			}
			seen |= 2
			if _, next, ok = scanString(data, i); !ok {
				return nil, false
			}
			i = next
		case "job_ids":
			if seen&1 != 0 || i >= len(data) || data[i] != '[' {
				return nil, false
			}
			seen |= 1
			if text == "" {
				text = string(data)
			}
			ids = make([]string, 0, 64)
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == ']' {
				i++
				break
			}
			for {
				val, next, ok := scanString(data, i)
				if !ok {
					return nil, false
				}
				off := cap(data) - cap(val) // val is data[off:…]
				ids = append(ids, text[off:off+len(val)])
				i = skipSpace(data, next)
				if i >= len(data) {
					return nil, false
				}
				if data[i] == ']' {
					i++
					break
				}
				if data[i] != ',' {
					return nil, false
				}
				i = skipSpace(data, i+1)
			}
		default:
			return nil, false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return nil, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			if skipSpace(data, i+1) != len(data) || seen&1 == 0 {
				return nil, false
			}
			return ids, true
		default:
			return nil, false
		}
	}
}
