package engine

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"
)

// Job IDs keep lmstfy's shape so that clients which parse them keep working:
// a 26-character ULID (48-bit millisecond timestamp, then 80 bits of which
// the last 32 hold the delay in seconds, little endian), prefixed with "1"
// (27 characters) for v1 jobs whose payload carries attributes.

// JobIDInfo is what a job ID tells about its job.
type JobIDInfo struct {
	// Version is 0 for a 26-character ID and 1 for a "1"-prefixed one.
	Version int
	// Published is the ID's ULID timestamp: when the job was published.
	Published time.Time
	// Delay is the publish delay, to the second.
	Delay time.Duration
}

// NewJobID returns a fresh job ID for a job published at now with delay.
// The random part comes from math/rand/v2's per-thread ChaCha8 generator:
// IDs need to be unique, not secret, and a (very rare) collision is caught
// by the engine's SET NX and retried with a new ID.
func NewJobID(now time.Time, delay time.Duration, versioned bool) string {
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(now))
	binary.LittleEndian.PutUint64(id[6:14], rand.Uint64())
	secs := delay / time.Second
	if secs < 0 {
		secs = 0
	}
	if secs > 1<<32-1 {
		secs = 1<<32 - 1
	}
	binary.LittleEndian.PutUint32(id[12:16], uint32(secs))
	if versioned {
		return "1" + id.String()
	}
	return id.String()
}

// NewShardJobID is NewJobID for a job of hot-queue shard shard
// (0..MaxShards-1): the top 6 bits of the random part (byte 6 of the
// ULID) hold the shard, so that an ACK, peek, touch or release finds the
// job's shard without a lookup (JobIDShard). The timestamp and the delay
// bits that lmstfy clients parse are untouched.
func NewShardJobID(now time.Time, delay time.Duration, versioned bool, shard int) string {
	id := NewJobID(now, delay, versioned)
	u, err := ulid.ParseStrict(id[len(id)-ulid.EncodedSize:])
	if err != nil {
		return id // cannot happen: NewJobID made it
	}
	u[6] = u[6]&0x03 | byte(shard&(MaxShards-1))<<2
	if versioned {
		return "1" + u.String()
	}
	return u.String()
}

// JobIDShard returns the shard NewShardJobID encoded in id, or false when
// id is no job ID. Any job ID carries a value; only IDs made for a shard
// carry its number (the engine falls back to shard 0 when the job is not
// in the shard its ID names).
func JobIDShard(id string) (int, bool) {
	switch {
	case len(id) == ulid.EncodedSize:
	case len(id) == ulid.EncodedSize+1 && id[0] == '1':
		id = id[1:]
	default:
		return 0, false
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return 0, false
	}
	return int(u[6] >> 2), true
}

// ParseJobID decodes a job ID made by NewJobID (or by lmstfy).
func ParseJobID(id string) (JobIDInfo, error) {
	var info JobIDInfo
	switch {
	case len(id) == ulid.EncodedSize:
	case len(id) == ulid.EncodedSize+1 && id[0] == '1':
		info.Version = 1
		id = id[1:]
	default:
		return info, fmt.Errorf("job id %q: %w", id, ErrInvalid)
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return info, fmt.Errorf("job id %q: %w", id, ErrInvalid)
	}
	info.Published = ulid.Time(u.Time())
	info.Delay = time.Duration(binary.LittleEndian.Uint32(u[12:16])) * time.Second
	return info, nil
}

// JobIDVersion returns 1 for a v1 ID (attributes in the payload), else 0.
// lmstfy decides by length: 26 characters is v0.
func JobIDVersion(id string) int {
	if len(id) == ulid.EncodedSize+1 && id[0] == '1' {
		return 1
	}
	return 0
}

// ElapsedMS returns the milliseconds from the job's publish to now, or 0
// when the ID carries no timestamp or one in the future.
func ElapsedMS(id string, now time.Time) int64 {
	info, err := ParseJobID(id)
	if err != nil {
		return 0
	}
	ms := now.Sub(info.Published).Milliseconds()
	if ms < 0 {
		return 0
	}
	return ms
}
