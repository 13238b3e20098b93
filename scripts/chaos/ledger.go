package main

import (
	"slices"
	"sync"
	"time"
)

// jobRec is what the clients know of one sequence number.
type jobRec struct {
	sent       int64 // Unix ms the publish was sent
	due        int64 // intended due time, Unix ms (send time + delay)
	acked      bool  // the server answered 201
	deliveries int   // consumer deliveries recorded
	first      int64 // Unix ms of the first delivery
	ackOK      bool  // a consumer's ACK was answered 204
	ackAt      int64 // Unix ns of that answer (the first)
	notFound   bool  // a consumer's ACK was answered 404 at once
	afterAck   int   // deliveries after a successful ACK
	overlap    int   // deliveries answered after it, of a consume sent before it
	dead       bool  // found in the dead letter at the drain
}

// ledger records what publishers and consumers saw. Every method is safe
// for concurrent use.
type ledger struct {
	mu      sync.Mutex
	jobs    map[int64]*jobRec
	phantom int // deliveries of sequence numbers never sent
	// pubLatency holds the latency of every acknowledged publish request.
	pubLatency []time.Duration
	outages    []interval
	lastDeliv  time.Time

	publishErrors, consumeErrors, ackErrors int
	cuts, abandoned                         int
}

// interval is a span of time [from, to).
type interval struct{ from, to time.Time }

func newLedger() *ledger { return &ledger{jobs: make(map[int64]*jobRec)} }

// sent records a publish about to be sent at Unix ms at.
func (l *ledger) sent(seq, at, due int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[seq] = &jobRec{sent: at, due: due}
}

// published records the server's 201 for seqs.
func (l *ledger) published(seqs []int64, latency time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		if r := l.jobs[s]; r != nil {
			r.acked = true
		}
	}
	l.pubLatency = append(l.pubLatency, latency)
}

// deliver records a delivery of seq at now; it reports whether seq was
// ever sent.
func (l *ledger) deliver(seq int64, now time.Time) bool {
	return l.deliverTaken(seq, time.Time{}, now)
}

// deliverTaken records a delivery of seq by a consume sent at t0 (zero:
// unknown) and answered at now. A delivery answered after the job's
// successful ACK counts as after it (afterAck) unless its consume was sent
// before that ACK's answer: then the take may have come first (a consume
// answered late, whose TTR ran out meanwhile, the job going to a consumer
// that ACKed it), and it counts as an overlap. Redis's AOF tells the two
// apart; the ledger cannot.
func (l *ledger) deliverTaken(seq int64, t0, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastDeliv = now
	r := l.jobs[seq]
	if r == nil {
		l.phantom++
		return false
	}
	switch {
	case !r.ackOK:
	case !t0.IsZero() && t0.UnixNano() < r.ackAt:
		r.overlap++
	default:
		r.afterAck++
	}
	r.deliveries++
	if r.deliveries == 1 {
		r.first = now.UnixMilli()
	}
	return true
}

// ackDone records a successful ACK of seq.
func (l *ledger) ackDone(seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.jobs[seq]; r != nil && !r.ackOK {
		r.ackOK, r.ackAt = true, time.Now().UnixNano()
	}
}

// notFound records an ACK of seq answered 404 at its first definite
// answer: it did not delete the job.
func (l *ledger) notFound(seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.jobs[seq]; r != nil {
		r.notFound = true
	}
}

// deadFound records seq found in the dead letter.
func (l *ledger) deadFound(seq int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.jobs[seq]
	if r == nil {
		l.phantom++
		return false
	}
	r.dead = true
	return true
}

// outage records a span during which one publisher's requests failed.
func (l *ledger) outage(from, to time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outages = append(l.outages, interval{from, to})
}

func (l *ledger) count(field *int) {
	l.mu.Lock()
	*field++
	l.mu.Unlock()
}

// sinceLastDelivery is how long ago the last delivery was recorded.
func (l *ledger) sinceLastDelivery(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastDeliv.IsZero() {
		return time.Duration(1<<62 - 1)
	}
	return now.Sub(l.lastDeliv)
}

