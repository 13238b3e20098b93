package rdb

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// FuzzUnpackEntry: unpackEntry never panics and accepts exactly what
// packEntry makes.
func FuzzUnpackEntry(f *testing.F) {
	for _, s := range []string{
		packEntry(1, "01J5Z8R6Q1X0V3M2B7K9C4D000"), packEntry(65535, ""), packEntry(0, "1"+strings.Repeat("Z", 26)),
		"", "\x01", "\x01\x00\x05\x00abc", "\x01\x00\x02\x00abc", "\xff\xff\xff\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, e string) {
		tries, id, err := unpackEntry(e)
		if err != nil {
			if err != errBadEntry { //nolint:errorlint // the package's own sentinel, returned as is
				t.Fatalf("unpackEntry(%q) = %v", e, err)
			}
			if len(e) >= 4 && len(e) == 4+int(e[2])+int(e[3])<<8 {
				t.Fatalf("unpackEntry refused the well-formed entry %q", e)
			}
			return
		}
		if packEntry(tries, id) != e {
			t.Fatalf("unpackEntry(%q) = %d, %q, which packs as %q", e, tries, id, packEntry(tries, id))
		}
	})
}

// FuzzPackEntry: every entry packEntry makes (IDs up to 65535 bytes)
// unpacks to its tries and ID.
func FuzzPackEntry(f *testing.F) {
	f.Add(uint16(1), "01J5Z8R6Q1X0V3M2B7K9C4D000")
	f.Add(uint16(0), "")
	f.Add(uint16(65535), "\x00\xff")
	f.Fuzz(func(t *testing.T, tries uint16, id string) {
		if len(id) > 65535 {
			return
		}
		gotTries, gotID, err := unpackEntry(packEntry(tries, id))
		if err != nil || gotTries != tries || gotID != id {
			t.Fatalf("unpackEntry(packEntry(%d, %q)) = %d, %q, %v", tries, id, gotTries, gotID, err)
		}
	})
}

// FuzzDecodePayload: decodePayload never panics; v0 payloads are the body
// itself; a v1 payload it accepts encodes back to an equivalent payload.
func FuzzDecodePayload(f *testing.F) {
	v1, _ := encodePayload(1, []byte("body"), map[string]string{"k": "v"})
	for _, s := range [][]byte{
		v1, []byte(`{"body":null}`), []byte(`{"body":"!!"}`), []byte(`{"attributes":{"a":1}}`), []byte(`null`),
		[]byte(`{"body":"aGk=","attributes":null,"extra":[1,2]}`), []byte("\xff"), nil,
	} {
		f.Add(1, s)
		f.Add(0, s)
	}
	f.Fuzz(func(t *testing.T, version int, v []byte) {
		body, attrs, err := decodePayload(version, v)
		if version == 0 {
			if err != nil || !bytes.Equal(body, v) || attrs != nil {
				t.Fatalf("v0 decodePayload(%q) = %q, %v, %v", v, body, attrs, err)
			}
			return
		}
		if err != nil {
			return
		}
		enc, err := encodePayload(1, body, attrs)
		if err != nil {
			t.Fatalf("encodePayload of a decoded payload: %v", err)
		}
		body2, attrs2, err := decodePayload(1, enc)
		if err != nil || !bytes.Equal(body2, body) || !maps.Equal(attrs2, attrs) {
			t.Fatalf("payload %q → %q, %v → %q → %q, %v, %v", v, body, attrs, enc, body2, attrs2, err)
		}
	})
}

