package rdb

import (
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine/enginetest"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The contract suite on a real Redis Cluster (three masters, one replica
// each): every script must touch one slot, and wake-ups must cross the
// cluster (sharded Pub/Sub).
func TestContractCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness {
		c.Flush(t)
		return harness(t, client, time.Sleep)
	})
}

func TestExtendedCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	enginetest.RunExtended(t, func(t *testing.T) *enginetest.Harness {
		c.Flush(t)
		return harness(t, client, time.Sleep)
	})
}
