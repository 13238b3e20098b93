package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/client"
)

type publishFlags struct {
	delay, ttl       time.Duration
	tries            int
	attrs            []string
	bodyFile, file   string
	concurrency      int
	noProgress       bool
	progressEvery    time.Duration
	hasDelay, hasTTL bool
	hasTries         bool
	priority         int
	hasPriority      bool
	group            string
	hasGroup         bool
	jobKey, dueAt    string
	traceParent      string
	traceState       string
}

const publishLong = `Publish one job to QUEUE, its body taken from BODY, from --body-file (- for
stdin), or from stdin when it is not a terminal. Prints the job ID.

With --file, publish every line of a JSON Lines file (- for stdin) as one job,
64 jobs per bulk request with several requests in flight, and show progress
on stderr. A line that is valid JSON is sent as is: its JSON text is the job
body (a line "abc" with its quotes gives the body "abc" with its quotes). A
line that is not JSON is published on its own with the line, as is, for body.
Blank lines are skipped. Jobs are not published in file order when several
requests are in flight (--concurrency 1 keeps the order). On the first
failure nothing more is sent, the lines already published stay published, and
the command says which lines failed.`

func (c *cli) publishCmd() *cobra.Command {
	var f publishFlags
	cmd := &cobra.Command{
		Use:     "publish QUEUE [BODY]",
		Aliases: []string{"put", "pub"},
		Short:   "Publish a job, or a JSON Lines file in bulk",
		Long:    publishLong,
		Example: `  kairos publish emails 'send welcome mail to 42' --ttl 1h --tries 3
  echo '{"user":42}' | kairos publish emails --delay 30s
  kairos publish emails --body-file mail.json --attr trace=abc
  kairos publish exports '{"account":7}' --group account-7
  kairos publish emails --file jobs.jsonl`,
		Args: queueArgs(cobra.RangeArgs(1, 2), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			fl := cmd.Flags()
			f.hasDelay, f.hasTTL, f.hasTries = fl.Changed("delay"), fl.Changed("ttl"), fl.Changed("tries")
			f.hasPriority, f.hasGroup = fl.Changed("priority"), fl.Changed("group")
			opts, err := f.options()
			if err != nil {
				return err
			}
			ctx, err := f.traceContext(cmd.Context())
			if err != nil {
				return err
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			if f.file != "" {
				if len(a) > 1 || f.bodyFile != "" {
					return usagef("--file publishes the lines of a file: give no BODY and no --body-file")
				}
				if f.jobKey != "" {
					return usagef("--job-key cannot be used with --file (one key per job)")
				}
				if f.concurrency < 1 || f.concurrency > 64 {
					return usagef("--concurrency must be 1..64")
				}
				return c.publishFile(ctx, cl, a[0], &f, opts)
			}
			body, err := c.body(a, f.bodyFile)
			if err != nil {
				return err
			}
			id, err := cl.Publish(ctx, a[0], body, opts...)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]string{"job_id": id})
			}
			_, err = fmt.Fprintln(c.io.out, id)
			return err
		},
	}
	fl := cmd.Flags()
	fl.Var(newDuration(&f.delay, 0), "delay", "delay before the job can be consumed (default: the server's DelaySecond, 0 unless configured)")
	fl.Var(newDuration(&f.ttl, 0), "ttl", "time to live from publish, 0 = forever (default: the server's TTLSecond, 24h unless configured)")
	fl.IntVar(&f.tries, "tries", 0, "deliveries before the job goes to the dead letter, 1..65535 (default: the server's TriesNum, 1 unless configured)")
	fl.StringArrayVar(&f.attrs, "attr", nil, "attribute key=value (repeatable, at most 16)")
	fl.IntVar(&f.priority, "priority", 0, "priority within the queue, 0..255, higher first (Kairos; default 0)")
	fl.StringVar(&f.group, "group", "", "the job's group in the queue, e.g. a customer ID: consumes serve the groups in turn (Kairos; default: none)")
	fl.StringVar(&f.jobKey, "job-key", "", "idempotency key: a second publish with the same key publishes nothing (Kairos)")
	fl.StringVar(&f.dueAt, "due-at", "", "when the job becomes consumable: RFC 3339 time or Unix milliseconds (Kairos; not with --delay)")
	fl.StringVar(&f.traceParent, "traceparent", "", "W3C traceparent the job carries to its consumers (with tracing on, the parent of Kairos's publish span)")
	fl.StringVar(&f.traceState, "tracestate", "", "W3C tracestate sent with --traceparent")
	fl.StringVar(&f.bodyFile, "body-file", "", "read the body from this file (- for stdin)")
	fl.StringVarP(&f.file, "file", "f", "", "bulk-publish every line of this JSON Lines file (- for stdin)")
	fl.IntVar(&f.concurrency, "concurrency", 4, "bulk requests in flight with --file (1..64)")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress output with --file")
	fl.Var(newDuration(&f.progressEvery, 0), "progress-every", "interval of progress lines (default: 100ms on a terminal, 2s otherwise)")
	serverDefault(fl, "delay", "ttl", "progress-every")
	return cmd
}

