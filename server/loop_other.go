//go:build !linux

package server

import (
	"errors"
	"net"
)

// loopsSupported is whether this platform has event loops (Linux only):
// elsewhere net/http serves every request.
const loopsSupported = false

// loopGroup stands for the event loops, which this platform lacks.
type loopGroup struct{ handoff net.Listener }

func (s *Server) startLoops(net.Listener, int) (*loopGroup, error) {
	return nil, errors.New("event loops need Linux")
}

func (g *loopGroup) shutdown() {}
