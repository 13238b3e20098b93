package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
)

// webhookCmd manages push subscriptions (Kairos, admin API).
func (c *cli) webhookCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "webhook",
		Short: "Manage webhook (push) subscriptions of queues (Kairos, admin API)",
		Long: `A queue with a webhook subscription has its jobs POSTed by Kairos to a URL,
signed with HMAC-SHA256 (X-Kairos-Signature); a 2xx answer ACKs the job, anything
else releases it under the queue's backoff, tries and dead letter.`,
	})
	var pool string
	cmd.PersistentFlags().StringVar(&pool, "pool", "", "pool of the namespace (default: default)")

	var (
		url, secret  string
		concurrency  int
		ttr, timeout time.Duration
	)
	set := &cobra.Command{
		Use:     "set QUEUE",
		Short:   "Create or replace the subscription of QUEUE in --namespace",
		Example: `  kairos webhook set emails --url https://hooks.example/emails --secret s3cret --concurrency 8`,
		Args:    queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(nil)
			if err != nil {
				return err
			}
			if url == "" || secret == "" {
				return usagef("--url and --secret are required")
			}
			// The client leaves zero settings out (the server's
			// defaults): refuse them here rather than let an explicit
			// --concurrency 0 or --ttr 0 become a default.
			if concurrency < 1 || concurrency > 64 {
				return usagef("--concurrency must be 1..64")
			}
			if ttr < 2*time.Millisecond || ttr > 24*time.Hour {
				return usagef("--ttr must be 2ms..24h")
			}
			if cmd.Flags().Changed("timeout") && (timeout < time.Millisecond || timeout >= ttr) {
				return usagef("--timeout must be at least 1ms and shorter than --ttr")
			}
			if !cmd.Flags().Changed("timeout") {
				timeout = 0 // the server's default: 10s, or just under --ttr
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			w, err := adm.SetWebhook(cmd.Context(), client.Webhook{Pool: pool, Namespace: ns, Queue: a[0], URL: url, Secret: secret,
				Concurrency: concurrency, TTR: ttr, Timeout: timeout})
			if err != nil {
				return err
			}
			return c.printWebhooks([]client.Webhook{w})
		},
	}
	fl := set.Flags()
	fl.StringVar(&url, "url", "", "http(s) URL the jobs are POSTed to")
	fl.StringVar(&secret, "secret", "", "HMAC secret of the signature header")
	fl.IntVar(&concurrency, "concurrency", 4, "requests in flight at once, per server instance (1..64)")
	fl.Var(newDuration(&ttr, 30*time.Second), "ttr", "time to run of each delivered job (2ms..24h)")
	fl.Var(newDuration(&timeout, 0), "timeout", "timeout of each request, shorter than --ttr (default: the server's, 10s or --ttr minus 1ms if shorter)")
	fl.Lookup("timeout").DefValue = "" // the help says what the default is

	get := &cobra.Command{
		Use:   "get QUEUE",
		Short: "Show the subscription of QUEUE in --namespace",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(nil)
			if err != nil {
				return err
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			w, err := adm.GetWebhook(cmd.Context(), pool, ns, a[0])
			if err != nil {
				return err
			}
			return c.printWebhooks([]client.Webhook{w})
		},
	}
	del := &cobra.Command{
		Use:   "delete QUEUE",
		Short: "Delete the subscription of QUEUE in --namespace",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ns, err := c.namespaceArg(nil)
			if err != nil {
				return err
			}
			adm, err := c.admin()
			if err != nil {
				return err
			}
			return adm.DeleteWebhook(cmd.Context(), pool, ns, a[0])
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List every subscription",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := c.admin()
			if err != nil {
				return err
			}
			ws, err := adm.Webhooks(cmd.Context())
			if err != nil {
				return err
			}
			return c.printWebhooks(ws)
		},
	}
	cmd.AddCommand(set, get, del, list)
	return cmd
}

func (c *cli) printWebhooks(ws []client.Webhook) error {
	if c.jsonOut {
		out := make([]map[string]any, len(ws))
		for i, w := range ws {
			out[i] = map[string]any{"pool": w.Pool, "namespace": w.Namespace, "queue": w.Queue, "url": w.URL,
				"concurrency": w.Concurrency, "ttr_ms": w.TTR.Milliseconds(), "timeout_ms": w.Timeout.Milliseconds()}
		}
		return c.printJSON(out)
	}
	tw := tabwriter.NewWriter(c.io.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tNAMESPACE\tQUEUE\tURL\tCONCURRENCY\tTTR\tTIMEOUT")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", w.Pool, w.Namespace, w.Queue, w.URL, w.Concurrency, w.TTR, w.Timeout)
	}
	return tw.Flush()
}
