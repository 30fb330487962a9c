package rawtcp_test

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/internal/rawtcp"
)

// A 512,512 MLP's float32 vector each way, as a parameter server's pull
// and push move it. The times vary from run to run; the bytes do not.
func Example() {
	cfg := rawtcp.DefaultConfig()
	cfg.Bytes = 669706 * 4
	cfg.Iters, cfg.Warmup = 3, 1
	r, err := rawtcp.Measure(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d trips, %d bytes each way: sent %d, received %d\n", 1+r.Warmup+r.Iters, r.Bytes, r.Sent, r.Received)
	// Output: 5 trips, 2678824 bytes each way: sent 13394120, received 13394120
}
