//go:build race

package client_test

// raceOn: the race detector is on (it allocates on its own account, so
// allocation counts are not checked).
const raceOn = true