// missing counts acknowledged jobs neither delivered nor dead yet, and the
// latest due time of acknowledged jobs.
func (l *ledger) missing() (n int, maxDue int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.jobs {
		if !r.acked {
			continue
		}
		maxDue = max(maxDue, r.due)
		if r.deliveries == 0 && !r.dead {
			n++
		}
	}
	return n, maxDue
}

// counts is the ledger reduced to the report's figures.
type counts struct {
	Attempted          int
	Acknowledged       int
	Delivered          int // acknowledged jobs delivered at least once
	DeadLettered       int // acknowledged jobs found in the dead letter
	DeadOnly           int // … and never delivered
	Lost               int
	LostSeqs           []int64 // the first few
	LostSent           []int64 // Unix ms each lost job was sent
	Duplicates         int     // deliveries beyond the first, of any job
	AfterAck           int     // deliveries after a successful ACK
	AfterAckOverlap    int     // deliveries answered after it, of a consume sent before it
	UnackedDelivered   int     // jobs whose publish got no 201 but were delivered
	Phantom            int
	Early              int // first deliveries before the intended due time
	Late1s             int // first deliveries more than 1 s after due
	LateP50, LateP99   int64
	LateMax            int64
	Outage             time.Duration
	PubP50, PubP99     time.Duration
	PubMax             time.Duration
	PublishErrors      int
	ConsumeErrors      int
	AckErrors          int
	Cuts, Abandoned    int
	DeliveriesRecorded int
}

// summarize computes the report's figures.
func (l *ledger) summarize() counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := counts{
		Attempted: len(l.jobs), Phantom: l.phantom,
		PublishErrors: l.publishErrors, ConsumeErrors: l.consumeErrors, AckErrors: l.ackErrors,
		Cuts: l.cuts, Abandoned: l.abandoned,
	}
	var late []int64
	seqs := make([]int64, 0, len(l.jobs))
	for s := range l.jobs {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	for _, s := range seqs {
		r := l.jobs[s]
		c.DeliveriesRecorded += r.deliveries
		if r.deliveries > 1 {
			c.Duplicates += r.deliveries - 1
		}
		c.AfterAck += r.afterAck
		c.AfterAckOverlap += r.overlap
		if !r.acked {
			if r.deliveries > 0 {
				c.UnackedDelivered++
			}
			continue
		}
		c.Acknowledged++
		if r.dead {
			c.DeadLettered++
		}
		switch {
		case r.deliveries > 0:
			c.Delivered++
			d := r.first - r.due
			late = append(late, d)
			if d < 0 {
				c.Early++
			}
			if d > 1000 {
				c.Late1s++
			}
		case r.dead:
			c.DeadOnly++
		default:
			c.Lost++
			c.LostSent = append(c.LostSent, r.sent)
			if len(c.LostSeqs) < 20 {
				c.LostSeqs = append(c.LostSeqs, s)
			}
		}
	}
	slices.Sort(late)
	c.LateP50, c.LateP99 = percentile(late, 50), percentile(late, 99)
	if len(late) > 0 {
		c.LateMax = late[len(late)-1]
	}
	lat := slices.Clone(l.pubLatency)
	slices.Sort(lat)
	c.PubP50, c.PubP99 = percentile(lat, 50), percentile(lat, 99)
	if len(lat) > 0 {
		c.PubMax = lat[len(lat)-1]
	}
	c.Outage = unionLength(l.outages)
	return c
}

// percentile returns the p-th percentile (nearest rank) of sorted values,
// or 0 for none.
func percentile[T int64 | time.Duration](sorted []T, p int) T {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// unionLength is the total length of the union of spans.
func unionLength(spans []interval) time.Duration {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b interval) int { return a.from.Compare(b.from) })
	var total time.Duration
	var cur interval
	for _, iv := range s {
		if !iv.to.After(iv.from) {
			continue
		}
		if cur.to.IsZero() || iv.from.After(cur.to) {
			total += cur.to.Sub(cur.from)
			cur = iv
			continue
		}
		if iv.to.After(cur.to) {
			cur.to = iv.to
		}
	}
	total += cur.to.Sub(cur.from)
	return total
}
