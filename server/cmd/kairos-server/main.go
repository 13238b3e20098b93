// Command kairos-server runs Kairos: the lmstfy-compatible public API and
// the admin API, over the Redis pools named in its config file. Only a
// config that sets [Kairos] Embedded = true (config/dev.toml) gets an
// embedded in-memory Redis, where nothing is durable.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/server"
	"github.com/kairos-dev/kairos/server/app"
)

// Set by the Makefile with -ldflags -X.
var (
	version     = "unknown"
	buildCommit = "unknown"
	buildDate   = "unknown"
)

// defaultGCPercent is the garbage collector's target when GOGC is not set:
// the server's live heap is small and every request allocates, so a
// collection every 4x growth instead of 2x costs ~10 % less CPU per job
// (doc/performance.md). GOGC and GOMEMLIMIT in the environment win.
const defaultGCPercent = 400

// init fills in what the Makefile's -ldflags did not set from the Go build
// information: the module version of a `go install …@vX.Y.Z` build, and
// the VCS revision and time of a `go build` in a checkout.
func init() {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if v := info.Main.Version; version == "unknown" && v != "" && v != "(devel)" {
		version = v
	}
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && buildCommit == "unknown" && len(s.Value) >= 7:
			buildCommit = s.Value[:7]
		case s.Key == "vcs.time" && buildDate == "unknown":
			buildDate = s.Value
		}
	}
}

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Errors of serve that it has already printed: a bad command line (exit
// 2) and a config file that does not load (exit 1).
var (
	errUsage    = errors.New("usage")
	errReported = errors.New("reported")
)

// run is the whole program but the exit: it returns the process's exit
// code, 0 when the server stopped cleanly (or after -h or -v), 2 for a bad
// command line, 1 for anything else, whose cause it prints on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	err := serve(args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errReported):
		return 1
	}
	printError(stderr, "", err)
	return 1
}

const usageText = `usage: kairos-server [-c FILE] [-p FILE] [-sv] [-v] [-version] [-probe URL] [-migrate-from-lmstfy]

Runs Kairos: the lmstfy-compatible public API and the admin API, over the
Redis pools of the config file. lmstfy config files work unchanged;
doc/config.md documents every key. config/dev.toml ([Kairos] Embedded =
true) runs on an in-memory Redis, for development only.

`

// serve parses the command line, loads the config (printing every problem
// and warning of a file that does not load) and runs the server until a
// signal stops it.
func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kairos-server", flag.ContinueOnError)
	cfgPath := fs.String("c", "config/dev.toml", "config file (lmstfy config files work unchanged)")
	showVersion := fs.Bool("v", false, "print the version and exit")
	fs.BoolVar(showVersion, "version", false, "print the version and exit (as -v)")
	migrate := fs.Bool("migrate-from-lmstfy", false, "move every lmstfy job of the config's pools into Kairos's layout, print what was done and exit, serving nothing (stop lmstfy first; doc/upgrade.md)")
	skipVerify := fs.Bool("sv", false, "skip token verification (development only, as lmstfy's -sv)")
	pidFile := fs.String("p", "", "write the process id to this file")
	probe := fs.String("probe", "", "GET this URL (e.g. http://127.0.0.1:7777/healthz; https:// for a listener with [TLS], its certificate not verified), exit 0 on 200 and 1 otherwise, and do nothing else: the container HEALTHCHECK of images without curl")
	// The flag package writes the usage on -h as on a bad flag: -h asked
	// for it (stdout, exit 0), a bad flag did not (stderr, exit 2).
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = stdout.Write(out.Bytes())
			return nil
		}
		_, _ = stderr.Write(out.Bytes())
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kairos-server: unexpected argument %q (the config file is given with -c)\n", fs.Arg(0))
		return errUsage
	}
	if *probe != "" {
		return probeURL(*probe, stdout)
	}
	if *showVersion {
		fmt.Fprintf(stdout, "kairos-server %s (commit %s, built %s)\n", version, buildCommit, buildDate)
		return nil
	}
	cfg, warnings, err := config.LoadWithWarnings(*cfgPath)
	if err != nil {
		printError(stderr, *cfgPath, err)
		for _, w := range warnings {
			fmt.Fprintf(stderr, "kairos-server: config %s: warning: %s\n", *cfgPath, w)
		}
		return errReported
	}
	log, closeLog, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer closeLog()
	for _, w := range warnings {
		log.WithField("config", *cfgPath).Warn(w)
	}
	redis.SetLogger(app.RedisLogger{Log: log})
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return fmt.Errorf("pid file: %w", err)
		}
		defer os.Remove(*pidFile)
	}
	if *skipVerify {
		log.Warn("token verification is OFF (-sv): anyone can use any namespace")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if *migrate {
		return migrateFromLmstfy(ctx, cfg, log, stdout)
	}
	a, err := app.New(ctx, cfg, app.Options{
		Logger:     log,
		SkipVerify: *skipVerify,
		Version:    server.VersionInfo{Version: version, BuildCommit: buildCommit, BuildDate: buildDate},
	})
	if err != nil {
		return err
	}
	if err := a.Listen(); err != nil {
		return err
	}
	log.Infof("kairos %s: API on %s, admin API on %s", version, a.Server.URL(), a.Server.AdminURL())
	log.Info(tokenHint(cfg, a.Server.AdminURL()))
	if cfg.DashboardEnabled() {
		log.Info("dashboard: " + a.Server.AdminURL() + "/ui/")
	}
	go func() {
		// A second signal during the graceful shutdown forces the exit.
		<-ctx.Done()
		stop()
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		<-c
		log.Warn("second signal: exiting now")
		os.Exit(2)
	}()
	err = a.Run(ctx)
	log.Info("stopped")
	return err
}

