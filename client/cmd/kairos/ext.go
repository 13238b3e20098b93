package main

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
)

// The commands of the Kairos extensions (not available on lmstfy).

// receiptJob is the job a release or touch names.
func receiptJob(queue, id, receipt string) (*client.Job, error) {
	if receipt == "" {
		return nil, usagef("--receipt is required (consume prints it: receipt=…)")
	}
	return &client.Job{ID: id, Queue: queue, Receipt: receipt}, nil
}

func (c *cli) releaseCmd() *cobra.Command {
	var (
		receipt string
		delay   time.Duration
		keepTry bool
		errText string
	)
	cmd := &cobra.Command{
		Use:     "release QUEUE JOB_ID --receipt RECEIPT",
		Aliases: []string{"nack"},
		Short:   "Hand a consumed job back at once or after a delay (Kairos)",
		Long: `Hand back a consumed job (a nack) instead of waiting for its TTR: ready again
at once, after --delay, or after the queue's backoff policy when --delay is not
given. --keep-try gives back the try the delivery spent. --error says why: the
text goes into the job's attempt history (peek JOB_ID, the dead letter's last
error; at most 4096 bytes kept). The receipt comes from the consume output.`,
		Args: queueArgs(cobra.ExactArgs(2), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			job, err := receiptJob(a[0], a[1], receipt)
			if err != nil {
				return err
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			var opts []client.ReleaseOption
			if cmd.Flags().Changed("delay") {
				opts = append(opts, client.ReleaseDelay(delay))
			}
			if keepTry {
				opts = append(opts, client.KeepTry())
			}
			if errText != "" {
				opts = append(opts, client.ReleaseError(errText))
			}
			return cl.Release(cmd.Context(), job, opts...)
		},
	}
	cmd.Flags().StringVar(&receipt, "receipt", "", "receipt of the delivery (required)")
	cmd.Flags().Var(newDuration(&delay, 0), "delay", "ready again after this, 0 = at once (default: after the queue's backoff policy, at once without one)")
	serverDefault(cmd.Flags(), "delay")
	cmd.Flags().BoolVar(&keepTry, "keep-try", false, "give back the try this delivery spent")
	cmd.Flags().StringVar(&errText, "error", "", "why the job is handed back (kept in its attempt history)")
	return cmd
}

func (c *cli) touchCmd() *cobra.Command {
	var (
		receipt string
		ttr     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "touch QUEUE JOB_ID --receipt RECEIPT",
		Short: "Restart the TTR of a consumed job (Kairos)",
		Long:  "Restart the time to run of a consumed job from now, for --ttr (default: the server's). Prints when it now expires.",
		Args:  queueArgs(cobra.ExactArgs(2), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			job, err := receiptJob(a[0], a[1], receipt)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("ttr") && ttr <= 0 {
				return usagef("--ttr must be > 0 (leave it out for the server's default)")
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			due, err := cl.Touch(cmd.Context(), job, ttr)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"job_id": job.ID, "due_at_ms": due.UnixMilli()})
			}
			_, err = fmt.Fprintln(c.io.out, due.UTC().Format(time.RFC3339Nano))
			return err
		},
	}
	cmd.Flags().StringVar(&receipt, "receipt", "", "receipt of the delivery (required)")
	cmd.Flags().Var(newDuration(&ttr, 0), "ttr", "new time to run from now, > 0 (default: the server's TTRSecond, 120s unless configured)")
	serverDefault(cmd.Flags(), "ttr")
	return cmd
}

func (c *cli) pauseCmds() []*cobra.Command {
	mk := func(use, short string, pause bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " QUEUE...",
			Short: short,
			Args:  queueArgs(cobra.MinimumNArgs(1), -1),
			RunE: func(cmd *cobra.Command, a []string) error {
				cl, err := c.client("")
				if err != nil {
					return err
				}
				for _, q := range a {
					if pause {
						err = cl.PauseQueue(cmd.Context(), q)
					} else {
						err = cl.ResumeQueue(cmd.Context(), q)
					}
					if err != nil {
						return err
					}
				}
				return nil
			},
		}
	}
	return []*cobra.Command{
		mk("pause", "Stop queues from handing out jobs; publishing continues (Kairos)", true),
		mk("resume", "Let paused queues hand out jobs again (Kairos)", false),
	}
}

