package migration

import (
	"testing"

	"github.com/kairos-dev/kairos/engine/enginetest"
)

// A migrating pool serves sharded queues as any pool does.
func TestContractSharded(t *testing.T) {
	enginetest.RunSharded(t, func(t *testing.T) *enginetest.Harness { _, h := miniPair(t); return h })
}
