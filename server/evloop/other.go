//go:build !linux

package evloop

import (
	"errors"
	"net"
)

// Supported is whether this platform has event loops (Linux only):
// elsewhere net/http serves every request.
const Supported = false

// Group stands for the event loops, which this platform lacks.
type Group struct{}

// loopConn stands for a loop's connection.
type loopConn struct{}

// Start fails: this platform has no event loops.
func Start(net.Listener, Config) (*Group, error) {
	return nil, errors.New("event loops need Linux")
}

// Handoff is never called: Start fails.
func (g *Group) Handoff() net.Listener { return nil }

// Shutdown does nothing.
func (g *Group) Shutdown() {}
