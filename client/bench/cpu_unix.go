//go:build unix

package bench

import (
	"fmt"
	"syscall"
	"time"
)

// selfCPU returns this process's CPU time (getrusage(RUSAGE_SELF)).
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("bench: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
