package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
)

// scheduleCmd manages schedules (periodic jobs, Kairos).
func (c *cli) scheduleCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "schedule",
		Aliases: []string{"schedules", "cron"},
		Short:   "Manage schedules: jobs published on a cron expression (Kairos)",
		Long: `A schedule publishes its job to QUEUE once per tick of a cron expression,
exactly once however many servers run. The token needs publish rights on the
queue.`,
	})

	var (
		f                publishFlags
		spec, tz, missed string
	)
	set := &cobra.Command{
		Use:     "set QUEUE NAME [BODY] --cron SPEC",
		Aliases: []string{"put", "create"},
		Short:   "Create or replace schedule NAME of QUEUE",
		Long: `Create or replace schedule NAME of QUEUE. --cron takes a 5-field expression
("0 2 * * *"), a 6-field one with seconds first ("*/10 * * * * *"), or a
descriptor ("@every 30s", "@hourly", "@daily"); --tz the IANA time zone it is
read in (default UTC); --missed what happens to ticks missed while no server
ran: skip (default) or last (fire the latest once). The body and --ttl,
--tries, --priority, --group and --attr are the job's, as for publish; its TTL counts
from the tick. A replace keeps the schedule's state and pause.`,
		Example: `  kairos schedule set reports nightly '{"report":"daily"}' --cron '0 2 * * *' --tz Europe/Berlin --ttl 1h
  kairos schedule set metrics flush --cron '@every 30s' --body-file flush.json`,
		Args: queueArgs(cobra.RangeArgs(2, 3), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if spec == "" {
				return usagef("--cron is required")
			}
			fl := cmd.Flags()
			f.hasTTL, f.hasTries, f.hasPriority, f.hasGroup = fl.Changed("ttl"), fl.Changed("tries"), fl.Changed("priority"), fl.Changed("group")
			opts, err := f.options()
			if err != nil {
				return err
			}
			body, err := c.body(append([]string{a[0]}, a[2:]...), f.bodyFile)
			if err != nil {
				return err
			}
			cl, err := c.client("")
			if err != nil {
				return err
			}
			s, err := cl.PutSchedule(cmd.Context(), a[0], a[1], client.ScheduleSpec{Cron: spec, TZ: tz, Missed: missed}, body, opts...)
			if err != nil {
				return err
			}
			return c.printSchedules([]*client.Schedule{s})
		},
	}
	fl := set.Flags()
	fl.StringVar(&spec, "cron", "", "cron expression or @every/@hourly-style descriptor (required)")
	fl.StringVar(&tz, "tz", "", "IANA time zone of the expression (default UTC)")
	fl.StringVar(&missed, "missed", "", "ticks missed while no server ran: skip or last (default skip)")
	fl.Var(newDuration(&f.ttl, 0), "ttl", "each job's time to live from its tick, 0 = forever (default: the server's TTLSecond)")
	fl.IntVar(&f.tries, "tries", 0, "deliveries of each job, 1..65535 (default: the server's TriesNum)")
	fl.StringArrayVar(&f.attrs, "attr", nil, "attribute key=value (repeatable, at most 16)")
	fl.IntVar(&f.priority, "priority", 0, "priority of each job within the queue, 0..255")
	fl.StringVar(&f.group, "group", "", "each job's group in the queue (default: none)")
	fl.StringVar(&f.bodyFile, "body-file", "", "read the body from this file (- for stdin)")
	serverDefault(fl, "ttl")

	one := func(use, short string, run func(cl *client.Client, cmd *cobra.Command, queue, name string) (*client.Schedule, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " QUEUE NAME",
			Short: short,
			Args:  queueArgs(cobra.ExactArgs(2), 1),
			RunE: func(cmd *cobra.Command, a []string) error {
				cl, err := c.client("")
				if err != nil {
					return err
				}
				s, err := run(cl, cmd, a[0], a[1])
				if err != nil || s == nil {
					return err
				}
				return c.printSchedules([]*client.Schedule{s})
			},
		}
	}
	get := one("get", "Show schedule NAME of QUEUE", func(cl *client.Client, cmd *cobra.Command, q, n string) (*client.Schedule, error) {
		return cl.GetSchedule(cmd.Context(), q, n)
	})
	del := one("delete", "Delete schedule NAME of QUEUE (the jobs it published stay)", func(cl *client.Client, cmd *cobra.Command, q, n string) (*client.Schedule, error) {
		return nil, cl.DeleteSchedule(cmd.Context(), q, n)
	})
	del.Aliases = []string{"rm"}
	pause := one("pause", "Pause schedule NAME of QUEUE: no tick fires", func(cl *client.Client, cmd *cobra.Command, q, n string) (*client.Schedule, error) {
		return cl.PauseSchedule(cmd.Context(), q, n)
	})
	resume := one("resume", "Resume schedule NAME of QUEUE from the next tick after now", func(cl *client.Client, cmd *cobra.Command, q, n string) (*client.Schedule, error) {
		return cl.ResumeSchedule(cmd.Context(), q, n)
	})
	list := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List the schedules of QUEUE with their next tick and last job",
		Args:  queueArgs(cobra.ExactArgs(1), 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client("")
			if err != nil {
				return err
			}
			ss, err := cl.ListSchedules(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			return c.printSchedules(ss)
		},
	}
	cmd.AddCommand(set, get, list, del, pause, resume)
	return cmd
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func (c *cli) printSchedules(ss []*client.Schedule) error {
	if c.jsonOut {
		out := make([]map[string]any, len(ss))
		for i, s := range ss {
			m := map[string]any{"namespace": s.Namespace, "queue": s.Queue, "name": s.Name, "cron": s.Cron,
				"tz": s.TZ, "missed": s.Missed, "paused": s.Paused, "last_job_id": s.LastJobID, "fired": s.Fired,
				"next_at": nil, "last_tick_at": nil}
			if !s.NextAt.IsZero() {
				m["next_at"] = s.NextAt.UTC().Format(time.RFC3339)
			}
			if !s.LastTickAt.IsZero() {
				m["last_tick_at"] = s.LastTickAt.UTC().Format(time.RFC3339)
			}
			out[i] = m
		}
		return c.printJSON(out)
	}
	tw := tabwriter.NewWriter(c.io.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tNAME\tCRON\tTZ\tMISSED\tPAUSED\tNEXT\tLAST TICK\tLAST JOB\tFIRED")
	for _, s := range ss {
		last := s.LastJobID
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\t%s\t%d\n", s.Queue, s.Name, s.Cron, s.TZ, s.Missed, s.Paused,
			fmtTime(s.NextAt), fmtTime(s.LastTickAt), last, s.Fired)
	}
	return tw.Flush()
}
