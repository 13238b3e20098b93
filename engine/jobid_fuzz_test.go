package engine

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// FuzzParseJobID: ParseJobID never panics; it accepts only 26-character
// ULIDs and "1"-prefixed 27-character ones, refuses the rest with
// ErrInvalid, agrees with JobIDVersion, and what it reads (time, delay,
// version) is what NewJobID writes back.
func FuzzParseJobID(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	for _, s := range []string{
		NewJobID(now, 0, false), NewJobID(now, 90*time.Second, true), NewJobID(time.UnixMilli(0), 0, false),
		"", "1", strings.Repeat("0", 26), strings.Repeat("Z", 26), "7" + strings.Repeat("Z", 25), "8" + strings.Repeat("0", 25),
		"1" + strings.Repeat("0", 26), "2" + strings.Repeat("0", 26), strings.ToLower(NewJobID(now, 0, false)),
		"01J5Z8R6Q1X0V3M2B7K9C4DIOL", "01J5Z8R6Q1X0V3M2B7K9C4D00\xff", "01J5Z8R6Q1X0V3M2B7K9C4D000 ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		info, err := ParseJobID(id)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseJobID(%q) = %v, not ErrInvalid", id, err)
			}
			if ElapsedMS(id, now) != 0 {
				t.Fatalf("ElapsedMS of the invalid ID %q is not 0", id)
			}
			return
		}
		switch {
		case len(id) == ulid.EncodedSize && info.Version == 0 && JobIDVersion(id) == 0:
		case len(id) == ulid.EncodedSize+1 && id[0] == '1' && info.Version == 1 && JobIDVersion(id) == 1:
		default:
			t.Fatalf("ParseJobID(%q) accepted it as version %d (JobIDVersion %d)", id, info.Version, JobIDVersion(id))
		}
		if info.Delay < 0 || info.Delay > math.MaxUint32*time.Second || info.Delay%time.Second != 0 {
			t.Fatalf("ParseJobID(%q) delay %v", id, info.Delay)
		}
		again, err := ParseJobID(NewJobID(info.Published, info.Delay, info.Version == 1))
		if err != nil || !again.Published.Equal(info.Published) || again.Delay != info.Delay || again.Version != info.Version {
			t.Fatalf("NewJobID of what %q says gives %+v, %v; want %+v", id, again, err, info)
		}
		if got := ElapsedMS(id, info.Published.Add(1500*time.Millisecond)); got != 1500 {
			t.Fatalf("ElapsedMS(%q) 1.5 s after its time = %d", id, got)
		}
		if got := ElapsedMS(id, info.Published.Add(-time.Millisecond)); got != 0 {
			t.Fatalf("ElapsedMS(%q) before its time = %d", id, got)
		}
	})
}

// FuzzNewJobID: every ID NewJobID makes parses back to its millisecond and
// its delay (clamped to 0..2^32-1 s, whole seconds) and version.
func FuzzNewJobID(f *testing.F) {
	f.Add(int64(0), int64(0), false)
	f.Add(int64(1767323045006), int64(90*time.Second), true)
	f.Add(int64(1<<48-1), int64(-5), false)
	f.Add(int64(12345), int64(math.MaxInt64), true)
	f.Fuzz(func(t *testing.T, ms, delay int64, versioned bool) {
		ms = ms & (1<<48 - 1) // what a ULID holds
		d := time.Duration(delay)
		id := NewJobID(time.UnixMilli(ms), d, versioned)
		info, err := ParseJobID(id)
		if err != nil {
			t.Fatalf("ParseJobID(NewJobID(%d ms, %v, %v) = %q) = %v", ms, d, versioned, id, err)
		}
		want := min(max(d/time.Second, 0), math.MaxUint32) * time.Second
		if info.Published.UnixMilli() != ms || info.Delay != want || (info.Version == 1) != versioned {
			t.Fatalf("NewJobID(%d ms, %v, %v) = %q reads back as %+v", ms, d, versioned, id, info)
		}
	})
}
