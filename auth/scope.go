package auth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kairos-dev/kairos/engine"
)

// Role is what a scoped token may do.
type Role string

// Roles. RoleRead cannot be granted: every token of a namespace has it for
// the queues its scope allows.
const (
	RolePublish Role = "publish" // publish, bulk publish, re-publish
	RoleConsume Role = "consume" // consume, ACK (delete job)
	RoleManage  Role = "manage"  // destroy queue, dead-letter respawn/delete
	RoleRead    Role = "read"    // NOT grantable: peek, size, dead-letter peek
)

// grantable reports whether r may appear in a Scope.
func (r Role) grantable() bool {
	switch r {
	case RolePublish, RoleConsume, RoleManage:
		return true
	}
	return false
}

// Scope restricts a token. The zero Scope allows everything in the token's
// namespace (that is what every lmstfy token is).
type Scope struct {
	Queues []string `json:"queues,omitempty"` // empty = all queues
	Roles  []Role   `json:"roles,omitempty"`  // empty = all roles
}

// IsZero reports whether s places no restriction.
func (s Scope) IsZero() bool {
	return len(s.Queues) == 0 && len(s.Roles) == 0
}

// Allows reports whether the scope permits role on queue. RoleRead is
// allowed whenever the queue is; an unknown role is never allowed.
func (s Scope) Allows(queue string, role Role) bool {
	if len(s.Queues) > 0 && !slices.Contains(s.Queues, queue) {
		return false
	}
	if role == RoleRead {
		return true
	}
	if !role.grantable() {
		return false
	}
	return len(s.Roles) == 0 || slices.Contains(s.Roles, role)
}

// Validate checks that every role is grantable and every queue name valid;
// errors wrap ErrInvalidScope.
func (s Scope) Validate() error {
	for _, r := range s.Roles {
		if !r.grantable() {
			return fmt.Errorf("%w: unknown role %q (want publish, consume or manage)", ErrInvalidScope, r)
		}
	}
	for _, q := range s.Queues {
		if !engine.ValidQueueName(q) {
			return fmt.Errorf("%w: invalid queue name %q", ErrInvalidScope, q)
		}
	}
	return nil
}

// ParseScope builds a Scope from comma-separated lists (the admin API's
// `queues` and `roles` parameters). Blanks around items and empty items are
// ignored, duplicates dropped; "" means no restriction. Errors wrap
// ErrInvalidScope.
func ParseScope(queues, roles string) (Scope, error) {
	var s Scope
	for _, q := range splitList(queues) {
		if !slices.Contains(s.Queues, q) {
			s.Queues = append(s.Queues, q)
		}
	}
	for _, r := range splitList(roles) {
		role := Role(strings.ToLower(r))
		if !slices.Contains(s.Roles, role) {
			s.Roles = append(s.Roles, role)
		}
	}
	if err := s.Validate(); err != nil {
		return Scope{}, err
	}
	return s, nil
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
