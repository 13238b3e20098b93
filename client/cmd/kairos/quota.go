package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
)

// quotaCmd reads and sets namespace quotas (Kairos, admin API).
func (c *cli) quotaCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "quota",
		Aliases: []string{"quotas"},
		Short:   "Show and set what namespaces may hold in a pool (Kairos, admin API)",
		Long: `A namespace's quota bounds the jobs it holds in a pool (ready, delayed, in
flight and dead) and their bytes as stored (body and metadata); 0 is no limit. A publish that would
exceed it is refused with 429 "namespace quota exceeded: max_jobs N" (exit status 6),
writing nothing; an ACK gives the room back at once. A namespace without a quota of
its own has the pool's default ([Pool.NAME] DefaultMaxJobs and DefaultMaxBytes).`,
	})
	var pool string
	cmd.PersistentFlags().StringVar(&pool, "pool", "", "pool of the namespace (default: default; list: every pool)")

	get := &cobra.Command{
		Use:   "get [NAMESPACE]",
		Short: "Show the namespace's quota (its own or the default) and usage",
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
			q, err := adm.Quota(cmd.Context(), pool, ns)
			if err != nil {
				return err
			}
			return c.printQuotas([]client.NamespaceQuota{q})
		},
	}
	var maxJobs, maxBytes int64
	set := &cobra.Command{
		Use:   "set [NAMESPACE] --max-jobs N --max-bytes B",
		Short: "Set the namespace's own quota (replaces the default; 0: no limit)",
		Example: `  kairos quota set billing --max-jobs 100000 --max-bytes 1073741824
  kairos quota set batch --max-jobs 0 --max-bytes 0   # exempt from the pool's default`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(a)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("max-jobs") && !cmd.Flags().Changed("max-bytes") {
				return usagef("give --max-jobs, --max-bytes or both (0: no limit)")
			}
			if maxJobs < 0 || maxBytes < 0 {
				return usagef("--max-jobs and --max-bytes must be >= 0 (0: no limit)")
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			q, err := adm.SetQuota(cmd.Context(), pool, ns, client.Quota{MaxJobs: maxJobs, MaxBytes: maxBytes})
			if err != nil {
				return err
			}
			return c.printQuotas([]client.NamespaceQuota{q})
		},
	}
	set.Flags().Int64Var(&maxJobs, "max-jobs", 0, "jobs the namespace may hold (0: no limit)")
	set.Flags().Int64Var(&maxBytes, "max-bytes", 0, "bytes the namespace may hold, as stored: bodies and metadata (0: no limit)")
	del := &cobra.Command{
		Use:   "delete [NAMESPACE]",
		Short: "Delete the namespace's own quota: the pool's default applies",
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
			return adm.DeleteQuota(cmd.Context(), pool, ns)
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "Every namespace's quota and usage (of --pool, or of every pool)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := c.admin()
			if err != nil {
				return err
			}
			l, err := adm.Quotas(cmd.Context(), pool)
			if err != nil {
				return err
			}
			return c.printQuotas(l.Namespaces)
		},
	}
	cmd.AddCommand(get, set, del, list)
	return cmd
}

// printQuotas prints quotas and usage: a table, or with --json an array
// of the server's objects.
func (c *cli) printQuotas(qs []client.NamespaceQuota) error {
	if c.jsonOut {
		out := make([]map[string]any, len(qs))
		for i, q := range qs {
			src := "namespace"
			if q.Default {
				src = "default"
			}
			out[i] = map[string]any{"pool": q.Pool, "namespace": q.Namespace, "jobs": q.Jobs, "bytes": q.Bytes,
				"max_jobs": q.Quota.MaxJobs, "max_bytes": q.Quota.MaxBytes, "source": src}
		}
		return c.printJSON(out)
	}
	limit := func(n int64) string {
		if n <= 0 {
			return "-"
		}
		return strconv.FormatInt(n, 10)
	}
	tw := tabwriter.NewWriter(c.io.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tNAMESPACE\tJOBS\tMAX_JOBS\tBYTES\tMAX_BYTES\tQUOTA")
	for _, q := range qs {
		src := "own"
		if q.Default {
			src = "default"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", q.Pool, q.Namespace, q.Jobs, limit(q.Quota.MaxJobs), q.Bytes, limit(q.Quota.MaxBytes), src)
	}
	return tw.Flush()
}
