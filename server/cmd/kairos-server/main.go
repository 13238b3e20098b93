// Command kairos-server runs Kairos: the lmstfy-compatible public API and
// the admin API, over the Redis pools named in its config file. With no
// Redis address configured it embeds an in-memory Redis (nothing durable).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
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

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kairos-server:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kairos-server", flag.ContinueOnError)
	cfgPath := fs.String("c", "config/dev.toml", "config file (lmstfy config files work unchanged)")
	showVersion := fs.Bool("v", false, "print the version and exit")
	skipVerify := fs.Bool("sv", false, "skip token verification (development only, as lmstfy's -sv)")
	pidFile := fs.String("p", "", "write the process id to this file")
	probe := fs.String("probe", "", "GET this URL (e.g. http://127.0.0.1:7777/healthz), exit 0 on 200 and 1 otherwise, and do nothing else: the container HEALTHCHECK of images without curl")
	if err := fs.Parse(args); err != nil {
		return err
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
		return err
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
	log.Infof("kairos %s: API on http://%s, admin API on http://%s", version, a.Server.Addr(), a.Server.AdminAddr())
	log.Infof("create a token: curl -X POST 'http://%s/token/<namespace>?description=first'", a.Server.AdminAddr())
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

// probeURL is -probe: one GET with a short deadline, success only on 200.
func probeURL(url string, stdout io.Writer) error {
	c := http.Client{Timeout: 3 * time.Second}
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
