//go:build !unix

package bench

import (
	"errors"
	"time"
)

// selfCPU is not available on this system.
func selfCPU() (time.Duration, error) {
	return 0, errors.New("bench: the load generator's CPU time is measured on Unix systems only")
}
