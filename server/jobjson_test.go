package server

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestAppendConsumedMatchesMarshal holds appendConsumed to json.Marshal's
// bytes, on the plain jobs it writes itself and on those it leaves to
// json.Marshal.
func TestAppendConsumedMatchesMarshal(t *testing.T) {
	now := time.Now()
	id := engine.NewJobID(now.Add(-time.Second), 0, true)
	jobs := []*engine.Job{
		{ID: id, Body: []byte("hello"), TTL: 90 * time.Second, Tries: 3},
		{ID: id, Body: nil},
		{ID: id, Body: []byte{}, Group: "g1", Receipt: "00112233aabbccdd", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "a=b"},
		{ID: id, Body: []byte{0, 1, 2, 0xff, '<', '"'}, Attributes: map[string]string{"b": "<2>", "a": "1"}},
		{ID: id, Body: []byte("x"), Attributes: map[string]string{}},
		{ID: "not-an-id", Body: []byte("x"), TTL: -time.Second},
		{ID: id, Body: []byte("x"), TraceState: "k=v&w<", Receipt: "r"},
		{ID: id, Body: []byte("x"), Group: "é"},
		{ID: id, Body: []byte("x"), TraceState: "a\u2028b"},
		{ID: id, Body: []byte("x"), TraceState: "a\x7fb\x01"},
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		s := make([]byte, rnd.IntN(12))
		for i := range s {
			s[i] = byte(rnd.IntN(256))
		}
		body := make([]byte, rnd.IntN(300))
		for i := range body {
			body[i] = byte(rnd.IntN(256))
		}
		jobs = append(jobs, &engine.Job{ID: id, Body: body, TraceState: string(s), Tries: uint16(rnd.IntN(70000)), TTL: time.Duration(rnd.Int64N(1e13))})
	}
	check := func(t *testing.T, v any) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendConsumed([]byte("prefix"), v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("appendConsumed:\n got %s\nwant prefix%s", got, want)
		}
	}
	for _, j := range jobs {
		for _, ext := range []bool{false, true} {
			j.Queue = "q"
			check(t, consumedBody([]*engine.Job{j}, "ns", []string{"q"}, 1, ext, now))
		}
	}
	for _, ext := range []bool{false, true} {
		check(t, consumedBody(jobs[:1], "ns", []string{"q"}, 2, ext, now))
		check(t, consumedBody(jobs[:3], "ns", []string{"q"}, 5, ext, now))
		check(t, consumedBody(jobs, "ns", []string{"q"}, 100, ext, now))
	}
	check(t, []jobResponse(nil))
	check(t, []jobResponse{})
}
