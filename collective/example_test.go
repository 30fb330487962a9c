package collective_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/shoalml/shoal/collective"
)

// Four ranks, one goroutine each, over in-memory transports: each holds
// gradients equal to its rank plus one, and Allreduce leaves the mean,
// 2.5, on every rank. With collective/net's transports the ranks are
// processes, and the code of a rank is the same.
func Example() {
	ctx := context.Background()
	ts := collective.NewMemGroup(4)
	means := make([]float32, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			defer tr.Close()
			c, err := collective.New(tr, collective.DefaultConfig())
			if err != nil {
				errs[r] = err
				return
			}
			grads := make([]float32, 1<<10) // this rank's gradients
			for i := range grads {
				grads[i] = float32(c.Rank() + 1)
			}
			errs[r] = c.Allreduce(ctx, grads, collective.Average)
			means[r] = grads[len(grads)-1]
		})
	}
	wg.Wait()
	fmt.Println(means, errs)
	// Output: [2.5 2.5 2.5 2.5] [<nil> <nil> <nil> <nil>]
}
