// Package audit keeps the admin plane's audit log: one Entry per
// state-changing request to the admin listener (JSON API and dashboard),
// accepted or refused, in a capped list in the admin Redis, newest first.
//
// The list is one key with its sequence counter in the same Redis Cluster
// slot (the hash tag {kairos:audit}), so that recording is one script on
// one node: it numbers the entry, pushes it and trims the list to the
// cap. The numbers let a reader page through the list while entries
// arrive (Query.Before) without seeing one twice.
//
// The package stores what it is given; what goes into an Entry (no token
// values, no passwords, no bodies) is decided by the server's middleware
// (server/audit.go).
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMaxEntries is how many entries the store keeps when no cap is
// configured ([Kairos] AuditMaxEntries).
const DefaultMaxEntries = 10000

// MaxPage is the most entries one List returns.
const MaxPage = 500

// MaxScan is the most entries one filtered List reads: a filter that
// matches little answers a short (even empty) page with a cursor to go
// on from, rather than read a long log through in one request.
const MaxScan = 20 * MaxPage

// Keys of the audit log in the admin Redis. The braces are a Redis Cluster
// hash tag: both keys live in one slot.
const (
	// ListKey is the list of JSON entries, newest at the head.
	ListKey = "{kairos:audit}:log"
	// SeqKey counts the entries ever recorded; an entry's Seq is its value
	// after the entry's INCR.
	SeqKey = "{kairos:audit}:seq"
)

// Entry is one audited request.
type Entry struct {
	// Seq numbers the entries in the order they were stored (1, 2, ...);
	// set by the store.
	Seq int64 `json:"seq"`
	// Time is when the request finished.
	Time time.Time `json:"time"`
	// RequestID is the request's X-Request-ID, as in the access log.
	RequestID string `json:"request_id,omitempty"`
	// Account is the basic-auth account that made the request;
	// "anonymous" when the admin listener has no Accounts. For a request
	// refused by the basic auth it is the account named by the request
	// when that is a configured account (a wrong password), else "".
	Account string `json:"account"`
	// Authenticated is false for a request that did not pass the basic
	// auth: refused, or to a route left open while Accounts are set
	// (/debug/pprof with ProtectAdminEndpoints = false).
	Authenticated bool `json:"authenticated"`
	// Remote is the peer's IP address.
	Remote string `json:"remote"`
	// Source is "api" (the JSON admin API) or "dashboard" (/ui/).
	Source string `json:"source"`
	// Method and Route are the HTTP method and the route's pattern
	// (for instance "/token/:namespace/:token"); Route never holds a
	// parameter's value.
	Method string `json:"method"`
	Route  string `json:"route"`
	// Target names what the request acted on: "pool", "namespace",
	// "queue", "job_id", "name" (a schedule), "action" (a dashboard
	// action), "token" (a token's fingerprint, never its value).
	Target map[string]string `json:"target,omitempty"`
	// Status is the HTTP status of the answer (a dashboard action answers
	// 303 whether it worked or not: see OK).
	Status int `json:"status"`
	// OK is whether the action was done.
	OK bool `json:"ok"`
	// Error is why it was not, as the client was told.
	Error string `json:"error,omitempty"`
}

// Query selects entries for List.
type Query struct {
	// Before, when > 0, lists entries with Seq < Before (the next page:
	// the Seq of the last entry of the previous one).
	Before int64
	// Limit is the most entries to return (1..MaxPage; 0 means 50).
	Limit int
	// Account and Namespace, when not empty, keep only the entries of
	// that account, or with that target namespace.
	Account, Namespace string
}

// Store is the audit log in the admin Redis. It is safe for concurrent
// use.
type Store struct {
	client redis.UniversalClient
	max    int
	scan   int // MaxScan; tests lower it
}

// NewStore returns a store over the admin Redis client that keeps at most
// maxEntries entries (DefaultMaxEntries when maxEntries <= 0). It starts
// nothing.
func NewStore(client redis.UniversalClient, maxEntries int) *Store {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	return &Store{client: client, max: maxEntries, scan: MaxScan}
}

// MaxEntries is the store's cap.
func (s *Store) MaxEntries() int { return s.max }

