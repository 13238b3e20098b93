//go:build !race

package server

// raceEnabled is whether the race detector is on: slow tests do less.
const raceEnabled = false