// options turns the flags into publish options; unset flags are not sent.
func (f *publishFlags) options() ([]client.PublishOption, error) {
	var opts []client.PublishOption
	if f.hasDelay {
		opts = append(opts, client.Delay(f.delay))
	}
	if f.hasTTL {
		opts = append(opts, client.TTL(f.ttl))
	}
	if f.hasTries {
		if f.tries < 1 || f.tries > 65535 {
			return nil, usagef("--tries must be 1..65535")
		}
		opts = append(opts, client.Tries(f.tries))
	}
	if f.hasPriority {
		if f.priority < 0 || f.priority > client.MaxPriority {
			return nil, usagef("--priority must be 0..%d", client.MaxPriority)
		}
		opts = append(opts, client.Priority(f.priority))
	}
	if f.hasGroup {
		opts = append(opts, client.Group(f.group))
	}
	if f.jobKey != "" {
		opts = append(opts, client.JobKey(f.jobKey))
	}
	if f.dueAt != "" {
		if f.hasDelay {
			return nil, usagef("--due-at and --delay exclude each other")
		}
		t, err := parseTime(f.dueAt)
		if err != nil {
			return nil, usageError{err}
		}
		opts = append(opts, client.DueAt(t))
	}
	if len(f.attrs) > 0 {
		attrs := make(map[string]string, len(f.attrs))
		for _, kv := range f.attrs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, usagef("--attr %q: want key=value", kv)
			}
			attrs[k] = v
		}
		opts = append(opts, client.Attributes(attrs))
	}
	return opts, nil
}

// parseTime reads an RFC 3339 time or Unix milliseconds.
func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time %q (use RFC 3339, e.g. 2030-01-02T15:04:05Z, or Unix milliseconds)", s)
	}
	return t, nil
}

// body returns the job body of a single publish.
func (c *cli) body(a []string, bodyFile string) ([]byte, error) {
	switch {
	case len(a) == 2 && bodyFile != "":
		return nil, usagef("give the body either as BODY or with --body-file, not both")
	case len(a) == 2:
		return []byte(a[1]), nil
	case bodyFile == "-":
		return readAll(c.io.in)
	case bodyFile != "":
		b, err := os.ReadFile(bodyFile)
		if err != nil {
			return nil, usageError{err}
		}
		return b, nil
	case !isTerminal(c.io.in):
		return readAll(c.io.in)
	}
	return nil, usagef("no body: give BODY, --body-file FILE, or pipe it on stdin")
}

func readAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, client.MaxBodySize+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}

// batch is a unit of work of a bulk publish: a chunk of JSON lines, or one
// non-JSON line published alone.
type batch struct {
	jobs   []any  // JSON lines, for BatchPublish
	single []byte // a non-JSON line, for Publish
	lines  []int  // line number of each job
	bytes  int64  // bytes of the file these lines (and blank lines before them) take
}

// bulkStats are the counters a bulk publish shares with its progress line.
type bulkStats struct {
	lines, skipped, published atomic.Int64
	// bytesDone counts the bytes of the lines published (or skipped).
	bytesDone atomic.Int64
	size      int64 // of the file, 0 when unknown
	start     time.Time
}

// publishFile bulk-publishes the lines of f.file.
func (c *cli) publishFile(ctx context.Context, cl *client.Client, queue string, f *publishFlags, opts []client.PublishOption) error {
	var r io.Reader = c.io.in
	st := &bulkStats{start: time.Now()}
	if f.file != "-" {
		file, err := os.Open(f.file)
		if err != nil {
			return usageError{err}
		}
		defer file.Close()
		if fi, err := file.Stat(); err == nil && fi.Mode().IsRegular() {
			st.size = fi.Size()
		}
		r = file
	}
	var prog *progress
	if !f.noProgress {
		prog = startProgress(c.io.err, st, f.progressEvery)
	}
	err := bulkPublish(ctx, cl, queue, r, st, f.concurrency, opts)
	if prog != nil {
		prog.stop()
	}
	summary := map[string]any{
		"queue": queue, "lines": st.lines.Load(), "published": st.published.Load(),
		"skipped": st.skipped.Load(), "seconds": time.Since(st.start).Seconds(),
	}
	if err != nil {
		return fmt.Errorf("%w (%d jobs published before stopping)", err, st.published.Load())
	}
	if c.jsonOut {
		return c.printJSON(summary)
	}
	_, err = fmt.Fprintf(c.io.out, "published %d jobs from %d lines (%d blank) to %s in %.1fs\n",
		st.published.Load(), st.lines.Load(), st.skipped.Load(), queue, time.Since(st.start).Seconds())
	return err
}

// maxLine is the longest line accepted: a 1 MiB body plus some slack for
// surrounding whitespace.
const maxLine = client.MaxBodySize + 4096

