package redistest

import "syscall"

// procAttr makes the kernel kill a redis-server when the test binary dies
// without cleaning up (a -timeout panic, a SIGKILL), so that no server
// outlives its tests. Go only ends an OS thread whose goroutine exits
// while locked to it, which the tests here never do.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
