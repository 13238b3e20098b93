package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kairos-dev/kairos/engine"
)

// The server's name rules (engine.ValidName, engine.ValidQueueName) are
// checked before any request: a bad name is a usage error (exit status 2)
// that says what is wrong, not the 404 "api not found" a name with a '/'
// gets from the router, nor a 400 after a round trip.

// checkNamespace reports a namespace the server would refuse.
func checkNamespace(ns string) error {
	if !engine.ValidName(ns) {
		return usagef("invalid namespace %q: 1..%d characters from A-Z a-z 0-9 - _", ns, engine.MaxNameLength)
	}
	return nil
}

// checkQueues reports the first queue name the server would refuse.
func checkQueues(queues ...string) error {
	for _, q := range queues {
		if !engine.ValidQueueName(q) {
			return usagef("invalid queue name %q: 1..%d characters from A-Z a-z 0-9 - _, not starting with _", q, engine.MaxNameLength)
		}
	}
	return nil
}

// queueArgs is args(check) that also checks the first n arguments (every
// argument when n < 0) as queue names.
func queueArgs(check cobra.PositionalArgs, n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := args(check)(cmd, a); err != nil {
			return err
		}
		k := n
		if k < 0 || k > len(a) {
			k = len(a)
		}
		return checkQueues(a[:k]...)
	}
}

// serverDefault marks flags whose help says what applies when they are
// left out (they are then not sent, so the server's default applies):
// pflag would otherwise print the flag variable's zero value as if it were
// the default.
func serverDefault(fl *pflag.FlagSet, names ...string) {
	for _, n := range names {
		fl.Lookup(n).DefValue = ""
	}
}

// splitQueues splits a consume's QUEUE[,QUEUE...] arguments into queues
// and checks them.
func splitQueues(a []string) ([]string, error) {
	var queues []string
	for _, arg := range a {
		queues = append(queues, strings.Split(arg, ",")...)
	}
	return queues, checkQueues(queues...)
}
