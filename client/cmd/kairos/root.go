package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/client/otelclient"
)

// Exit statuses scripts can rely on.
const (
	exitOK          = 0   // success
	exitFailure     = 1   // network or server failure, anything else
	exitUsage       = 2   // bad command line, or a request the server refused as bad (400, 413)
	exitNotFound    = 3   // no job within the timeout, empty queue, unknown job
	exitAuth        = 4   // missing, unknown or out-of-scope token; refused admin account (401, 403)
	exitRateLimited = 5   // the token's rate limit (429)
	exitQuota       = 6   // the namespace's quota refused a publish (429, Kairos)
	exitInterrupted = 130 // interrupted (Ctrl-C) before finishing
)

// Defaults of the settings.
const (
	defaultAddr      = "127.0.0.1:7777"
	defaultAdminAddr = "127.0.0.1:7778"
)

// stdio are the command's streams.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// cli holds the global settings and streams of one invocation.
type cli struct {
	io     stdio
	getenv func(string) string

	addr, token, namespace string
	adminAddr              string
	adminUser, adminPass   string
	// caFile is --ca-file: the CA of https:// servers; tlsConfig trusts
	// it (nil without it: the system's roots).
	caFile    string
	tlsConfig *tls.Config
	jsonOut   bool
	timeout   time.Duration

	httpClient *http.Client
}

// usageError marks errors of the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// args wraps a cobra argument check so that its errors are usage errors.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// run executes one invocation and returns its exit status.
func run(ctx context.Context, argv []string, s stdio, getenv func(string) string) int {
	c := &cli{io: s, getenv: getenv}
	root := c.rootCmd()
	root.SetArgs(argv)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(ctx, err)
	c.printError(err, code)
	return code
}

// exitCode maps an error to the documented exit status.
func exitCode(ctx context.Context, err error) int {
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, client.ErrNoJob), errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		return exitAuth
	case errors.Is(err, client.ErrRateLimited):
		return exitRateLimited
	case errors.Is(err, client.ErrQuotaExceeded):
		return exitQuota
	case errors.Is(err, client.ErrBadRequest):
		return exitUsage
	}
	return exitFailure
}

// printError writes err to stderr: "kairos: …", or one JSON object with
// --json.
func (c *cli) printError(err error, code int) {
	if !c.jsonOut {
		fmt.Fprintf(c.io.err, "kairos: %s\n", strings.TrimPrefix(err.Error(), "kairos: "))
		if code == exitUsage {
			var ue usageError
			if errors.As(err, &ue) {
				fmt.Fprintln(c.io.err, "Run 'kairos --help' (or 'kairos COMMAND --help') for usage.")
			}
		}
		return
	}
	out := map[string]any{"error": err.Error(), "exit_code": code}
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		out["status"] = apiErr.Status
		out["message"] = apiErr.Message
		out["request_id"] = apiErr.RequestID
	}
	enc := json.NewEncoder(c.io.err)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
}

const rootLong = `kairos talks to a Kairos (or lmstfy) server: publish and consume jobs, peek at
queues, manage dead letters, tokens and pools, and watch queue sizes live.

Settings come from flags or, when a flag is not given, from the environment:

  --addr        KAIROS_ADDR            public API        (default ` + defaultAddr + `)
  --token       KAIROS_TOKEN           token ([pool:]secret)
  --namespace   KAIROS_NAMESPACE       namespace
  --admin-addr  KAIROS_ADMIN_ADDR      admin API         (default ` + defaultAdminAddr + `)
  --admin-user  KAIROS_ADMIN_USER      admin basic-auth account, when the server has [Accounts]
                KAIROS_ADMIN_PASSWORD  its password
  --ca-file     KAIROS_CA_FILE         CA certificates (PEM) to trust for https:// addresses,
                                       instead of the system's

Durations accept Go syntax (500ms, 30s, 1h30m) or a plain number of seconds.

Exit status: 0 success; 1 network or server failure; 2 bad command line or a
request the server refused (400/413); 3 no job, empty queue or not found;
4 unauthorized or forbidden; 5 rate limited; 130 interrupted.`