func (c *cli) cancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel QUEUE JOB_KEY",
		Short: "Delete the job published with a job key (Kairos)",
		Long:  "Delete the live job published to QUEUE with --job-key JOB_KEY, and print its ID. Exit status 3 when there is none.",
		Args:  queueArgs(cobra.ExactArgs(2), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			id, err := cl.CancelJobKey(cmd.Context(), a[0], a[1])
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]string{"job_id": id, "msg": "cancelled"})
			}
			_, err = fmt.Fprintln(c.io.out, id)
			return err
		},
	}
}

func (c *cli) queueConfigCmd() *cobra.Command {
	var (
		pool, backoff  string
		deadTTL        time.Duration
		pause, unpause bool
		shards         int
		maxInFlight    int
		groupMax       int
		weights        []string
		clearWeights   bool
	)
	cmd := &cobra.Command{
		Use:   "queue-config QUEUE",
		Short: "Show or change a queue's backoff policy, dead TTL, pause, shards and in-flight limits (Kairos, admin API)",
		Long: `Show the settings of QUEUE in --namespace, or change those given:
  --backoff   retry policy when a TTR expires or a job is released without delay:
              none, fixed:30s, exponential:1s,factor=2,max=10m,jitter=0.2, or a
              ladder such as 10s,30s,1m,5m
  --dead-ttl  how long dead jobs are kept (0 = forever)
  --paused / --unpaused
  --shards    spread the queue over N shards, 1..64 (1 = unsharded): a hot
              queue over several masters of a Redis Cluster; ordering is then
              per shard
  --max-in-flight        jobs of the queue in flight at once, across every
                         server (0 = no limit; at least the queue's shards)
  --group-max-in-flight  jobs of each group in flight at once (0 = no limit)
  --group-weight G=W     weight of group G in the round robin, 1..100
                         (repeatable; replaces the queue's weights)
  --clear-group-weights  every group weighs 1 again`,
		Example: `  kairos queue-config emails --backoff exponential:1s,factor=2,max=5m --dead-ttl 168h
  kairos queue-config partner-api --max-in-flight 5 --group-max-in-flight 2 --group-weight vip=5`,
		Args: queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(nil)
			if err != nil {
				return err
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			var patch client.QueueConfigPatch
			if fl.Changed("backoff") {
				patch.Backoff = &backoff
			}
			if fl.Changed("dead-ttl") {
				patch.DeadTTL = &deadTTL
			}
			if pause && unpause {
				return usagef("--paused and --unpaused exclude each other")
			}
			if pause || unpause {
				patch.Paused = &pause
			}
			if fl.Changed("shards") {
				if shards < 1 || shards > 64 {
					return usagef("--shards must be 1..64")
				}
				patch.Shards = &shards
			}
			if fl.Changed("max-in-flight") {
				if maxInFlight < 0 {
					return usagef("--max-in-flight must not be negative")
				}
				patch.MaxInFlight = &maxInFlight
			}
			if fl.Changed("group-max-in-flight") {
				if groupMax < 0 {
					return usagef("--group-max-in-flight must not be negative")
				}
				patch.GroupMaxInFlight = &groupMax
			}
			if clearWeights && len(weights) > 0 {
				return usagef("--group-weight and --clear-group-weights exclude each other")
			}
			if clearWeights {
				patch.GroupWeights = map[string]int{}
			}
			for _, gw := range weights {
				g, w, ok := strings.Cut(gw, "=")
				n, err := strconv.Atoi(w)
				if !ok || g == "" || err != nil {
					return usagef("--group-weight wants GROUP=WEIGHT, got %q", gw)
				}
				if patch.GroupWeights == nil {
					patch.GroupWeights = map[string]int{}
				}
				patch.GroupWeights[g] = n
			}
			var cfg client.QueueConfig
			if reflect.ValueOf(patch).IsZero() {
				cfg, err = adm.QueueConfig(cmd.Context(), pool, ns, a[0])
			} else {
				cfg, err = adm.SetQueueConfig(cmd.Context(), pool, ns, a[0], patch)
			}
			if err != nil {
				return err
			}
			if c.jsonOut {
				out := map[string]any{"backoff": cfg.Backoff, "dead_ttl_ms": cfg.DeadTTL.Milliseconds(), "paused": cfg.Paused, "shards": max(cfg.Shards, 1)}
				if cfg.MaxInFlight > 0 {
					out["max_in_flight"] = cfg.MaxInFlight
				}
				if cfg.GroupMaxInFlight > 0 {
					out["group_max_in_flight"] = cfg.GroupMaxInFlight
				}
				if len(cfg.GroupWeights) > 0 {
					out["group_weights"] = cfg.GroupWeights
				}
				return c.printJSON(out)
			}
			line := fmt.Sprintf("backoff=%s dead_ttl=%s paused=%t shards=%d", cfg.Backoff, cfg.DeadTTL, cfg.Paused, max(cfg.Shards, 1))
			if cfg.MaxInFlight > 0 {
				line += fmt.Sprintf(" max_in_flight=%d", cfg.MaxInFlight)
			}
			if cfg.GroupMaxInFlight > 0 {
				line += fmt.Sprintf(" group_max_in_flight=%d", cfg.GroupMaxInFlight)
			}
			if len(cfg.GroupWeights) > 0 {
				gs := slices.Sorted(maps.Keys(cfg.GroupWeights))
				ws := make([]string, len(gs))
				for i, g := range gs {
					ws[i] = g + "=" + strconv.Itoa(cfg.GroupWeights[g])
				}
				line += " group_weights=" + strings.Join(ws, ",")
			}
			_, err = fmt.Fprintln(c.io.out, line)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pool, "pool", "", "pool of the namespace (default: default)")
	fl.StringVar(&backoff, "backoff", "", "retry policy: none, fixed:30s, exponential:1s,factor=2,max=10m,jitter=0.2, or a ladder 10s,30s,1m (left out: unchanged)")
	fl.Var(newDuration(&deadTTL, 0), "dead-ttl", "how long dead jobs are kept, 0 = forever (left out: unchanged)")
	serverDefault(fl, "dead-ttl")
	fl.BoolVar(&pause, "paused", false, "pause the queue")
	fl.BoolVar(&unpause, "unpaused", false, "resume the queue")
	fl.IntVar(&shards, "shards", 0, "spread the queue over this many shards, 1..64 (left out: unchanged)")
	fl.IntVar(&maxInFlight, "max-in-flight", 0, "jobs of the queue in flight at once, 0 = no limit (left out: unchanged)")
	fl.IntVar(&groupMax, "group-max-in-flight", 0, "jobs of each group in flight at once, 0 = no limit (left out: unchanged)")
	fl.StringArrayVar(&weights, "group-weight", nil, "GROUP=WEIGHT, 1..100, repeatable: replaces the queue's group weights")
	fl.BoolVar(&clearWeights, "clear-group-weights", false, "remove the queue's group weights")
	return cmd
}

func (c *cli) queueGroupsCmd() *cobra.Command {
	var (
		pool  string
		limit int
	)
	cmd := &cobra.Command{
		Use:   "queue-groups QUEUE",
		Short: "Show a queue's groups, biggest first: jobs ready and in flight, and the limits (Kairos, admin API)",
		Long: `Show the groups of QUEUE in --namespace that have a job ready or in flight,
biggest (ready + in flight) first, with the queue's in-flight count and limits.
The default group (jobs published without --group) is shown as "(default)".`,
		Example: `  kairos queue-groups exports --limit 50`,
		Args:    queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(nil)
			if err != nil {
				return err
			}
			if limit < 1 || limit > 500 {
				return usagef("--limit must be 1..500")
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			g, err := adm.QueueGroups(cmd.Context(), pool, ns, a[0], limit)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(g)
			}
			limitOf := func(n int) string {
				if n == 0 {
					return "none"
				}
				return strconv.Itoa(n)
			}
			w := tabwriter.NewWriter(c.io.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "in flight %d, max_in_flight %s, group_max_in_flight %s, %d groups\n", g.InFlight, limitOf(g.MaxInFlight), limitOf(g.GroupMaxInFlight), g.Total)
			fmt.Fprintln(w, "GROUP\tREADY\tIN FLIGHT\tWEIGHT\tLIMITED")
			for _, s := range g.Groups {
				name := s.Group
				if name == "" {
					name = "(default)"
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%t\n", name, s.Ready, s.InFlight, s.Weight, s.Limited)
			}
			if g.Truncated {
				fmt.Fprintf(w, "(%d more)\n", g.Total-len(g.Groups))
			}
			return w.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pool, "pool", "", "pool of the namespace (default: default)")
	fl.IntVar(&limit, "limit", 20, "show at most this many groups, 1..500")
	return cmd
}