// recordScript numbers, pushes and trims in one step.
//
//	KEYS[1] ListKey
//	KEYS[2] SeqKey
//	ARGV[1] the entry's JSON object without its Seq, starting with "{"
//	ARGV[2] the cap (entries)
//	Returns the entry's Seq.
var recordScript = redis.NewScript(`
local seq = redis.call('INCR', KEYS[2])
local rest = string.sub(ARGV[1], 2)
local sep = ','
if rest == '}' then sep = '' end
redis.call('LPUSH', KEYS[1], '{"seq":' .. seq .. sep .. rest)
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return seq
`)

// readScript reads a page of the list from the entry before ARGV[1].
//
//	KEYS[1] ListKey
//	KEYS[2] SeqKey
//	ARGV[1] before: 0 for the newest entry, else a Seq
//	ARGV[2] count
//	Returns the entries (JSON), newest first.
var readScript = redis.NewScript(`
local start = 0
local before = tonumber(ARGV[1])
if before > 0 then
  local head = tonumber(redis.call('GET', KEYS[2]) or '0')
  start = head - before + 1
  if start < 0 then start = 0 end
end
return redis.call('LRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
`)

// LoadScripts loads the store's scripts into the admin Redis (on a Redis
// Cluster, into every master), so that their first runs meet no NOSCRIPT
// (which Run answers with an EVAL, but the command metrics would count as
// a failed EVALSHA) and a Redis that refuses scripts fails at start-up.
func LoadScripts(ctx context.Context, client redis.UniversalClient) error {
	for _, s := range []*redis.Script{recordScript, readScript} {
		if err := s.Load(ctx, client).Err(); err != nil {
			return fmt.Errorf("audit: load scripts: %w", err)
		}
	}
	return nil
}

// Record stores e (its Seq is set by the store) and returns its Seq.
func (s *Store) Record(ctx context.Context, e Entry) (int64, error) {
	e.Seq = 0
	b, err := json.Marshal(entryNoSeq(e))
	if err != nil {
		return 0, fmt.Errorf("audit: encode: %w", err)
	}
	seq, err := recordScript.Run(ctx, s.client, []string{ListKey, SeqKey}, b, s.max).Int64()
	if err != nil {
		return 0, fmt.Errorf("audit: record: %w", err)
	}
	return seq, nil
}

// entryNoSeq is Entry without the seq field, which the script prepends.
type entryNoSeq Entry

func (e entryNoSeq) MarshalJSON() ([]byte, error) {
	type plain Entry
	b, err := json.Marshal(plain(e))
	if err != nil {
		return nil, err
	}
	// plain starts with {"seq":0, (Seq is the first field); drop it.
	const head = `{"seq":0,`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return nil, errors.New("unexpected encoding of an entry")
	}
	return append([]byte{'{'}, b[len(head):]...), nil
}

// List returns entries newest first, as q selects, and the Before of the
// next page (0 when there is none). With a filter it reads on through the
// list, MaxPage entries at a time, until it has Limit matching entries,
// reaches the end, or has read MaxScan entries: then the page may be
// short, or empty, with a Before to go on from.
func (s *Store) List(ctx context.Context, q Query) ([]Entry, int64, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, MaxPage)
	filtered := q.Account != "" || q.Namespace != ""
	chunk := limit
	if filtered {
		chunk = MaxPage
	}
	out := make([]Entry, 0, limit)
	before := q.Before
	for scanned := 0; ; scanned += chunk {
		if scanned >= s.scan {
			return out, before, nil
		}
		raw, err := readScript.Run(ctx, s.client, []string{ListKey, SeqKey}, before, chunk).StringSlice()
		if err != nil {
			return nil, 0, fmt.Errorf("audit: list: %w", err)
		}
		for _, r := range raw {
			var e Entry
			if err := json.Unmarshal([]byte(r), &e); err != nil || e.Seq <= 0 {
				continue // not ours; skip it rather than fail the page
			}
			if before > 0 && e.Seq >= before {
				continue // cannot happen while the list is only pushed and trimmed
			}
			before = e.Seq
			if q.Account != "" && e.Account != q.Account || q.Namespace != "" && e.Target["namespace"] != q.Namespace {
				continue
			}
			out = append(out, e)
			if len(out) == limit {
				if before <= 1 {
					return out, 0, nil
				}
				return out, before, nil
			}
		}
		if len(raw) < chunk || before <= 1 {
			return out, 0, nil
		}
	}
}

// ParseBefore parses a Before cursor as GET /audit takes it.
func ParseBefore(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("before must be a non-negative integer")
	}
	return n, nil
}