func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kairos",
		Short:         "Command-line tool of the Kairos job queue",
		Long:          rootLong,
		Version:       fmt.Sprintf("%s (commit %s, built %s)", version, buildCommit, buildDate),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) > 0 {
				return usagef("unknown command %q for %q", a[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(c.io.err)
			_ = cmd.Help()
			return usagef("missing command")
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return c.resolve(cmd) },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVar(&c.addr, "addr", defaultAddr, "public API address (env KAIROS_ADDR)")
	f.StringVar(&c.token, "token", "", "token, [pool:]secret (env KAIROS_TOKEN)")
	f.StringVarP(&c.namespace, "namespace", "n", "", "namespace (env KAIROS_NAMESPACE)")
	f.StringVar(&c.adminAddr, "admin-addr", defaultAdminAddr, "admin API address (env KAIROS_ADMIN_ADDR)")
	f.StringVar(&c.adminUser, "admin-user", "", "admin basic-auth user (env KAIROS_ADMIN_USER; password in KAIROS_ADMIN_PASSWORD)")
	f.StringVar(&c.caFile, "ca-file", "", "PEM file of the CA certificates to trust for https:// addresses, instead of the system's (env KAIROS_CA_FILE)")
	f.BoolVar(&c.jsonOut, "json", false, "print JSON for scripts (errors too, on stderr)")
	f.Var(newDuration(&c.timeout, 30*time.Second), "request-timeout", "timeout of each request, on top of any long-poll wait")

	root.AddCommand(
		c.publishCmd(), c.consumeCmd(), c.ackCmd(), c.peekCmd(), c.sizeCmd(), c.destroyCmd(),
		c.deadletterCmd(), c.tokenCmd(), c.limitsCmd(), c.poolsCmd(), c.statsCmd(), c.versionCmd(),
		c.releaseCmd(), c.touchCmd(), c.cancelCmd(), c.queueConfigCmd(), c.queueGroupsCmd(), c.webhookCmd(), c.quotaCmd(), c.benchCmd(),
		c.scheduleCmd(),
	)
	root.AddCommand(c.pauseCmds()...)
	return root
}

// group returns a command that only holds subcommands: an unknown or
// missing subcommand is a usage error (cobra would print help and succeed).
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, a []string) error {
		if len(a) > 0 {
			return usagef("unknown command %q for %q", a[0], cmd.CommandPath())
		}
		cmd.SetOut(cmd.ErrOrStderr())
		_ = cmd.Help()
		return usagef("missing subcommand")
	}
	return cmd
}

// resolve fills the settings not given as flags from the environment.
func (c *cli) resolve(cmd *cobra.Command) error {
	fromEnv := func(flag, env string, dst *string) {
		if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
			return
		}
		if v := c.getenv(env); v != "" {
			*dst = v
		}
	}
	fromEnv("addr", "KAIROS_ADDR", &c.addr)
	fromEnv("token", "KAIROS_TOKEN", &c.token)
	fromEnv("namespace", "KAIROS_NAMESPACE", &c.namespace)
	fromEnv("admin-addr", "KAIROS_ADMIN_ADDR", &c.adminAddr)
	fromEnv("admin-user", "KAIROS_ADMIN_USER", &c.adminUser)
	fromEnv("ca-file", "KAIROS_CA_FILE", &c.caFile)
	c.adminPass = c.getenv("KAIROS_ADMIN_PASSWORD")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.caFile != "" {
		pool, err := client.LoadCAFile(c.caFile)
		if err != nil {
			return usageError{err}
		}
		c.tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		tr.TLSClientConfig = c.tlsConfig
	}
	c.httpClient = &http.Client{Transport: tr}
	return nil
}

// options are the client options common to every command.
func (c *cli) options() []client.Option {
	return []client.Option{
		client.WithHTTPClient(c.httpClient),
		client.WithTimeout(c.timeout),
		client.WithUserAgent("kairos-cli/" + version),
	}
}

// client returns a client of the namespace (from --namespace, or ns when
// not empty).
func (c *cli) client(ns string) (*client.Client, error) {
	if ns == "" {
		ns = c.namespace
	}
	if ns == "" {
		return nil, usagef("no namespace: use --namespace (-n) or KAIROS_NAMESPACE")
	}
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	// Propagate: publish --traceparent puts the trace context in ctx.
	opts := append(c.options(), client.WithNamespace(ns), otelclient.Propagate())
	if c.token != "" {
		opts = append(opts, client.WithToken(c.token))
	}
	cl, err := client.New(c.addr, opts...)
	if err != nil {
		return nil, usageError{err}
	}
	return cl, nil
}

// admin returns a client of the admin API.
func (c *cli) admin() (*client.Admin, error) {
	opts := c.options()
	if c.adminUser != "" {
		opts = append(opts, client.WithBasicAuth(c.adminUser, c.adminPass))
	}
	a, err := client.NewAdmin(c.adminAddr, opts...)
	if err != nil {
		return nil, usageError{err}
	}
	return a, nil
}

// printJSON writes v as one line of JSON to stdout.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.io.out)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// durationValue is a pflag.Value for durations that also accepts a plain
// number of seconds (lmstfy's CLI takes seconds).
type durationValue struct{ d *time.Duration }

func newDuration(d *time.Duration, def time.Duration) pflag.Value {
	*d = def
	return durationValue{d}
}

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (durationValue) Type() string { return "duration" }

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use 30s, 1m, 500ms or a number of seconds)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// isTerminal reports whether f is an interactive terminal (a character
// device; /dev/null counts as one, which only makes the progress output
// redraw in place).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
