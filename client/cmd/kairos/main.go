// Command kairos is the command-line tool of Kairos: publish (one job, or
// a JSON Lines file in bulk with a progress bar), consume, peek, queue
// sizes, dead letters, tokens, pools and a live table of queue sizes.
//
// Settings come from flags or the environment (KAIROS_ADDR, KAIROS_TOKEN,
// KAIROS_NAMESPACE, KAIROS_ADMIN_ADDR, KAIROS_ADMIN_USER,
// KAIROS_ADMIN_PASSWORD). Every command has --help; --json prints
// machine-readable output; the exit status tells scripts what happened
// (see doc/cli.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Set by the Makefile with -ldflags -X.
var (
	version     = "dev"
	buildCommit = "unknown"
	buildDate   = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.Getenv)
	stop()
	os.Exit(code)
}