// migrateFromLmstfy is -migrate-from-lmstfy: the start of a server whose
// standalone and Sentinel pools all say LmstfyData = "import" (each
// imports into itself, or into its MigrateTo pool), without serving, then
// a report of each pool on stdout. Run again after a stop, it resumes.
func migrateFromLmstfy(ctx context.Context, cfg *config.Config, log logrus.FieldLogger, stdout io.Writer) error {
	for name, rc := range cfg.Pool {
		if !rc.IsCluster() {
			rc.LmstfyData = config.LmstfyImport
			cfg.Pool[name] = rc
		}
	}
	a, err := app.New(ctx, cfg, app.Options{Logger: log, Version: server.VersionInfo{Version: version, BuildCommit: buildCommit, BuildDate: buildDate}})
	if err != nil {
		return err
	}
	defer a.Close()
	for _, name := range cfg.PoolNames() {
		if cfg.Pool[name].IsCluster() {
			continue
		}
		imp, ok := a.LmstfyImports[name]
		if !ok {
			fmt.Fprintf(stdout, "pool %s: no lmstfy job found; nothing changed\n", name)
			continue
		}
		r := imp.Result
		fmt.Fprintf(stdout, "pool %s: imported %d lmstfy jobs into pool %s in %.1fs: %d ready, %d delayed, %d in flight, %d dead; "+
			"%d were in Kairos already (an earlier import), %d expired, %d malformed entries removed; %d lmstfy registries deleted; "+
			"tokens and limits are used as they are\n",
			name, r.Imported(), imp.Into, imp.Took.Seconds(), r.Ready, r.Delayed, r.InFlight, r.Dead, r.Already, r.Expired, r.Malformed, r.Registries)
	}
	return nil
}

// printError prints err on stderr: one line, or, when err holds
// configuration problems, a line per problem under a heading naming the
// file (path; "" when err does not come from the file).
func printError(stderr io.Writer, path string, err error) {
	problems := config.Problems(err)
	if len(problems) == 0 {
		fmt.Fprintln(stderr, "kairos-server:", err)
		return
	}
	where := "config"
	if path != "" {
		where = "config " + path
	}
	noun := "problems"
	if len(problems) == 1 {
		noun = "problem"
	}
	fmt.Fprintf(stderr, "kairos-server: %s: %d %s:\n", where, len(problems), noun)
	for _, p := range problems {
		fmt.Fprintf(stderr, "  %s\n", p)
	}
}

// tokenHint is the start-up line telling how to create a first token.
// With [Accounts] the admin API needs basic auth, so the command carries
// -u with the first user name that may create tokens of every namespace
// (the admin role, no namespace list) and PASSWORD in place of its
// password, which is never printed.
func tokenHint(cfg *config.Config, adminURL string) string {
	auth := ""
	if len(cfg.Accounts) > 0 {
		users := slices.Sorted(maps.Keys(cfg.Accounts))
		user := users[0]
		for _, u := range users {
			if a := cfg.Access(u); a.Role == config.RoleAdmin && a.Namespaces == nil {
				user = u
				break
			}
		}
		auth = "-u " + shellQuote(user+":PASSWORD") + " "
	}
	hint := fmt.Sprintf("create a token: curl %s-X POST '%s/token/<namespace>?description=first'", auth, adminURL)
	if auth != "" {
		hint += " (PASSWORD: that user's password in [Accounts])"
	}
	return hint
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// probeURL is -probe: one GET with a short deadline, success only on 200.
// An https:// URL does not verify the certificate, as Kubernetes' HTTPS
// probes do not: the probe sends no secret and only reads a status, and
// the server's own certificate rarely names 127.0.0.1.
func probeURL(url string, stdout io.Writer) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a health probe, see above
	c := http.Client{Timeout: 3 * time.Second, Transport: tr}
	res, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: %s: %s %s", url, res.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "%s: %s\n", url, res.Status)
	return nil
}

// newLogger builds the logger from LogLevel, LogFormat and LogDir (the error
// log goes to LogDir/error.log when LogDir is set, else to stdout).
func newLogger(cfg *config.Config) (*logrus.Logger, func(), error) {
	log := logrus.New()
	log.Out = os.Stdout
	level, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, nil, fmt.Errorf("LogLevel: %w", err)
	}
	log.SetLevel(level)
	if cfg.LogFormat == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	} else {
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	closeFn := func() {}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("LogDir: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(cfg.LogDir, "error.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("LogDir: %w", err)
		}
		log.Out = f
		closeFn = func() { _ = f.Close() }
	}
	return log, closeFn, nil
}
