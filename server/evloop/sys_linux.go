//go:build linux

package evloop

import (
	"syscall"
	"unsafe"
)

// The event loop's system calls never block: its sockets and wake pipe
// are non-blocking, and it polls epoll with a zero timeout (it parks in the
// Go poller instead). So it makes them raw, without the runtime's
// system-call bookkeeping: syscall.Read, Write and the like enter a
// "syscall" state in which the scheduler may hand the loop's P to another
// thread, a futex wake-up and a thread switch that buy nothing here (at
// 4,000 jobs/s the server spent 3-5 % less CPU per job). rawRead and
// rawWrite are in rw_linux.go, and in rw_race_linux.go under the
// race detector.

// rawEpollWait is epoll_wait(2) with a zero timeout (as epoll_pwait with no
// signal mask, which every Linux architecture has).
func rawEpollWait(ep int, events []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawEpollCtl is epoll_ctl(2).
func rawEpollCtl(ep, op, fd int, ev *syscall.EpollEvent) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0); e != 0 {
		return e
	}
	return nil
}
