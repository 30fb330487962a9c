package ps

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the parallel
// step's and the tests' own waiters all end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
