package engine

import "context"

// Fair groups and in-flight limits inside a queue (issue #32).
//
// A job may carry a group (PublishRequest.Group): a name like a queue's,
// up to MaxGroupLength characters; "" is the default group. A queue's
// consume serves its groups in turn (weighted round robin, the weights in
// QueueConfig.GroupWeights), so one group's backlog never holds back
// another's ready jobs; within a group the order is as today (priorities
// first, then FIFO). A queue that never had a grouped job and has no
// limits behaves byte for byte as before.
//
// QueueConfig.MaxInFlight limits the queue's jobs in flight at once and
// GroupMaxInFlight each group's; both are checked inside the consume
// script, so they hold across every server, pull consumer and webhook
// delivery. A slot frees on ACK, release, TTR expiry (the pump), dead
// lettering and delete, and the script that frees it wakes the queue's
// waiters. A consume that finds the limit reached gets nothing and waits
// as on an empty queue.
//
// engine/rdb implements Grouper; the server asks for it with a type
// assertion, as for Dashboard and Tenancy.

// MaxGroupLength is the longest group name.
const MaxGroupLength = 64

// MaxGroupWeight is the largest weight QueueConfig.GroupWeights may give.
const MaxGroupWeight = 100

// ValidGroup reports whether s is a valid group name: 1..MaxGroupLength
// characters from [-_A-Za-z0-9] (as a queue's, '_' first included).
func ValidGroup(s string) bool {
	return len(s) <= MaxGroupLength && ValidName(s)
}

// GroupStats is one group of a queue as the dashboard shows it.
type GroupStats struct {
	Group string `json:"group"`
	// Ready counts the group's ready jobs (priority ones included).
	Ready int64 `json:"ready"`
	// InFlight counts the group's jobs in flight now.
	InFlight int64 `json:"in_flight"`
	// Weight is the group's weight in the round robin (1 unless set).
	Weight int `json:"weight"`
	// Limited is true while the group is at GroupMaxInFlight.
	Limited bool `json:"limited"`
}

// QueueGroups is a queue's groups, biggest (ready + in flight) first.
type QueueGroups struct {
	// InFlight counts the queue's jobs in flight now (every group).
	InFlight int64 `json:"in_flight"`
	// MaxInFlight and GroupMaxInFlight are the queue's limits (0 = none).
	MaxInFlight      int `json:"max_in_flight"`
	GroupMaxInFlight int `json:"group_max_in_flight"`
	// Groups are at most the limit asked for, biggest first.
	Groups []GroupStats `json:"groups"`
	// Total is how many groups the queue has with a ready or in-flight
	// job; Truncated is true when Groups holds fewer.
	Total     int  `json:"total"`
	Truncated bool `json:"truncated"`
}

// Grouper is the part of an engine that reports a queue's groups.
type Grouper interface {
	// QueueGroups returns up to limit groups of the queue (every shard of
	// a sharded queue), biggest first.
	QueueGroups(ctx context.Context, namespace, queue string, limit int) (QueueGroups, error)
}
