package lmstfy

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// timerMember packs a timer_set member as lmstfy's Timer.Add does.
func timerMember(ns, q string, tries uint16, id string) string {
	b := binary.LittleEndian.AppendUint16(nil, uint16(len(ns)))
	b = append(b, ns...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(q)))
	b = append(b, q...)
	b = binary.LittleEndian.AppendUint16(b, tries)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(id)))
	return string(append(b, id...))
}

func TestDecodeTimer(t *testing.T) {
	e, err := decodeTimer(timerMember("mig", "orders", 2, "01ABC"))
	if err != nil || e != (timerEntry{ns: "mig", q: "orders", id: "01ABC", tries: 2}) {
		t.Fatalf("decodeTimer = %+v, %v", e, err)
	}
	good := timerMember("mig", "orders", 2, "01ABC")
	for _, bad := range []string{"", "\x03\x00mi", good[:len(good)-1], good + "x", timerMember("", "q", 1, "id"),
		timerMember("a/b", "q", 1, "id"), timerMember("ns", "q", 1, "")} {
		if e, err := decodeTimer(bad); err == nil {
			t.Errorf("decodeTimer(%q) = %+v, want an error", bad, e)
		}
	}
}

func TestDecodeEntry(t *testing.T) {
	v := string(binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, 3), 5)) + "01ABC"
	if tries, id, err := decodeEntry(v); err != nil || tries != 3 || id != "01ABC" {
		t.Fatalf("decodeEntry = %d %q %v", tries, id, err)
	}
	for _, bad := range []string{"", "\x01\x00", v[:len(v)-1], v + "x", "\x01\x00\x00\x00"} {
		if _, _, err := decodeEntry(bad); err == nil {
			t.Errorf("decodeEntry(%q): want an error", bad)
		}
	}
}

// TestTimerDelayed: lmstfy's timer_set holds delayed and consumed jobs
// alike; the entry's time against the ID's publish time and delay tells
// them apart.
func TestTimerDelayed(t *testing.T) {
	pub := time.Date(2026, 1, 2, 3, 4, 5, 600e6, time.UTC)
	delayed := engine.NewJobID(pub, 40*time.Second, false)
	plain := engine.NewJobID(pub, 0, true)
	due := float64(pub.Unix() + 40)
	for _, tc := range []struct {
		name  string
		id    string
		tries uint16
		score float64
		want  bool
	}{
		{"delayed, scheduled in the ID's second", delayed, 3, due, true},
		{"delayed, the second ticked between ID and entry", delayed, 3, due + 1, true},
		{"consumed after its delay (TTR 30)", delayed, 2, due + 30, false},
		{"consumed with its last try", delayed, 0, due, false},
		{"no delay: only a consume puts it in the timer", plain, 2, float64(pub.Unix()), false},
		{"not an lmstfy ID", "x", 2, due, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := timerDelayed(timerEntry{ns: "n", q: "q", id: tc.id, tries: tc.tries}, tc.score); got != tc.want {
				t.Errorf("timerDelayed = %t, want %t", got, tc.want)
			}
		})
	}
}
