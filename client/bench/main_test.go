package bench

import (
	"testing"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestMain stops the cluster redistest.SharedCluster starts for the
// cluster tests.
func TestMain(m *testing.M) { redistest.Main(m) }
