package rdb

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
