package gpu

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Device's executor goroutine ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
