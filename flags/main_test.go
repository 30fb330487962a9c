package flags

import (
	"testing"

	"go.uber.org/goleak"
)

// Gossip.Start joins a membership, whose goroutines its Close stops.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
