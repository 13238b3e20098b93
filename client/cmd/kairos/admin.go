package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
)

// namespaceArg returns the namespace from an optional argument, else from
// the settings.
func (c *cli) namespaceArg(a []string) (string, error) {
	ns := c.namespace
	if len(a) > 0 && a[0] != "" {
		ns = a[0]
	}
	if ns == "" {
		return "", usagef("no namespace: give NAMESPACE, --namespace (-n) or KAIROS_NAMESPACE")
	}
	return ns, checkNamespace(ns)
}

func (c *cli) tokenCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "token",
		Aliases: []string{"tokens"},
		Short:   "Create, list and delete tokens (admin API)",
		Long: `Create, list and delete the tokens of a namespace through the admin API
(--admin-addr; basic auth with --admin-user and KAIROS_ADMIN_PASSWORD when the
server has [Accounts]).`,
	})
	var opts client.TokenOptions
	var queues, roles string
	create := &cobra.Command{
		Use:   "create [NAMESPACE]",
		Short: "Create a token and print it",
		Example: `  kairos token create demo --description "billing workers"
  kairos token create demo --description consumer --queues emails --roles consume`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(a)
			if err != nil {
				return err
			}
			if opts.Description == "" {
				return usagef("--description is required")
			}
			opts.Queues, opts.Roles = splitList(queues), splitList(roles)
			if err := checkQueues(opts.Queues...); err != nil {
				return usagef("--queues: %v", err)
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			tok, err := adm.CreateToken(cmd.Context(), ns, opts)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]string{"namespace": ns, "token": tok})
			}
			_, err = fmt.Fprintln(c.io.out, tok)
			return err
		},
	}
	fl := create.Flags()
	fl.StringVarP(&opts.Description, "description", "d", "", "what the token is for (required)")
	fl.StringVar(&opts.Pool, "pool", "", "Redis pool of the namespace (default: default)")
	fl.StringVar(&opts.Token, "secret", "", "the token to create (at least 20 characters; default: a fresh one)")
	fl.StringVar(&queues, "queues", "", "comma-separated queues the token is limited to (default: all)")
	fl.StringVar(&roles, "roles", "", "comma-separated roles among publish, consume, manage (default: all)")

	var listPool string
	list := &cobra.Command{
		Use:   "list [NAMESPACE]",
		Short: "List the tokens of a namespace with their descriptions",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(a)
			if err != nil {
				return err
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			tokens, err := adm.ListTokens(cmd.Context(), ns, listPool)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"namespace": ns, "tokens": tokens})
			}
			keys := make([]string, 0, len(tokens))
			for k := range tokens {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			tw := tabwriter.NewWriter(c.io.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOKEN\tDESCRIPTION")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\n", k, tokens[k])
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&listPool, "pool", "", "pool (tokens are then shown as pool:token)")

	del := &cobra.Command{
		Use:   "delete [NAMESPACE] TOKEN",
		Short: "Delete a token (and its rate limit)",
		Args:  args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(a[:len(a)-1])
			if err != nil {
				return err
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			if err := adm.DeleteToken(cmd.Context(), ns, a[len(a)-1]); err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]string{"namespace": ns, "deleted": a[len(a)-1]})
			}
			return nil
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *cli) limitsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "limits",
		Short: "List the rate limits of every token (admin API)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := c.admin()
			if err != nil {
				return err
			}
			limits, err := adm.Limits(cmd.Context(), false)
			if err != nil {
				return err
			}
			if c.jsonOut {
				out := make([]map[string]any, len(limits))
				for i, l := range limits {
					out[i] = map[string]any{"namespace": l.Namespace, "token": l.Token, "read": l.Limit.Read,
						"write": l.Limit.Write, "write_jobs": l.Limit.WriteJobs, "interval": int64(l.Limit.Interval / time.Second)}
				}
				return c.printJSON(out)
			}
			tw := tabwriter.NewWriter(c.io.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAMESPACE\tTOKEN\tREAD\tWRITE\tWRITE JOBS\tINTERVAL")
			for _, l := range limits {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", l.Namespace, l.Token, l.Limit.Read, l.Limit.Write, l.Limit.WriteJobs, l.Limit.Interval)
			}
			return tw.Flush()
		},
	}
}

func (c *cli) poolsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pools",
		Short: "List the server's pools (admin API)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := c.admin()
			if err != nil {
				return err
			}
			pools, err := adm.Pools(cmd.Context())
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(pools)
			}
			for _, p := range pools {
				if _, err := fmt.Fprintln(c.io.out, p); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (c *cli) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the versions of this tool and of the server",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := map[string]any{"client": map[string]string{"version": version, "build_commit": buildCommit, "build_date": buildDate}}
			serverLine := "server: unreachable"
			if adm, err := c.admin(); err == nil {
				if v, err := adm.Version(cmd.Context()); err == nil {
					out["server"] = v
					serverLine = fmt.Sprintf("server: %s (commit %s, built %s)", v.Version, v.BuildCommit, v.BuildDate)
				} else {
					serverLine = "server: " + err.Error()
				}
			}
			if c.jsonOut {
				return c.printJSON(out)
			}
			_, err := fmt.Fprintf(c.io.out, "kairos %s (commit %s, built %s)\n%s\n", version, buildCommit, buildDate, serverLine)
			return err
		},
	}
}

