package pscall_test

import (
	"fmt"
	"time"

	"github.com/shoalml/shoal/pscall"
)

// A sync worker's push-pull of step 3 over two shards, leaving out the
// second (it already applied every step of the run).
func Example() {
	var waited time.Duration
	args := pscall.PushPullArgs{
		PushArgs: pscall.PushArgs{WorkerID: 1, Step: 3, Clocks: pscall.Clocks{3, 3}, Grads: make([]float32, 8), Skip: []bool{false, true}},
		Pull:     true,
		Steps:    pscall.Clocks{4, 4},
		Dst:      make([]float32, 8),
		Waited:   &waited,
	}
	fmt.Println(args.Skips(0), args.Skips(1))
	// Output: false true
}
