//go:build unix

package client

import (
	"net"
	"syscall"
)

// peerOpen reports whether the peer of c has neither closed it nor sent
// anything: one non-blocking read(2), which finds nothing to read (a
// deadline in the past would not do: Go answers it without the system
// call).
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, err := syscall.Read(int(fd), b[:])
		open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && open
}