// bulkPublish reads JSON lines from r and publishes them with concurrency
// requests in flight. It stops at the first failure and reports the lines
// of the failing request.
func bulkPublish(ctx context.Context, cl *client.Client, queue string, r io.Reader, st *bulkStats,
	concurrency int, opts []client.PublishOption) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan *batch, concurrency)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				if ctx.Err() != nil {
					continue // drain
				}
				if err := publishBatch(ctx, cl, queue, b, opts); err != nil {
					cancel(err)
					continue
				}
				st.published.Add(int64(len(b.lines)))
				st.bytesDone.Add(b.bytes)
			}
		}()
	}
	readErr := readLines(ctx, r, st, work)
	close(work)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if readErr != nil {
		return readErr
	}
	return ctx.Err()
}

// readLines splits r into batches and sends them to work until r ends or
// ctx is done.
func readLines(ctx context.Context, r io.Reader, st *bulkStats, work chan<- *batch) error {
	br := bufio.NewReaderSize(r, 256<<10)
	cur := &batch{}
	send := func(b *batch) bool {
		select {
		case work <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	lineNo := 0
	for {
		line, n, err := readLine(br)
		if n > 0 {
			lineNo++
			st.lines.Add(1)
			trimmed := bytes.TrimSpace(line)
			switch {
			case len(trimmed) == 0:
				st.skipped.Add(1)
				cur.bytes += n
			case len(line) > maxLine:
				return usagef("line %d is longer than %d bytes", lineNo, maxLine)
			case json.Valid(trimmed):
				cur.jobs = append(cur.jobs, json.RawMessage(bytes.Clone(trimmed)))
				cur.lines = append(cur.lines, lineNo)
				cur.bytes += n
				if len(cur.jobs) == client.MaxBulk {
					if !send(cur) {
						return nil
					}
					cur = &batch{}
				}
			default:
				if !send(&batch{single: bytes.Clone(line), lines: []int{lineNo}, bytes: n}) {
					return nil
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read line %d: %w", lineNo+1, err)
		}
	}
	if len(cur.jobs) > 0 {
		send(cur)
	} else {
		st.bytesDone.Add(cur.bytes)
	}
	return nil
}

// readLine returns the next line without its "\n" or "\r\n", and the
// number of bytes it took in the input (0 at the end). Of a line longer
// than maxLine only the first maxLine+2 bytes are kept (the rest is
// skipped), enough for the caller to refuse it.
func readLine(br *bufio.Reader) ([]byte, int64, error) {
	var line []byte
	var n int64
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if room := maxLine + 2 - len(line); room > 0 {
			line = append(line, chunk[:min(len(chunk), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return line, n, err
	}
}

// publishBatch publishes one batch and names its lines on failure.
func publishBatch(ctx context.Context, cl *client.Client, queue string, b *batch, opts []client.PublishOption) error {
	var err error
	if b.single != nil {
		_, err = cl.Publish(ctx, queue, b.single, opts...)
	} else {
		_, err = cl.BatchPublish(ctx, queue, b.jobs, opts...)
	}
	if err == nil {
		return nil
	}
	first, last := b.lines[0], b.lines[len(b.lines)-1]
	if first == last {
		return fmt.Errorf("line %d not published: %w", first, err)
	}
	return fmt.Errorf("lines %d-%d not published: %w", first, last, err)
}

// progress prints the progress of a bulk publish to stderr: redrawn in
// place on a terminal, a plain line every few seconds otherwise.
type progress struct {
	w    io.Writer
	st   *bulkStats
	tty  bool
	done chan struct{}
	wg   sync.WaitGroup
}

func startProgress(w io.Writer, st *bulkStats, every time.Duration) *progress {
	p := &progress{w: w, st: st, tty: isTerminal(w), done: make(chan struct{})}
	if every <= 0 {
		every = 2 * time.Second
		if p.tty {
			every = 100 * time.Millisecond
		}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.print(false)
			case <-p.done:
				p.print(true)
				return
			}
		}
	}()
	return p
}

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}

func (p *progress) print(final bool) {
	st := p.st
	published := st.published.Load()
	elapsed := time.Since(st.start)
	rate := float64(published) / max(elapsed.Seconds(), 0.001)
	line := fmt.Sprintf("published %d of %d lines read", published, st.lines.Load())
	if st.size > 0 {
		pct := float64(st.bytesDone.Load()) * 100 / float64(st.size)
		line = fmt.Sprintf("%s %5.1f%% %s", bar(pct, 24), pct, line)
	}
	line = fmt.Sprintf("%s, %.0f jobs/s, %s", line, rate, elapsed.Truncate(100*time.Millisecond))
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// bar draws a progress bar of width characters for pct percent.
func bar(pct float64, width int) string {
	n := int(pct / 100 * float64(width))
	n = min(max(n, 0), width)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// traceContext returns ctx carrying --traceparent and --tracestate as the
// remote span context the client sends with the publish.
func (f *publishFlags) traceContext(ctx context.Context) (context.Context, error) {
	if f.traceParent == "" {
		if f.traceState != "" {
			return nil, usagef("--tracestate needs --traceparent")
		}
		return ctx, nil
	}
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": f.traceParent, "tracestate": f.traceState})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, usagef("--traceparent %q is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", f.traceParent)
	}
	return ctx, nil
}
