package psclient_test

import (
	"context"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// The Downpour strategy of worker rank 0, over the servers at addrs.
func ExampleNew() {
	ctx := context.Background()
	cl, err := client.Dial(ctx, []string{"localhost:7070", "localhost:7071"})
	if err != nil {
		return
	}
	defer cl.Close()
	info := cl.Info()
	s, err := worker.NewAsync(psclient.New(cl), info.Plan.VectorLen, info.Plan.Servers, worker.AsyncConfig{WorkerID: 0})
	if err != nil {
		return
	}
	_ = s // the strategy of worker.New
}
