package rdb

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// Packed entries are the members of ready lists, timers and dead letters:
// tries as a little-endian uint16, the ID's length as a little-endian
// uint16, then the ID (the bytes of Redis's struct.pack("HHc0", …)). Lua
// decodes them with string.byte/string.sub, so scripts run on miniredis too.

var errBadEntry = errors.New("rdb: malformed packed entry")

// packEntry encodes tries and id.
func packEntry(tries uint16, id string) string {
	b := make([]byte, 4+len(id))
	binary.LittleEndian.PutUint16(b[0:2], tries)
	binary.LittleEndian.PutUint16(b[2:4], uint16(len(id)))
	copy(b[4:], id)
	return string(b)
}

// unpackEntry decodes an entry made by packEntry.
func unpackEntry(e string) (tries uint16, id string, err error) {
	if len(e) < 4 {
		return 0, "", errBadEntry
	}
	tries = binary.LittleEndian.Uint16([]byte(e[0:2]))
	n := int(binary.LittleEndian.Uint16([]byte(e[2:4])))
	if len(e) != 4+n {
		return 0, "", errBadEntry
	}
	return tries, e[4:], nil
}

// payloadV1 is the stored value of a v1 job (lmstfy PR #226): the body as
// base64 and the attributes. v0 jobs store the raw body.
type payloadV1 struct {
	Body       []byte            `json:"body"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// encodePayload returns the value stored for a job body.
func encodePayload(version int, body []byte, attrs map[string]string) ([]byte, error) {
	if version == 0 {
		return body, nil
	}
	return json.Marshal(payloadV1{Body: body, Attributes: attrs})
}

// decodePayload reverses encodePayload; the version comes from the job ID.
func decodePayload(version int, v []byte) (body []byte, attrs map[string]string, err error) {
	if version == 0 {
		return v, nil, nil
	}
	var p payloadV1
	if err := json.Unmarshal(v, &p); err != nil {
		return nil, nil, fmt.Errorf("rdb: decode v1 payload: %w", err)
	}
	return p.Body, p.Attributes, nil
}

// headerSize is the length of the header before every stored payload
// (scripts.go documents the layout).
const headerSize = 22

// header is a decoded job header.
type header struct {
	format     byte
	state      byte
	tries      uint16
	deliveries uint16
	priority   uint8
	reason     uint8
	timeMS     int64
	nonce      [8]byte
}

var deadReasons = map[uint8]engine.DeadReason{1: engine.ReasonTTRExpired, 2: engine.ReasonNacked, 3: engine.ReasonWebhookFailed}

// reasonCode is the header code of a dead reason.
func reasonCode(r engine.DeadReason) int {
	for c, v := range deadReasons {
		if v == r {
			return int(c)
		}
	}
	return 2
}

// Header byte 1 is the value's format: the payload follows the header
// (formatPlain), or a trace context does and then the payload
// (formatTraced). Only a publish writes it: scripts rewrite the header
// from byte 2 on. Flag formatGrouped (formats 5 and 6) says the job's
// group comes first after the header (issue #32): its length L (1..64) as
// one byte, then its name, then the trace context (format 6) and payload.
const (
	formatPlain   = 1
	formatTraced  = 2
	formatGrouped = 4
)

// The trace context of a formatTraced value, between the header and the
// payload: len(traceparent) as one byte, the traceparent,
// len(tracestate) as a little-endian uint16, the tracestate.

// traceSize is the length of the trace block of traceparent tp and
// tracestate ts, 0 without a traceparent.
func traceSize(tp, ts string) int {
	if tp == "" {
		return 0
	}
	return 1 + len(tp) + 2 + len(ts)
}

// newValue is the stored value of an ungrouped job just published
// (newGroupedValue).
func newValue(ready bool, tries uint16, priority int, dueMS int64, tp, ts string, payload []byte) []byte {
	return newGroupedValue(ready, tries, priority, dueMS, "", tp, ts, payload)
}

// groupSize is the length of the group block of group g, 0 for the
// default group.
func groupSize(g string) int {
	if g == "" {
		return 0
	}
	return 1 + len(g)
}

// newGroupedValue is the stored value of a job just published: its header
// (ready or delayed until due), its group when g is not empty, its trace
// context when tp is not empty, then the payload, in one allocation. An
// ungrouped value is byte for byte what it was before groups.
func newGroupedValue(ready bool, tries uint16, priority int, dueMS int64, g, tp, ts string, payload []byte) []byte {
	gn := groupSize(g)
	tn := traceSize(tp, ts)
	v := make([]byte, headerSize+gn+tn+len(payload))
	v[0] = formatPlain
	v[1] = 'r'
	if !ready {
		v[1] = 'd'
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], uint64(dueMS))
		copy(v[8:14], t[:6])
	}
	binary.LittleEndian.PutUint16(v[2:4], tries)
	v[6] = byte(priority)
	if tn > 0 {
		v[0] = formatTraced
		b := v[headerSize+gn:]
		b[0] = byte(len(tp))
		n := 1 + copy(b[1:], tp)
		binary.LittleEndian.PutUint16(b[n:], uint16(len(ts)))
		copy(b[n+2:], ts)
	}
	if gn > 0 {
		v[0] |= formatGrouped
		v[headerSize] = byte(len(g))
		copy(v[headerSize+1:], g)
	}
	copy(v[headerSize+gn+tn:], payload)
	return v
}

// splitGroup splits the group off the part of a value after its header,
// by the value's format: it returns the group ("" for an ungrouped
// value), the format without the group flag and what follows the group.
func splitGroup(format byte, rest []byte) (g string, f byte, after []byte, err error) {
	if format&formatGrouped == 0 {
		return "", format, rest, nil
	}
	if len(rest) < 1 || rest[0] == 0 || len(rest) < 1+int(rest[0]) {
		return "", 0, nil, errBadEntry
	}
	n := 1 + int(rest[0])
	return string(rest[1:n]), format &^ formatGrouped, rest[n:], nil
}

// splitTrace splits the part of a value after its header into the trace
// context and the payload, by the value's format; a grouped value's group
// is skipped (splitGroup reads it).
func splitTrace(format byte, rest []byte) (tp, ts string, payload []byte, err error) {
	if format&formatGrouped != 0 {
		if _, format, rest, err = splitGroup(format, rest); err != nil {
			return "", "", nil, err
		}
	}
	switch format {
	case formatPlain:
		return "", "", rest, nil
	case formatTraced:
		if len(rest) < 1 {
			return "", "", nil, errBadEntry
		}
		n := 1 + int(rest[0])
		if len(rest) < n+2 {
			return "", "", nil, errBadEntry
		}
		m := n + 2 + int(binary.LittleEndian.Uint16(rest[n:]))
		if len(rest) < m {
			return "", "", nil, errBadEntry
		}
		return string(rest[1:n]), string(rest[n+2 : m]), rest[m:], nil
	}
	return "", "", nil, errBadEntry
}

// validFormat reports whether f is a value format this version writes.
func validFormat(f byte) bool {
	switch f {
	case formatPlain, formatTraced, formatPlain | formatGrouped, formatTraced | formatGrouped:
		return true
	}
	return false
}

// splitValue splits a stored value into its header and what follows it
// (the trace context, by h.format, and the payload).
func splitValue(v []byte) (header, []byte, error) {
	var h header
	if len(v) < headerSize || !validFormat(v[0]) {
		return h, nil, errBadEntry
	}
	h.format = v[0]
	h.state = v[1]
	h.tries = binary.LittleEndian.Uint16(v[2:4])
	h.deliveries = binary.LittleEndian.Uint16(v[4:6])
	h.priority = v[6]
	h.reason = v[7]
	var t [8]byte
	copy(t[:6], v[8:14])
	h.timeMS = int64(binary.LittleEndian.Uint64(t[:]))
	copy(h.nonce[:], v[14:22])
	return h, v[headerSize:], nil
}

// apply copies what the header says about a job into j.
func (h header) apply(j *engine.Job, now time.Time) {
	j.Tries = h.tries
	j.Deliveries = int(h.deliveries)
	j.Priority = int(h.priority)
	switch h.state {
	case 'r':
		j.State = engine.StateReady
	case 'd':
		// The pump leaves 'd' on jobs it makes ready.
		if h.timeMS > now.UnixMilli() {
			j.State = engine.StateDelayed
			j.DueAt = time.UnixMilli(h.timeMS)
		} else {
			j.State = engine.StateReady
		}
	case 'f':
		j.State = engine.StateInFlight
		j.DueAt = time.UnixMilli(h.timeMS)
	case 'x':
		j.State = engine.StateDead
		j.DeadReason = deadReasons[h.reason]
		j.DeadAt = time.UnixMilli(h.timeMS)
	}
}
