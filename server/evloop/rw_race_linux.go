//go:build linux && race

package evloop

import "syscall"

// Under the race detector the loop reads and writes through package
// syscall: its Read and Write tell the detector that what one goroutine
// wrote to a socket or pipe happens before another reads it, which tests
// rely on (a test sets its fake engine up, then sends a request). The raw
// calls of rw_linux.go would hide that; `make test` runs the loop's
// tests without -race too, so that they run.

func rawRead(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }

func rawWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