// queueStat is one row of the stats table.
type queueStat struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Size      int    `json:"size"`
	Dead      int    `json:"deadletter_size"`
	Err       string `json:"error,omitempty"`
}

func (c *cli) statsCmd() *cobra.Command {
	var (
		pool     string
		interval time.Duration
		once     bool
		watch    bool
	)
	cmd := &cobra.Command{
		Use:   "stats [NAMESPACE...]",
		Short: "A live table of queue sizes",
		Long: `Show the ready and dead jobs of every queue of a pool (found through the admin
API's /info), or of the given namespaces only, refreshed every --interval.

On a terminal the table is redrawn until interrupted; otherwise (or with
--once) it is printed once. --watch keeps printing when not on a terminal;
with --json each refresh is one JSON array on its own line.`,
		Args: args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			for _, ns := range a {
				if err := checkNamespace(ns); err != nil {
					return err
				}
			}
			if interval < 100*time.Millisecond {
				return usagef("--interval must be at least 100ms")
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			live := !once && (watch || isTerminal(c.io.out))
			ctx := cmd.Context()
			prev := map[string]int{}
			last := time.Time{}
			for {
				rows, err := c.collectStats(ctx, adm, pool, a)
				if err != nil {
					if ctx.Err() != nil && live {
						return nil
					}
					return err
				}
				if err := c.printStats(rows, prev, time.Since(last), live && !c.jsonOut && isTerminal(c.io.out)); err != nil {
					return err
				}
				for _, r := range rows {
					prev[r.Namespace+"/"+r.Queue] = r.Size
				}
				last = time.Now()
				if !live {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pool, "pool", "", "pool to show (default: default)")
	fl.Var(newDuration(&interval, time.Second), "interval", "refresh interval")
	fl.BoolVar(&once, "once", false, "print once and exit")
	fl.BoolVar(&watch, "watch", false, "keep refreshing even when stdout is not a terminal")
	return cmd
}

// collectStats reads the sizes of every queue of pool (of namespaces only,
// when given), eight requests at a time.
func (c *cli) collectStats(ctx context.Context, adm *client.Admin, pool string, namespaces []string) ([]queueStat, error) {
	info, err := adm.Info(ctx, pool)
	if err != nil {
		return nil, err
	}
	var rows []queueStat
	for ns, queues := range info {
		if len(namespaces) > 0 && !slices.Contains(namespaces, ns) {
			continue
		}
		for _, q := range queues {
			rows = append(rows, queueStat{Namespace: ns, Queue: q})
		}
	}
	slices.SortFunc(rows, func(a, b queueStat) int {
		if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
			return n
		}
		return strings.Compare(a.Queue, b.Queue)
	})
	// The size routes need no token, but a pool prefix picks the pool.
	token := c.token
	if pool != "" && pool != "default" {
		token = pool + ":"
	}
	clients := map[string]*client.Client{}
	for _, r := range rows {
		if clients[r.Namespace] == nil {
			opts := append(c.options(), client.WithNamespace(r.Namespace))
			if token != "" {
				opts = append(opts, client.WithToken(token))
			}
			cl, err := client.New(c.addr, opts...)
			if err != nil {
				return nil, usageError{err}
			}
			clients[r.Namespace] = cl
		}
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range rows {
		wg.Add(1)
		sem <- struct{}{}
		go func(r *queueStat) {
			defer wg.Done()
			defer func() { <-sem }()
			cl := clients[r.Namespace]
			var err error
			if r.Size, err = cl.QueueSize(ctx, r.Queue); err == nil {
				r.Dead, err = cl.DeadLetterSize(ctx, r.Queue)
			}
			if err != nil {
				r.Err = err.Error()
			}
		}(&rows[i])
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

// printStats prints one refresh of the table; redraw clears the terminal
// first.
func (c *cli) printStats(rows []queueStat, prev map[string]int, since time.Duration, redraw bool) error {
	if rows == nil {
		rows = []queueStat{}
	}
	if c.jsonOut {
		return c.printJSON(rows)
	}
	var b strings.Builder
	if redraw {
		b.WriteString("\x1b[H\x1b[2J")
		fmt.Fprintf(&b, "kairos stats  %s  (%s)\n\n", c.addr, time.Now().Format("15:04:05"))
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "NAMESPACE\tQUEUE\tREADY\tCHANGE/s\tDEADLETTER\t")
	var total, dead int
	for _, r := range rows {
		change := "-"
		if p, ok := prev[r.Namespace+"/"+r.Queue]; ok && since > 0 {
			change = fmt.Sprintf("%+.1f", float64(r.Size-p)/since.Seconds())
		}
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\n", r.Namespace, r.Queue, "error: "+r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t\n", r.Namespace, r.Queue, r.Size, change, r.Dead)
		total += r.Size
		dead += r.Dead
	}
	fmt.Fprintf(tw, "total\t%d queues\t%d\t\t%d\t\n", len(rows), total, dead)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprint(c.io.out, b.String())
	return err
}
