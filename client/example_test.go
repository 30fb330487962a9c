package client_test

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
)

// A worker's traffic against two shards of a 4-float vector [0 1 2 3],
// served in this process on loopback (plain SGD, learning rate 0.5): a
// pull, a push, and a push-pull, the step of a worker in one round trip.
func Example() {
	cores, err := testcluster.NewCores(4, 2, 2, 0.5)
	if err != nil {
		panic(err)
	}
	servers, err := testcluster.ServeTCP(cores...)
	if err != nil {
		panic(err)
	}
	defer servers.Close()

	ctx := context.Background()
	c, err := client.Dial(ctx, servers.Addrs()) // "host:port" of each shard, in shard order
	if err != nil {
		panic(err)
	}
	defer c.Close()
	params, grads := make([]float32, 4), []float32{1, 1, 1, 1}
	clocks, err := c.Pull(ctx, params)
	if err != nil {
		panic(err)
	}
	fmt.Println("pulled", params, "at clocks", clocks)
	res, err := c.Push(ctx, client.PushArgs{WorkerID: 1, Step: 0, Clocks: clocks, Grads: grads})
	if err != nil {
		panic(err)
	}
	fmt.Println("pushed: clocks", res.Clocks)
	pp, err := c.PushPull(ctx, client.PushPullArgs{
		PushArgs: client.PushArgs{WorkerID: 1, Step: 1, Clocks: res.Clocks, Grads: grads},
		Pull:     true, Dst: params,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("pushed and pulled", params, "at clocks", pp.PullClocks)
	// Output:
	// pulled [0 1 2 3] at clocks [0 0]
	// pushed: clocks [1 1]
	// pushed and pulled [-1 0 1 2] at clocks [2 2]
}
