package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/engine"
)

// consume serves GET /api/:namespace/:q1[,:q2,…]: a long-poll over the
// queues in priority order. count=1 answers one object, count>1 an array.
func (s *Server) consume(c *gin.Context) {
	st := state(c)
	ttr, err := queryUint(c, "ttr", 32, s.def.ttr, errInvalidTTR)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	timeout, err := queryUint(c, "timeout", 32, s.def.timeout, errInvalidTimeout)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ttrD, timeoutD, err := s.consumeTimes(c, ttr, timeout) // Kairos: ttr_ms, timeout_ms
	if err != nil {
		s.failAPI(c, err)
		return
	}
	count := uint64(1)
	if v, ok := getQuery(c, "count"); ok {
		count, err = strconv.ParseUint(v, 10, 32)
		if err != nil || count == 0 || count > engine.MaxBatchConsume {
			s.failAPI(c, errInvalidCount)
			return
		}
	}
	if len(st.queues) == 0 {
		s.failAPI(c, errQueueNames)
		return
	}
	for _, q := range st.queues {
		if !engine.ValidQueueName(q) {
			s.failAPI(c, errQueueNames)
			return
		}
	}
	// The wait ends when the client goes away or the server shuts down.
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	stop := context.AfterFunc(s.pollCtx, cancel)
	defer stop()

	ns := c.Param("namespace")
	jobs, err := st.eng.Consume(ctx, &engine.ConsumeRequest{
		Namespace: ns,
		Queues:    st.queues,
		TTR:       ttrD,
		Timeout:   timeoutD,
		Count:     int(count),
		Worker:    engine.WorkerName(c.GetHeader(workerHeader)),
	})
	if len(jobs) == 0 {
		if err == nil || ctx.Err() != nil || errors.Is(err, engine.ErrClosed) {
			if err != nil {
				s.reqLogger(c).WithError(err).Debug("consume ended by cancellation")
			}
			s.failAPI(c, errNoJob)
			return
		}
		s.failAPI(c, err)
		return
	}
	if err != nil {
		// Jobs already taken are in flight: hand them out rather than let
		// them wait for their TTR.
		s.reqLogger(c).WithError(err).Warn("consume returned jobs and an error")
	}
	if s.tracer != nil {
		c.Set(consumedKey, jobs)
	}
	if count == 1 {
		setTraceHeaders(c.Writer.Header(), jobs[0])
	}
	writeJSON(c, http.StatusOK, consumedBody(jobs, ns, st.queues, int(count), wantsExt(c), s.now()))
}

// consumedBody is consume's 200 body: one job, or an array when count > 1.
// A job names its own queue; queues is the request's (for an engine that
// leaves Job.Queue empty on a single-queue consume). receipts adds each
// delivery's receipt and trace context (X-Kairos-Extensions).
func consumedBody(jobs []*engine.Job, ns string, queues []string, count int, receipts bool, now time.Time) any {
	render := func(j *engine.Job) jobResponse {
		q := j.Queue
		if q == "" && len(queues) == 1 {
			q = queues[0]
		}
		r := newJobResponse(j, ns, q, "new job", now)
		if receipts {
			r.Receipt = j.Receipt
			r.TraceParent, r.TraceState = j.TraceParent, j.TraceState
		}
		return r
	}
	if count == 1 {
		return render(jobs[0])
	}
	out := make([]jobResponse, len(jobs))
	for i, j := range jobs {
		out[i] = render(j)
	}
	return out
}

// consumeTimes returns consume's TTR and wait: ttr_ms and timeout_ms win
// over ttr and timeout (seconds, already parsed); the wait is capped at
// Kairos.MaxTimeoutSecond either way.
func (s *Server) consumeTimes(c *gin.Context, ttr, timeout uint64) (time.Duration, time.Duration, error) {
	ttrD := secs(ttr)
	if d, ok, err := queryMS(c, "ttr_ms", errInvalidTTRMS); err != nil {
		return 0, 0, err
	} else if ok {
		ttrD = d
	}
	maxWait := secs(s.def.maxTimeout)
	wait := secs(min(timeout, s.def.maxTimeout))
	if v, ok := getQuery(c, "timeout_ms"); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, errInvalidTimeoutMS
		}
		wait = maxWait
		if n < uint64(maxWait/time.Millisecond) {
			wait = time.Duration(n) * time.Millisecond
		}
	}
	return ttrD, wait, nil
}