// FuzzSplitValue: splitValue never panics, accepts only values with a
// whole header of format 1, 2, 5 or 6, splitTrace never panics on what follows
// it, and what it reads applies to a job without panicking.
func FuzzSplitValue(f *testing.F) {
	h := "\x01r\x03\x00\x01\x00\x05\x00" + strings.Repeat("\x00", 14)
	for _, s := range []string{h + "payload", h, h[:21], "", "\x02" + h[1:], "\x01x" + h[2:], "\x01d\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff" + strings.Repeat("\xff", 8)} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v []byte) {
		hd, payload, err := splitValue(v)
		if err != nil {
			if len(v) >= headerSize && validFormat(v[0]) {
				t.Fatalf("splitValue refused %q", v)
			}
			return
		}
		if len(v) < headerSize || !validFormat(v[0]) || hd.format != v[0] || !bytes.Equal(payload, v[headerSize:]) {
			t.Fatalf("splitValue(%q) accepted it with payload %q", v, payload)
		}
		tp, ts, rest, err := splitTrace(hd.format, payload)
		switch {
		case err != nil && hd.format == formatPlain:
			t.Fatalf("splitTrace of a plain value %q: %v", v, err)
		case err == nil && len(tp)+len(ts)+len(rest) > len(payload):
			t.Fatalf("splitTrace(%q) = %q, %q, %q: longer than its input", payload, tp, ts, rest)
		}
		if int(hd.tries) != int(v[2])|int(v[3])<<8 || hd.state != v[1] || hd.timeMS < 0 || hd.timeMS >= 1<<48 {
			t.Fatalf("splitValue(%q) = %+v", v, hd)
		}
		var j engine.Job
		hd.apply(&j, now)
		if j.Tries != hd.tries || j.Priority != int(hd.priority) {
			t.Fatalf("apply(%+v) = %+v", hd, j)
		}
	})
}

// FuzzTraceValue: a value made with a trace context and a group gives
// back the same group, trace context, payload and header fields; one made
// without either is format 1, byte for byte the value of earlier
// versions.
func FuzzTraceValue(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1,congo=2", []byte("body"), uint16(3), 7, "")
	f.Add("", "", []byte{}, uint16(1), 0, "")
	f.Add("x", strings.Repeat("s", 512), []byte("\x00\x01"), uint16(65535), 255, "")
	f.Add("", "", []byte("body"), uint16(3), 7, "shop-42")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v", []byte("{}"), uint16(1), 0, strings.Repeat("g", 64))
	f.Fuzz(func(t *testing.T, tp, ts string, payload []byte, tries uint16, prio int, group string) {
		if len(tp) > 255 || len(ts) > 65535 || prio < 0 || prio > 255 || (group != "" && !engine.ValidGroup(group)) {
			return
		}
		v := newGroupedValue(true, tries, prio, 0, group, tp, ts, payload)
		g, format, after, err := splitGroup(v[0], v[headerSize:])
		if err != nil || g != group || (group == "") != (format == v[0]) {
			t.Fatalf("splitGroup(%q) = %q, %d, %v", v, g, format, err)
		}
		if group != "" {
			if v[0]&formatGrouped == 0 || !bytes.Equal(after, newValue(true, tries, prio, 0, tp, ts, payload)[headerSize:]) {
				t.Fatalf("grouped value %q: format %d, after its group %q", v, v[0], after)
			}
			j, err := makeJob("ns", "q", "01ARZ3NDEKTSV4RRFFQ69G5FAV", v[0], v[headerSize:], 0)
			if err != nil || j.Group != group || !bytes.Equal(j.Body, payload) || j.TraceParent != tp {
				t.Fatalf("makeJob of grouped %q: %+v, %v", v, j, err)
			}
		}
		h, rest, err := splitValue(v)
		if err != nil {
			t.Fatalf("splitValue(newValue(…)): %v", err)
		}
		wantFormat := byte(formatTraced)
		if tp == "" {
			wantFormat = formatPlain
			ts = ""
			if group == "" && !bytes.Equal(v, append(append([]byte{1, 'r'}, byte(tries), byte(tries>>8), 0, 0, byte(prio)), append(make([]byte, 15), payload...)...)) {
				t.Fatalf("plain value %q is not the earlier layout", v)
			}
		}
		gotTP, gotTS, gotPayload, err := splitTrace(h.format, rest)
		if group != "" {
			wantFormat |= formatGrouped
		}
		if err != nil || h.format != wantFormat || gotTP != tp || gotTS != ts || !bytes.Equal(gotPayload, payload) || h.tries != tries || int(h.priority) != prio {
			t.Fatalf("round trip of %q %q %q: format %d, %q %q %q, %+v, %v", tp, ts, payload, h.format, gotTP, gotTS, gotPayload, h, err)
		}
	})
}
