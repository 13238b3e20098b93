package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
)

func (c *cli) consumeCmd() *cobra.Command {
	var (
		ttr, wait   time.Duration
		count       int
		ack, follow bool
	)
	cmd := &cobra.Command{
		Use:     "consume QUEUE[,QUEUE...] [QUEUE...]",
		Aliases: []string{"get", "con"},
		Short:   "Consume jobs and print them",
		Long: `Consume up to --count jobs from one or several queues (the first has the highest
priority), waiting up to --wait for the first, and print them. A consumed job
must be ACKed (--ack, or 'kairos ack') within --ttr, else it is delivered again.

Each job is printed as a header line (ID, queue, tries left, TTL, age,
attributes) followed by its body; with --json, as one JSON object per line in
the API's format (body base64-encoded in "data").

Without --follow, no job within --wait exits with status 3. With --follow,
consume until interrupted, waiting --wait per poll and retrying failures.`,
		Example: `  kairos consume emails --ttr 30s --wait 10s
  kairos consume urgent,normal --count 10 --ack
  kairos consume emails --follow --ack --json | jq -r .data | base64 -d`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			queues, err := splitQueues(a)
			if err != nil {
				return err
			}
			if count < 1 || count > client.MaxBatchConsume {
				return usagef("--count must be 1..%d", client.MaxBatchConsume)
			}
			if cmd.Flags().Changed("ttr") && ttr <= 0 {
				return usagef("--ttr must be > 0 (leave it out for the server's default)")
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !follow {
				jobs, err := cl.BatchConsume(ctx, queues, count, ttr, wait)
				if err != nil {
					return err
				}
				return c.handleJobs(ctx, cl, jobs, ack)
			}
			return c.follow(ctx, cl, queues, count, ttr, wait, ack)
		},
	}
	fl := cmd.Flags()
	fl.Var(newDuration(&ttr, 0), "ttr", "time to run: time to ACK before the job is delivered again, > 0 (default: the server's TTRSecond, 120s unless configured)")
	fl.Var(newDuration(&wait, 10*time.Second), "wait", "how long to wait for a job (long-poll, capped by the server's MaxTimeoutSecond, 600s unless configured); 0 = do not wait (with --follow: poll every 1s)")
	fl.IntVar(&count, "count", 1, "most jobs to take at once (1..100)")
	fl.BoolVar(&ack, "ack", false, "ACK each job once printed")
	fl.BoolVar(&follow, "follow", false, "keep consuming until interrupted")
	serverDefault(fl, "ttr")
	return cmd
}

// follow consumes until ctx is done, retrying failures that may pass.
func (c *cli) follow(ctx context.Context, cl *client.Client, queues []string, count int, ttr, wait time.Duration, ack bool) error {
	if wait == 0 {
		wait = time.Second // never a busy loop
	}
	pause := time.Duration(0)
	for {
		jobs, err := cl.BatchConsume(ctx, queues, count, ttr, wait)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, client.ErrNoJob):
			continue
		case err != nil && permanent(err):
			return err
		case err != nil:
			pause = min(max(2*pause, 100*time.Millisecond), 5*time.Second)
			fmt.Fprintf(c.io.err, "kairos: %v (retrying in %v)\n", err, pause)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		pause = 0
		if err := c.handleJobs(ctx, cl, jobs, ack); err != nil {
			return err
		}
	}
}

// permanent reports whether retrying err cannot help.
func permanent(err error) bool {
	return errors.Is(err, client.ErrBadRequest) || errors.Is(err, client.ErrUnauthorized) ||
		errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrNotFound)
}

// handleJobs prints jobs and ACKs them when asked.
func (c *cli) handleJobs(ctx context.Context, cl *client.Client, jobs []*client.Job, ack bool) error {
	for _, j := range jobs {
		if err := c.printJob(j); err != nil {
			return err
		}
		if ack {
			// A printed job is ACKed even when interrupted meanwhile
			// (bounded by the request timeout), else it would come back.
			if err := cl.AckJob(context.WithoutCancel(ctx), j); err != nil {
				return fmt.Errorf("ack %s: %w", j.ID, err)
			}
		}
	}
	return nil
}

