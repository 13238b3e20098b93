//go:build !unix

package client

import "net"

// peerOpen cannot tell without blocking here: a pooled connection the
// server closed is found out by the request sent on it (fastRoundTrip
// retries a replayable one).
func peerOpen(net.Conn) bool { return true }
