package testcluster_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
)

// A shard that fails its next two calls with Unavailable: the client
// tries the pull again and it succeeds. A test calls Start(t, cores...),
// which stops the servers when the test ends, instead of Serve and Close.
func Example() {
	cores, err := testcluster.NewCores(4, 1, 4, 0.01) // w = [0 1 2 3], SGD at lr 0.01
	if err != nil {
		panic(err)
	}
	c, err := testcluster.Serve(cores...)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	c.Shard(0).FailNext(codes.Unavailable, 2)
	params := make([]float32, 4)
	clocks, err := cl.Pull(ctx, params)
	fmt.Println(params, clocks, err)
	// Output: [0 1 2 3] [0] <nil>
}