// printJob prints a job: JSON, or a header line and the body.
// firstLine is s up to its first line break, at most 200 characters.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

// writeAttempts writes a job's attempt history, one delivery a line,
// newest first, each error's lines indented below it.
func writeAttempts(b *strings.Builder, as []client.Attempt) {
	for _, a := range as {
		start := "-"
		if a.StartMS > 0 {
			start = time.UnixMilli(a.StartMS).UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(b, "attempt %d %s start=%s duration=%s", a.Delivery, a.Outcome, start, time.Duration(a.DurationMS)*time.Millisecond)
		if a.Worker != "" {
			fmt.Fprintf(b, " worker=%s", a.Worker)
		}
		b.WriteByte('\n')
		if a.Error != "" {
			for _, l := range strings.Split(strings.TrimRight(a.Error, "\n"), "\n") {
				b.WriteString("    " + l + "\n")
			}
		}
	}
}

func (c *cli) printJob(j *client.Job) error {
	if c.jsonOut {
		return c.printJSON(j)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s remain_tries=%d ttl=%s elapsed=%s", j.ID, j.Namespace, j.Queue, j.RemainTries,
		ttlString(j.TTL), (time.Duration(j.ElapsedMS) * time.Millisecond).String())
	if j.Receipt != "" {
		fmt.Fprintf(&b, " receipt=%s", j.Receipt)
	}
	if j.TraceParent != "" {
		fmt.Fprintf(&b, " traceparent=%s", j.TraceParent)
	}
	if j.State != "" {
		fmt.Fprintf(&b, " state=%s", j.State)
	}
	if j.Priority != 0 {
		fmt.Fprintf(&b, " priority=%d", j.Priority)
	}
	if j.Group != "" {
		fmt.Fprintf(&b, " group=%s", j.Group)
	}
	if j.Deliveries != 0 {
		fmt.Fprintf(&b, " deliveries=%d", j.Deliveries)
	}
	if !j.DueAt.IsZero() {
		fmt.Fprintf(&b, " due_at=%s", j.DueAt.UTC().Format(time.RFC3339Nano))
	}
	if j.DeadReason != "" {
		fmt.Fprintf(&b, " dead_reason=%s dead_at=%s", j.DeadReason, j.DeadAt.UTC().Format(time.RFC3339Nano))
	}
	if j.LastError != "" && len(j.Attempts) == 0 {
		fmt.Fprintf(&b, " last_error=%q", firstLine(j.LastError))
	}
	keys := make([]string, 0, len(j.Attributes))
	for k := range j.Attributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, j.Attributes[k])
	}
	b.WriteByte('\n')
	writeAttempts(&b, j.Attempts)
	if utf8.Valid(j.Body) {
		b.Write(j.Body)
	} else {
		fmt.Fprintf(&b, "(binary body of %d bytes; use --json to get it in base64)", len(j.Body))
	}
	b.WriteByte('\n')
	_, err := fmt.Fprint(c.io.out, b.String())
	return err
}

// parseLimit reads a dead-letter limit: a number ≥ 1 or "all".
func parseLimit(s string) (int64, error) {
	if s == "all" {
		return client.AllDead, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, usagef(`--limit must be a number ≥ 1 or "all" (got %q)`, s)
	}
	return n, nil
}

func ttlString(d time.Duration) string {
	if d == 0 {
		return "forever"
	}
	return d.String()
}

func (c *cli) ackCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ack QUEUE JOB_ID...",
		Aliases: []string{"del"},
		Short:   "ACK (delete) jobs: done, never delivered again",
		Long:    "ACK (delete) jobs of QUEUE. ACKing an unknown job is not an error.",
		Args:    queueArgs(cobra.MinimumNArgs(2), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			for _, id := range a[1:] {
				if err := cl.Ack(cmd.Context(), a[0], id); err != nil {
					return err
				}
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"acked": a[1:]})
			}
			return nil
		},
	}
}

func (c *cli) peekCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "peek QUEUE [JOB_ID]",
		Short: "Show the next job of a queue, or a job by ID, without consuming it",
		Long: `Show the job a consume of QUEUE would take next, or job JOB_ID in whatever
state it is. Exits with status 3 when the queue is empty or the job unknown.`,
		Args: queueArgs(cobra.RangeArgs(1, 2), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			var job *client.Job
			if len(a) == 2 {
				job, err = cl.PeekJob(cmd.Context(), a[0], a[1])
			} else {
				job, err = cl.PeekQueue(cmd.Context(), a[0])
			}
			if err != nil {
				return err
			}
			return c.printJob(job)
		},
	}
}

func (c *cli) sizeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "size QUEUE...",
		Aliases: []string{"len"},
		Short:   "Print the number of ready and dead jobs of queues",
		Long:    "Print the number of ready jobs (not delayed or in flight) and of dead jobs of each QUEUE. Needs no token.",
		Args:    queueArgs(cobra.MinimumNArgs(1), -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			for _, q := range a {
				ready, err := cl.QueueSize(cmd.Context(), q)
				if err != nil {
					return err
				}
				dead, err := cl.DeadLetterSize(cmd.Context(), q)
				if err != nil {
					return err
				}
				if c.jsonOut {
					err = c.printJSON(map[string]any{"namespace": cl.Namespace(), "queue": q, "size": ready, "deadletter_size": dead})
				} else {
					_, err = fmt.Fprintf(c.io.out, "%s/%s ready=%d deadletter=%d\n", cl.Namespace(), q, ready, dead)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (c *cli) destroyCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "destroy QUEUE",
		Short: "Delete every ready, delayed and in-flight job of a queue",
		Long:  "Delete every ready, delayed and in-flight job of QUEUE (its dead letter stays). Needs --yes.",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !yes {
				return usagef("destroy deletes every job of %s: add --yes to confirm", a[0])
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			return cl.DestroyQueue(cmd.Context(), a[0])
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm")
	return cmd
}

func (c *cli) deadletterCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "deadletter",
		Aliases: []string{"dlq", "dead"},
		Short:   "Peek at, respawn or delete the dead letter of a queue",
		Long: `A job whose last try was not ACKed within its TTR goes to its queue's dead
letter. Peek at it, move its oldest jobs back to the queue (respawn), or delete
them.`,
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "peek QUEUE",
		Short: "Print the size of the dead letter and its oldest job's ID",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			size, head, err := cl.PeekDeadLetter(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"namespace": cl.Namespace(), "queue": a[0], "deadletter_size": size, "deadletter_head": head})
			}
			_, err = fmt.Fprintf(c.io.out, "size=%d head=%s\n", size, head)
			return err
		},
	})
	var limit, respawnJob string
	var ttl time.Duration
	var rb bulkFlags
	respawn := &cobra.Command{
		Use:     "respawn QUEUE",
		Aliases: []string{"kick"},
		Short:   "Move the oldest dead jobs (or one, --job) back to the queue",
		Long: `Move the --limit oldest dead jobs (a number, or "all") back to the ready queue,
each with one try and a TTL of --ttl (0 = forever). Prints how many moved.
With --job, move that one dead job; with --ids, those jobs; with --matching,
every dead job that --reason and --error select (Kairos).`,
		Args: queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			if rb.used() {
				return c.bulk(cmd, cl, a[0], rb, func(ids []string, m *client.DeadLetterMatch) (*client.DeadLetterBulk, error) {
					return cl.RespawnDeadJobs(cmd.Context(), a[0], ids, m, ttl)
				}, "respawned")
			}
			var n int
			if respawnJob != "" {
				if cmd.Flags().Changed("limit") {
					return usagef("--job and --limit exclude each other")
				}
				err = cl.RespawnDeadJob(cmd.Context(), a[0], respawnJob, ttl)
				n = 1
			} else {
				var lim int64
				if lim, err = parseLimit(limit); err != nil {
					return err
				}
				n, err = cl.RespawnDeadLetter(cmd.Context(), a[0], lim, ttl)
			}
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]int{"count": n})
			}
			_, err = fmt.Fprintf(c.io.out, "respawned %d\n", n)
			return err
		},
	}
	respawn.Flags().StringVarP(&limit, "limit", "l", "1", `how many jobs, or "all"`)
	respawn.Flags().StringVar(&respawnJob, "job", "", "respawn this dead job only (Kairos)")
	respawn.Flags().Var(newDuration(&ttl, 24*time.Hour), "ttl", "TTL of the respawned jobs (0 = forever)")
	rb.add(respawn)
	var delLimit, delJob string
	var db bulkFlags
	del := &cobra.Command{
		Use:   "delete QUEUE",
		Short: "Delete the oldest dead jobs (or one, --job; several, --ids; all that match, --matching)",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			if db.used() {
				return c.bulk(cmd, cl, a[0], db, func(ids []string, m *client.DeadLetterMatch) (*client.DeadLetterBulk, error) {
					return cl.DeleteDeadJobs(cmd.Context(), a[0], ids, m)
				}, "deleted")
			}
			if delJob != "" {
				if cmd.Flags().Changed("limit") {
					return usagef("--job and --limit exclude each other")
				}
				err = cl.DeleteDeadJob(cmd.Context(), a[0], delJob)
			} else {
				var lim int64
				if lim, err = parseLimit(delLimit); err != nil {
					return err
				}
				err = cl.DeleteDeadLetter(cmd.Context(), a[0], lim)
			}
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"msg": "deleted"})
			}
			return nil
		},
	}
	del.Flags().StringVarP(&delLimit, "limit", "l", "1", `how many jobs (the oldest first), or "all"`)
	del.Flags().StringVar(&delJob, "job", "", "delete this dead job only (Kairos)")
	db.add(del)
	var offset, pageSize int64
	var newest bool
	var reason, errText string
	list := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List dead jobs with their bodies and why they died (Kairos)",
		Long: `List the dead jobs of QUEUE, oldest first (newest first with --newest), --limit
(1..100) from --offset, with their bodies, death time and reason; --reason keeps
those that died for it (nacked, ttr_expired or webhook_failed; the server
examines at most 1,000 entries per call, so a page may be short while more
follow); --error keeps those whose last error holds that text (the same bound).
Each job shows its last error. With --json, one job per line; the next page's offset is printed last
(text) or as {"next_offset":N} (JSON), -1 after the last page. With --newest,
--reason or --error the dead letter's size follows it (total=N, or "total" in
JSON).`,
		Args: queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			switch reason {
			case "", client.ReasonNacked, client.ReasonTTRExpired, client.ReasonWebhookFailed:
			default:
				return usageError{fmt.Errorf("--reason %q: nacked, ttr_expired or webhook_failed", reason)}
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			named := newest || reason != "" || errText != ""
			var p *client.DeadLetterPage
			if named {
				p, err = cl.ListDeadLetterPage(cmd.Context(), a[0], client.DeadLetterQuery{Offset: offset, Limit: pageSize, Newest: newest, Reason: reason, Error: errText})
			} else {
				p = &client.DeadLetterPage{}
				p.Jobs, p.NextOffset, err = cl.ListDeadLetter(cmd.Context(), a[0], offset, pageSize)
			}
			if err != nil {
				return err
			}
			for _, j := range p.Jobs {
				if err := c.printJob(j); err != nil {
					return err
				}
			}
			if c.jsonOut {
				if named {
					return c.printJSON(map[string]int64{"next_offset": p.NextOffset, "total": p.Total})
				}
				return c.printJSON(map[string]int64{"next_offset": p.NextOffset})
			}
			if named {
				_, err = fmt.Fprintf(c.io.out, "next_offset=%d total=%d\n", p.NextOffset, p.Total)
				return err
			}
			_, err = fmt.Fprintf(c.io.out, "next_offset=%d\n", p.NextOffset)
			return err
		},
	}
	list.Flags().Int64Var(&offset, "offset", 0, "first entry (from the oldest, or the newest with --newest)")
	list.Flags().Int64VarP(&pageSize, "limit", "l", 20, "page size (1..100)")
	list.Flags().BoolVar(&newest, "newest", false, "newest death first")
	list.Flags().StringVar(&reason, "reason", "", "only the jobs that died for this reason: nacked, ttr_expired or webhook_failed")
	list.Flags().StringVar(&errText, "error", "", "only the jobs whose last error holds this text")
	cmd.AddCommand(respawn, del, list, &cobra.Command{
		Use:   "size QUEUE",
		Short: "Print the size of the dead letter (needs no token)",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			n, err := cl.DeadLetterSize(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"namespace": cl.Namespace(), "queue": a[0], "size": n})
			}
			_, err = fmt.Fprintln(c.io.out, n)
			return err
		},
	})
	return cmd
}

// bulkFlags are the flags of a bulk respawn or delete (Kairos): the jobs
// named, or every job matching the filters.
type bulkFlags struct {
	ids           []string
	matching      bool
	reason, error string
}

func (f *bulkFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.ids, "ids", nil, "these dead jobs (comma-separated IDs, at most 1000)")
	cmd.Flags().BoolVar(&f.matching, "matching", false, "every dead job that --reason and --error select (all without them)")
	cmd.Flags().StringVar(&f.reason, "reason", "", "with --matching: the jobs that died for this reason")
	cmd.Flags().StringVar(&f.error, "error", "", "with --matching: the jobs whose last error holds this text")
}

func (f *bulkFlags) used() bool {
	return len(f.ids) > 0 || f.matching || f.reason != "" || f.error != ""
}

// bulk runs a bulk action, again while the server says more match, and
// prints the count (and the IDs named that were not dead).
func (c *cli) bulk(cmd *cobra.Command, cl *client.Client, queue string, f bulkFlags,
	do func([]string, *client.DeadLetterMatch) (*client.DeadLetterBulk, error), verb string) error {
	if cmd.Flags().Changed("limit") || cmd.Flags().Changed("job") {
		return usagef("--ids and --matching exclude --limit and --job")
	}
	if (len(f.ids) > 0) == f.matching {
		return usagef("name the jobs with --ids, or select them with --matching (and --reason, --error), not both")
	}
	if !f.matching && (f.reason != "" || f.error != "") {
		return usagef("--reason and --error select jobs with --matching")
	}
	var total client.DeadLetterBulk
	for {
		var m *client.DeadLetterMatch
		if f.matching {
			m = &client.DeadLetterMatch{Reason: f.reason, Error: f.error}
		}
		r, err := do(f.ids, m)
		if err != nil {
			return err
		}
		total.Count += r.Count
		total.Missing = append(total.Missing, r.Missing...)
		if !r.More || r.Count == 0 {
			break
		}
	}
	if c.jsonOut {
		return c.printJSON(map[string]any{"count": total.Count, "missing": total.Missing})
	}
	if _, err := fmt.Fprintf(c.io.out, "%s %d\n", verb, total.Count); err != nil {
		return err
	}
	if len(total.Missing) > 0 {
		_, err := fmt.Fprintf(c.io.out, "not dead: %s\n", strings.Join(total.Missing, " "))
		return err
	}
	return nil
}
